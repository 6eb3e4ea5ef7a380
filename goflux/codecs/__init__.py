"""More codecs: compression, binary-to-text encodings, and :func:`pipe` to chain them.

Byte transforms are ``Codec[bytes]`` that follow a serialising codec in a pipe::

    from goflux import JsonCodec
    from goflux.codecs import Gzip, pipe

    codec = pipe(JsonCodec(Order), Gzip())  # a Codec[Order]: gzip-compressed JSON

Each writes what the matching goencode codec of a Go goflux service writes and reads
what it reads. Compression decodes within a bound (``max_size``, 64 MiB by default).
Zstd, Brotli and Snappy need ``pip install 'goflux[compression]'``; their libraries
are imported when such a codec is first made.
"""

from __future__ import annotations

from goflux._exports import publish_names as _publish_names
from goflux.codecs._binary import Ascii85, Base32, Base64, Hex
from goflux.codecs._bounds import DEFAULT_MAX_SIZE
from goflux.codecs._compression import Brotli, Flate, Gzip, Snappy, Zstd
from goflux.codecs._pipe import Pipe, pipe

__all__ = (
    "DEFAULT_MAX_SIZE",
    "Ascii85",
    "Base32",
    "Base64",
    "Brotli",
    "Flate",
    "Gzip",
    "Hex",
    "Pipe",
    "Snappy",
    "Zstd",
    "pipe",
)

_publish_names(__name__, globals())
