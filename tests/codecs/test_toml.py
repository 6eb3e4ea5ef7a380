from __future__ import annotations

import math
import tomllib
from datetime import UTC, date, datetime, time
from typing import Any

import pytest
from pydantic import BaseModel

from goflux import Codec, DecodeError, EncodeError
from goflux.codecs import TomlCodec
from tests.codecs.models import EMPTY, NESTED, SAMPLES, UNICODE, Order, large


class Data(BaseModel):
    Name: str


class Times(BaseModel):
    at: datetime
    local: datetime
    day: date
    clock: time
    ratio: float
    raw: bytes


def test_golden_burntsushi_example() -> None:
    # goencode toml ExampleNewCodec: Data{Name: "example-123"}, BurntSushi/toml writes
    # the field name as the key.
    assert TomlCodec(Data).encode(Data(Name="example-123")) == b'Name = "example-123"\n'


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip(name: str) -> None:
    codec = TomlCodec(Order)
    assert codec.decode(codec.encode(SAMPLES[name])) == SAMPLES[name]


def test_round_trip_of_a_megabyte() -> None:
    codec = TomlCodec(Order)
    order = large()
    data = codec.encode(order)
    assert len(data) > 1_000_000
    assert codec.decode(data) == order


def test_a_none_field_is_left_out() -> None:
    data = TomlCodec(Order).encode(EMPTY)  # discount=None
    assert b"discount" not in data
    assert TomlCodec(Order).decode(data).discount is None


def test_datetimes_are_toml_datetimes() -> None:
    value = Times(
        at=datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC),
        local=datetime(2026, 1, 2, 3, 4, 5),
        day=date(2026, 1, 2),
        clock=time(3, 4, 5),
        ratio=math.inf,
        raw=b"text",
    )
    data = TomlCodec(Times).encode(value)
    parsed = tomllib.loads(data.decode())
    assert parsed["at"] == value.at
    assert parsed["local"].tzinfo is None
    assert parsed["day"] == value.day
    assert parsed["clock"] == value.clock
    assert parsed["ratio"] == math.inf
    assert parsed["raw"] == "text"  # bytes as their UTF-8 text
    assert TomlCodec(Times).decode(data) == value


def test_what_toml_cannot_carry_is_an_encode_error() -> None:
    with pytest.raises(EncodeError, match="a TOML document is a table") as info:
        TomlCodec(list[int]).encode([1, 2])
    assert info.value.type_name == "list[int]"
    with pytest.raises(EncodeError, match="a TOML document is a table"):
        TomlCodec(int | None).encode(None)

    class Holes(BaseModel):
        values: list[int | None]

    only_once = r"^cannot encode Holes as Holes: TOML has no null \(at values.1\)$"
    with pytest.raises(EncodeError, match=only_once):
        TomlCodec(Holes).encode(Holes(values=[1, None]))


def test_encode_refuses_the_wrong_type() -> None:
    with pytest.raises(EncodeError, match="cannot encode Data as Order"):
        TomlCodec(Order).encode(Data(Name="x"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"Name = ", "not TOML"),
        (b'Name = "open', "not TOML"),
        (b'Name = "a"\nName = "b"\n', "not TOML"),
        (b"\xff", "invalid UTF-8"),
        (b"Name = 1\n", "Name: Input should be a valid string"),
        (b"", "Name: Field required"),
    ],
)
def test_decode_errors_name_the_type_and_cause(data: bytes, cause: str) -> None:
    with pytest.raises(DecodeError, match=cause) as info:
        TomlCodec(Data).decode(data)
    assert info.value.type_name == "Data"
    assert info.value.size == len(data)


def test_strict() -> None:
    data = b'Name = "x"\ncount = "3"\n'

    class Counted(BaseModel):
        Name: str
        count: int

    assert TomlCodec(Counted).decode(data).count == 3
    with pytest.raises(DecodeError, match="count"):
        TomlCodec(Counted, strict=True).decode(data)


def test_mappings_and_repr() -> None:
    codec: TomlCodec[dict[str, Any]] = TomlCodec(dict[str, Any])
    assert codec.decode(codec.encode({"a": {"b": [1, 2]}})) == {"a": {"b": [1, 2]}}
    assert repr(TomlCodec(Order)) == "TomlCodec(Order)"
    assert TomlCodec.content_type == "application/toml"
    as_codec: Codec[Order] = TomlCodec(Order)
    assert as_codec.decode(as_codec.encode(NESTED)) == NESTED
    assert TomlCodec(Order).decode(TomlCodec(Order).encode(UNICODE)) == UNICODE
