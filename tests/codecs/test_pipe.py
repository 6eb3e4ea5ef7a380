from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from goflux import BytesCodec, DecodeError, EncodeError, JsonCodec, StrCodec
from goflux._codecs import content_type_of
from goflux.codecs import Base64, Brotli, CsvCodec, Gzip, Hex, Pipe, Snappy, Zstd, pipe
from tests.models import Customer, Order, Quote, order


class Recorder:
    """A byte stage that tags what passes through and notes the order of calls."""

    content_type = "application/x-recorder"

    def __init__(self, tag: bytes, calls: list[str]) -> None:
        self.tag = tag
        self.calls = calls

    def __repr__(self) -> str:
        return f"Recorder({self.tag!r})"

    def encode(self, value: bytes, /) -> bytes:
        self.calls.append(f"encode {self.tag.decode()}")
        return value + self.tag

    def decode(self, data: bytes, /) -> bytes:
        self.calls.append(f"decode {self.tag.decode()}")
        if not data.endswith(self.tag):
            raise DecodeError(f"no {self.tag!r} at the end", type_name="bytes", size=len(data))
        return data[: -len(self.tag)]


def test_json_then_gzip_round_trips_and_is_gzip_of_the_json() -> None:
    codec = pipe(JsonCodec(Order), Gzip())
    value = order(7)
    encoded = codec.encode(value)
    assert gzip.decompress(encoded) == JsonCodec(Order).encode(value)
    assert codec.decode(encoded) == value
    assert json.loads(gzip.decompress(encoded))["customerId"] == "c-1"


def test_encode_runs_first_to_last_and_decode_last_to_first() -> None:
    calls: list[str] = []
    codec = pipe(BytesCodec(), Recorder(b"1", calls), Recorder(b"2", calls), Recorder(b"3", calls))
    assert codec.encode(b"x") == b"x123"
    assert calls == ["encode 1", "encode 2", "encode 3"]
    calls.clear()
    assert codec.decode(b"x123") == b"x"
    assert calls == ["decode 3", "decode 2", "decode 1"]


def test_order_matters_like_goencodes_pipe() -> None:
    value = order(1)
    assert pipe(JsonCodec(Order), Gzip(), Base64()).encode(value).startswith(b"H4sI")
    assert pipe(JsonCodec(Order), Base64(), Gzip()).encode(value).startswith(b"\x1f\x8b")
    encoded = pipe(JsonCodec(Order), Gzip(), Base64()).encode(value)
    with pytest.raises(DecodeError):
        pipe(JsonCodec(Order), Base64(), Gzip()).decode(encoded)


@pytest.mark.parametrize(
    "stages",
    [(Gzip(),), (Zstd(), Hex()), (Brotli(), Base64("url")), (Snappy(), Gzip(9), Base64())],
    ids=repr,
)
def test_round_trips_through_several_stages(stages: tuple[Any, ...]) -> None:
    codec = pipe(JsonCodec(list[Order]), *stages)
    values = [order(n) for n in range(200)]
    assert codec.decode(codec.encode(values)) == values


def test_a_failing_stage_is_named() -> None:
    codec = pipe(JsonCodec(Order), Gzip(), Base64())
    with pytest.raises(DecodeError) as info:
        codec.decode(b"!!!!")
    message = str(info.value)
    assert message.startswith(
        "pipe(JsonCodec(Order), Gzip(), Base64()): stage 3 of 3 (Base64()) failed: "
        "Base64() cannot decode 4 bytes"
    )
    assert info.value.type_name == "Order"
    assert info.value.size == 4
    assert isinstance(info.value.__cause__, DecodeError)

    with pytest.raises(DecodeError, match=r"stage 2 of 3 \(Gzip\(\)\) failed: Gzip cannot"):
        codec.decode(Base64().encode(b"not gzip"))

    not_an_order = pipe(JsonCodec(Customer), Gzip(), Base64()).encode(Customer(id="c", name="n"))
    with pytest.raises(DecodeError, match=r"stage 1 of 3 \(JsonCodec\(Order\)\) failed: .*amount"):
        codec.decode(not_an_order)


def test_a_failing_encode_is_named() -> None:
    codec = pipe(JsonCodec(Order), Gzip())
    with pytest.raises(EncodeError, match=r"stage 1 of 2 \(JsonCodec\(Order\)\) failed") as info:
        codec.encode(Customer(id="c", name="n"))  # type: ignore[arg-type]
    assert info.value.type_name == "Order"


def test_a_pipe_of_csv_names_the_list_of_rows_it_carries() -> None:
    codec = pipe(CsvCodec(Quote), Gzip())
    assert codec.type is Quote  # the row type, as CsvCodec(Quote).type
    with pytest.raises(DecodeError) as decoding:
        codec.decode(b"not gzip")
    with pytest.raises(EncodeError) as encoding:
        codec.encode([Quote(sku="a", quantity=1), "not a row"])  # type: ignore[list-item]
    with pytest.raises(DecodeError) as alone:
        CsvCodec(Quote).decode(b"\xff")
    assert decoding.value.type_name == encoding.value.type_name == alone.value.type_name
    assert alone.value.type_name == "list[Quote]"


def test_the_bound_holds_inside_a_pipe() -> None:
    big = pipe(StrCodec(), Gzip()).encode("x" * 2_000_000)
    with pytest.raises(DecodeError, match="exceeds the limit of 1000000 bytes"):
        pipe(StrCodec(), Gzip(max_size=1_000_000)).decode(big)


def test_nested_pipes_flatten() -> None:
    inner = pipe(JsonCodec(Order), Gzip())
    outer = pipe(inner, Base64())
    assert outer.stages == (inner.stages[0], inner.stages[1], outer.stages[2])
    assert repr(outer) == "pipe(JsonCodec(Order), Gzip(), Base64())"
    assert outer.decode(outer.encode(order(2))) == order(2)
    assert isinstance(pipe(inner), Pipe)
    assert outer.type is Order  # what transports read from a JsonCodec
    assert pipe(StrCodec(), Gzip()).type is None


def test_content_type_is_what_the_bytes_are_and_the_encoding_is_named() -> None:
    json_gzip = pipe(JsonCodec(Order), Gzip())
    assert json_gzip.content_type == "application/gzip"
    assert content_type_of(json_gzip) == "application/gzip"  # what HTTP and AsyncAPI read
    assert json_gzip.content_encoding == "gzip"
    assert json_gzip.decoded_content_type == "application/json"

    two = pipe(JsonCodec(Order), Gzip(), Brotli())
    assert two.content_type == "application/octet-stream"
    assert two.content_encoding == "gzip, br"
    assert two.decoded_content_type == "application/json"

    text = pipe(JsonCodec(Order), Zstd(), Base64())
    assert text.content_type == "text/plain; charset=us-ascii"
    assert text.content_encoding is None
    assert text.decoded_content_type is None

    under_text = pipe(JsonCodec(Order), Base64(), Gzip())
    assert under_text.content_encoding == "gzip"
    assert under_text.decoded_content_type == "text/plain; charset=us-ascii"

    assert pipe(JsonCodec(Order)).content_type == "application/json"
    assert pipe(JsonCodec(Order)).content_encoding is None


def test_refuses_what_is_not_a_codec() -> None:
    with pytest.raises(TypeError, match="pipe takes codecs"):
        pipe(JsonCodec(Order), b"gzip")  # type: ignore[arg-type]


@pytest.mark.parametrize("given", [None, 1, "text", [b"x"]])
def test_decoding_what_is_not_bytes_is_a_decode_error(given: Any) -> None:
    codec = pipe(JsonCodec(Order), Gzip())
    with pytest.raises(DecodeError, match=r"stage 2 of 2 \(Gzip\(\)\) failed") as info:
        codec.decode(given)
    assert info.value.size == 0
    assert info.value.type_name == "Order"
