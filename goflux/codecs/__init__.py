"""Codecs for the formats Go goflux services speak beyond JSON (goencode's family).

Serialization codecs, each a :class:`goflux.Codec` with :class:`goflux.JsonCodec`'s
contract (pydantic validation on decode, :class:`~goflux.DecodeError` and
:class:`~goflux.EncodeError` naming the type and the cause, typed for mypy):
:class:`MsgpackCodec`, :class:`YamlCodec`, :class:`TomlCodec`, :class:`XmlCodec`,
and :class:`CsvCodec` (a list of rows).

Byte transforms are ``Codec[bytes]`` that follow a serialising codec in a pipe
(compression, binary-to-text encodings), and :func:`pipe` chains them::

    from goflux import JsonCodec
    from goflux.codecs import Gzip, pipe

    codec = pipe(JsonCodec(Order), Gzip())  # a Codec[Order]: gzip-compressed JSON

Each writes what the matching goencode codec of a Go goflux service writes and reads
what it reads. Compression decodes within a bound (``max_size``, 64 MiB by default).
Each format's library is an optional dependency, imported when a codec is built:
``pip install 'goflux[msgpack]'`` (``yaml``, ``toml``, ``xml``, ``compression``), or
``'goflux[codecs]'`` for all. CSV, Gzip, Flate and the binary encodings need only the
standard library.
"""

from __future__ import annotations

from goflux._exports import publish_names as _publish_names
from goflux.codecs._binary import Ascii85, Base32, Base64, Hex
from goflux.codecs._bounds import DEFAULT_MAX_SIZE
from goflux.codecs._compression import Brotli, Flate, Gzip, Snappy, Zstd
from goflux.codecs._csv import CsvCodec
from goflux.codecs._msgpack import MsgpackCodec
from goflux.codecs._pipe import Pipe, pipe
from goflux.codecs._toml import TomlCodec
from goflux.codecs._xml import XmlCodec
from goflux.codecs._yaml import YamlCodec

__all__ = (
    "DEFAULT_MAX_SIZE",
    "Ascii85",
    "Base32",
    "Base64",
    "Brotli",
    "CsvCodec",
    "Flate",
    "Gzip",
    "Hex",
    "MsgpackCodec",
    "Pipe",
    "Snappy",
    "TomlCodec",
    "XmlCodec",
    "YamlCodec",
    "Zstd",
    "pipe",
)

_publish_names(__name__, globals())
