"""Codecs for the formats Go goflux services speak, beyond JSON (goencode's family).

Serialization codecs, each a :class:`goflux.Codec` with :class:`goflux.JsonCodec`'s
contract (pydantic validation on decode, :class:`~goflux.DecodeError` and
:class:`~goflux.EncodeError` naming the type and the cause, typed for mypy):
:class:`MsgpackCodec`, :class:`YamlCodec`, :class:`TomlCodec`, :class:`XmlCodec`,
and :class:`CsvCodec` (a list of rows).

Each format's library is an optional dependency, imported when a codec is built:
``pip install 'goflux[msgpack]'`` (``yaml``, ``toml``, ``xml``), or
``'goflux[codecs]'`` for all. CSV needs only the standard library.
"""

from __future__ import annotations

from goflux.codecs._csv import CsvCodec
from goflux.codecs._msgpack import MsgpackCodec
from goflux.codecs._toml import TomlCodec
from goflux.codecs._xml import XmlCodec
from goflux.codecs._yaml import YamlCodec

__all__ = (
    "CsvCodec",
    "MsgpackCodec",
    "TomlCodec",
    "XmlCodec",
    "YamlCodec",
)
