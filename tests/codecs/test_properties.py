"""Any bytes round-trip through every byte codec; any input decodes or is a DecodeError."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from goflux import DecodeError
from goflux.codecs import (
    Ascii85,
    Base32,
    Base64,
    Brotli,
    Flate,
    Gzip,
    Hex,
    Snappy,
    Zstd,
    pipe,
)

CODECS: list[Any] = [
    Gzip(),
    Gzip(1),
    Flate(-2),
    Zstd(),
    Brotli(0),
    Snappy(),
    Base64(),
    Base64("url", padding=False),
    Base32(),
    Base32("hex", padding=False),
    Hex(),
    Ascii85(),
    pipe(Gzip(), Base64()),
]


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000), st.sampled_from(CODECS))
def test_any_bytes_round_trip(data: bytes, codec: Any) -> None:
    assert codec.decode(codec.encode(data)) == data


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(CODECS))
def test_any_input_decodes_or_is_a_decode_error(data: bytes, codec: Any) -> None:
    size = None
    try:
        out = codec.decode(data)
    except DecodeError as exc:
        size = exc.size
    else:
        assert type(out) is bytes
    assert size in (None, len(data))


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=1, max_size=2000), st.sampled_from(CODECS[:6]), st.data())
def test_any_truncation_is_a_decode_error(data: bytes, codec: Any, draw: st.DataObject) -> None:
    encoded = codec.encode(data)
    cut = draw.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    try:
        out = codec.decode(encoded[:cut])
    except DecodeError:
        return
    # Only a cut that leaves a whole stream can decode (zstd: nothing is nothing).
    assert (out, cut) == (b"", 0)
