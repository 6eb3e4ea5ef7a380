from __future__ import annotations

import math
import time as clock
import tomllib
from datetime import UTC, date, datetime, time
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel

from goflux import Codec, DecodeError, EncodeError
from goflux.codecs import TomlCodec
from goflux.codecs._toml import MAX_KEY_DEPTH
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


@pytest.mark.slow  # bulk data
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


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"a = " + b"[" * 2000 + b"]" * 2000, "not TOML: maximum recursion depth exceeded"),
        (b"n = " + b"1" * 5000, "not TOML: Exceeds the limit"),
    ],
    ids=["deep-arrays", "5000-digit-int"],
)
def test_hostile_input_is_a_decode_error(data: bytes, cause: str) -> None:
    with pytest.raises(DecodeError, match=cause) as info:
        TomlCodec(dict[str, Any]).decode(data)
    assert info.value.type_name == "dict[str, Any]"


def test_deep_nesting_is_an_encode_error() -> None:
    value: Any = []
    for _ in range(3000):
        value = [value]
    with pytest.raises(EncodeError, match="nested too deep"):
        TomlCodec(dict[str, Any]).encode({"a": value})


class Note(BaseModel):
    id: int
    note: str | None  # required, but may be None


class Notes(BaseModel):
    notes: list[Note]
    by_name: dict[str, Note]
    count: int


def test_a_required_nullable_none_is_left_out_and_read_back_as_none() -> None:
    # As BurntSushi/toml leaves out a nil pointer and Go's decoder leaves it nil.
    codec = TomlCodec(Note)
    assert codec.encode(Note(id=1, note=None)) == b"id = 1\n"
    assert codec.decode(b"id = 1\n") == Note(id=1, note=None)
    nested = Notes(
        notes=[Note(id=1, note=None), Note(id=2, note="x")],
        by_name={"a": Note(id=3, note=None)},
        count=1,
    )
    assert TomlCodec(Notes).decode(TomlCodec(Notes).encode(nested)) == nested
    assert TomlCodec(Note, strict=True).decode(b"id = 1\n") == Note(id=1, note=None)


def test_a_missing_field_that_cannot_be_none_is_still_required() -> None:
    with pytest.raises(DecodeError, match=r"count: Field required") as info:
        TomlCodec(Notes).decode(b"notes = [{id = 1}]\nby_name = {}\n")
    assert "notes" not in str(info.value)
    with pytest.raises(DecodeError, match=r"^cannot decode 5 bytes as Note: id: Field required$"):
        TomlCodec(Note).decode(b"a = 1")


class Price(BaseModel):
    amount: Decimal


class PriceWithId(BaseModel):
    amount: Decimal
    id: UUID = UUID(int=1)


def test_decimals_are_strings_whatever_the_other_fields() -> None:
    amount = Decimal("12345678901234567.89")
    plain = TomlCodec(Price).encode(Price(amount=amount))
    assert plain == b'amount = "12345678901234567.89"\n'
    assert TomlCodec(PriceWithId).encode(PriceWithId(amount=amount)).startswith(plain)
    assert TomlCodec(Price).decode(plain).amount == amount
    assert TomlCodec(Price, strict=True).decode(plain).amount == amount
    assert TomlCodec(dict[str, Any]).encode({"d": Decimal("1.10")}) == b'd = "1.10"\n'


class Color(Enum):
    RED = 1
    BLUE = 2


class Unusual(BaseModel):
    color: Color = Color.BLUE
    amount: Decimal = Decimal("0.1")
    key: UUID = UUID(int=7)
    pair: tuple[int, str] = (1, "a")
    tags: set[str] = {"x"}
    raw: bytes = b"text"
    ratio: float = math.inf
    at: datetime = datetime(2026, 1, 2, tzinfo=UTC)
    day: date = date(2026, 1, 2)
    clock: time = time(3, 4)


def test_strict_decodes_its_own_output() -> None:
    codec = TomlCodec(Unusual, strict=True)
    assert codec.decode(codec.encode(Unusual())) == Unusual()
    with pytest.raises(DecodeError, match="color: Input should be 1 or 2"):
        codec.decode(b"color = 3\n")
    with pytest.raises(DecodeError, match="pair"):
        codec.decode(b'pair = ["1", "a"]\n')


@pytest.mark.parametrize("big", [2**63, -(2**63) - 1, 2**70])
def test_ints_past_64_bits_are_an_encode_error(big: int) -> None:
    class Counted(BaseModel):
        name: str = "x"
        counts: list[int]

    with pytest.raises(EncodeError, match=r"TOML integers are 64-bit signed \(at counts\.1\)$"):
        TomlCodec(Counted).encode(Counted(counts=[1, big]))


def test_ints_at_the_64_bit_limits_travel() -> None:
    codec = TomlCodec(dict[str, int])
    value = {"max": 2**63 - 1, "min": -(2**63)}
    assert codec.decode(codec.encode(value)) == value


@pytest.mark.parametrize(
    "document",
    [
        pytest.param(".".join(["k"] * 100_000) + " = 1\n", id="dotted"),
        pytest.param("a = {" + ".".join(["k"] * 100_000) + " = 1}\n", id="inline"),
        pytest.param("[" + ".".join(["k"] * 100_000) + "]\n", id="header"),
        pytest.param("[[" + ".".join(["k"] * 100_000) + "]]\n", id="array-header"),
        pytest.param(".".join(['"k"'] * 50_000) + " = 1\n", id="quoted"),
        pytest.param('a = """x""""\n' + ".".join(["k"] * 50_000) + " = 1\n", id="after-string"),
    ],
)
def test_a_key_nested_past_the_limit_is_refused_fast(document: str) -> None:
    # tomllib takes quadratic time and memory on dotted keys: 200 KB of "k.k.k" took
    # minutes and gigabytes (the process was killed); refused before tomllib reads it.
    started = clock.perf_counter()
    with pytest.raises(
        DecodeError,
        match=rf"^cannot decode \d+ bytes as dict\[str, Any\]: a key nested deeper than"
        rf" {MAX_KEY_DEPTH} levels$",
    ):
        TomlCodec(dict[str, Any]).decode(document.encode())
    assert clock.perf_counter() - started < 5


def test_keys_up_to_the_limit_and_dots_in_values_decode() -> None:
    codec = TomlCodec(dict[str, Any])
    key = ".".join(["k"] * MAX_KEY_DEPTH)
    assert codec.decode(f"{key} = 1\n[{key}x]\n".encode()) is not None
    with pytest.raises(DecodeError, match="nested deeper"):
        codec.decode(f"{key}.k = 1\n".encode())
    dots = "." * 2000
    document = (
        f'a = "{dots}"\nb = \'{dots}\'\nc = """\n{dots} = x\n"""\n# {dots}\n'
        f"d = [{', '.join(['1.5'] * 1000)}]\n"
        f"e = [\n{chr(10).join(['1.5,'] * 1000)}\n]\n"
    )
    value = codec.decode(document.encode())
    assert value["a"] == value["b"] == dots
    assert value["d"] == [1.5] * 1000
    assert value["e"] == [1.5] * 1000


def test_strict_a_value_too_deep_for_the_json_fallback_is_a_decode_error() -> None:
    class Deep(BaseModel):
        a: int

    header = ("[" + ".".join(["k"] * 300) + "]\n").encode()
    with pytest.raises(DecodeError, match=r"^cannot decode 602 bytes as Deep: nested too deep"):
        TomlCodec(Deep, strict=True).decode(header)
    with pytest.raises(DecodeError, match=r"^cannot decode 6002 bytes as Deep: a key nested"):
        TomlCodec(Deep, strict=True).decode(("[" + ".".join(["k"] * 3000) + "]\n").encode())


class Defaulted(BaseModel):
    a: int | None = 5
    b: int | None = None


class Holder(BaseModel):
    inner: list[Defaulted]


def test_a_none_that_would_read_back_as_its_default_is_an_encode_error() -> None:
    # TOML has no null: a None field is left out, and a field left out reads back as
    # its default, here 5: the value would change silently.
    with pytest.raises(EncodeError, match=r"TOML has no null: a is None but would read back"):
        TomlCodec(Defaulted).encode(Defaulted(a=None))
    with pytest.raises(EncodeError, match=r"inner\.0\.a is None"):
        TomlCodec(Holder).encode(Holder(inner=[Defaulted(a=None)]))
    codec = TomlCodec(Defaulted)
    assert codec.decode(codec.encode(Defaulted(b=None))) == Defaulted(b=None)
    assert codec.decode(codec.encode(Defaulted(a=7, b=8))) == Defaulted(a=7, b=8)


class Stamp(BaseModel):
    at: datetime


def test_an_offset_with_seconds_is_an_encode_error() -> None:
    # Before 1900 zones ran on local mean time: Amsterdam was +00:19:32. TOML's offsets
    # are whole minutes: tomli-w wrote an invalid document.
    at = datetime(1890, 1, 1, tzinfo=ZoneInfo("Europe/Amsterdam"))
    with pytest.raises(
        EncodeError, match=r"UTC offset 0:19:32: TOML offsets are whole minutes \(at at\)"
    ):
        TomlCodec(Stamp).encode(Stamp(at=at))
    later = Stamp(at=datetime(1990, 1, 1, tzinfo=ZoneInfo("Europe/Amsterdam")))
    assert TomlCodec(Stamp).decode(TomlCodec(Stamp).encode(later)) == later
