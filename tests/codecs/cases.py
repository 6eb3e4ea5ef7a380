"""A representative codec of each kind, with a value, for the tests that run them on transports.

Serialization codecs (MessagePack, YAML, TOML, XML, CSV) and pipes that compress or
turn bytes into text. Each case's id is a subject token, a Key-Value key and a path
segment alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from goflux import Codec, DecodeError, JsonCodec
from goflux.codecs import (
    Base64,
    Brotli,
    CsvCodec,
    Gzip,
    MsgpackCodec,
    Snappy,
    TomlCodec,
    XmlCodec,
    YamlCodec,
    Zstd,
    pipe,
)
from tests.models import Order, Quote

# Text that every format must carry as it is: markup, quotes, separators, non-ASCII.
ORDER = Order(
    id="o-1",
    customerId="c-ü 客户",
    amount=12.5,
    lines=["a,b", 'say "hi" & <bye>', "🎉"],
    created=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
)
ROWS = [Quote(sku="a,b", quantity=1), Quote(sku='"ü"\nzwei', quantity=2)]

# Bytes no case decodes: a byte MessagePack never uses, invalid UTF-8, no
# compression's or Base64's framing.
UNDECODABLE = b"\xc1\xff not any codec's bytes"


class ContractBreaking:
    """JSON, but a payload it cannot decode raises ``ValueError``, not ``DecodeError``.

    A custom codec that breaks the contract must not turn an undecodable payload into
    a handler failure retried forever: every transport treats it as undecodable.
    """

    content_type = "application/json"

    def __init__(self) -> None:
        self._json = JsonCodec(Order)

    def __repr__(self) -> str:
        return "ContractBreaking()"

    def encode(self, value: Order, /) -> bytes:
        return self._json.encode(value)

    def decode(self, data: bytes, /) -> Order:
        try:
            return self._json.decode(data)
        except DecodeError as exc:
            raise ValueError(f"not an order: {exc}") from None


@dataclass(frozen=True)
class CodecCase:
    """A codec, a value it carries, and the content type it must state."""

    id: str
    codec: Codec[Any]
    value: Any
    content_type: str

    def __str__(self) -> str:
        return self.id


CASES = (
    CodecCase("msgpack", MsgpackCodec(Order), ORDER, "application/vnd.msgpack"),
    CodecCase("yaml", YamlCodec(Order), ORDER, "application/yaml"),
    CodecCase("toml", TomlCodec(Order), ORDER, "application/toml"),
    CodecCase("xml", XmlCodec(Order), ORDER, "application/xml"),
    CodecCase("csv", CsvCodec(Quote), ROWS, "text/csv; charset=utf-8"),
    CodecCase("msgpack-gzip", pipe(MsgpackCodec(Order), Gzip()), ORDER, "application/gzip"),
    CodecCase("json-zstd", pipe(JsonCodec(Order), Zstd()), ORDER, "application/zstd"),
    CodecCase(
        "json-brotli-base64",
        pipe(JsonCodec(Order), Brotli(), Base64()),
        ORDER,
        "text/plain; charset=us-ascii",
    ),
    CodecCase("json-snappy", pipe(JsonCodec(Order), Snappy()), ORDER, "application/octet-stream"),
    CodecCase("contract-breaking", ContractBreaking(), ORDER, "application/json"),
)


def undecodable(case: CodecCase) -> bytes:
    """:data:`UNDECODABLE`, after checking the case's codec refuses it (anyhow)."""
    try:
        case.codec.decode(UNDECODABLE)
    except Exception:  # noqa: BLE001 - ContractBreaking raises ValueError
        return UNDECODABLE
    raise AssertionError(f"{case.codec!r} decodes {UNDECODABLE!r}")
