from __future__ import annotations

import enum
import math
import pickle
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from goflux import Codec, DecodeError, EncodeError
from goflux.codecs import MsgpackCodec
from tests.codecs.models import CREATED, EMPTY, NESTED, SAMPLES, UNICODE, Order, large


class Data(BaseModel):
    name: str


class User(BaseModel):
    """goencode's tinylib test type (msgpack/tinylib/testdata/user.go)."""

    handle: str
    country: str
    timestamp: int
    description: str


class Blob(BaseModel):
    raw: bytes
    big: int
    small: int
    ratio: float
    counts: dict[int, str]


class Event(TypedDict):
    name: str
    count: int


def test_golden_vmihailenco_example() -> None:
    # goencode msgpack/vmihailenco ExampleNewCodec: Data{Name: "example-123"} with the
    # tag msgpack:"name" is a one-entry map keyed "name".
    data = MsgpackCodec(Data).encode(Data(name="example-123"))
    assert data == b"\x81\xa4name\xabexample-123"


def test_golden_tinylib_user() -> None:
    # msgpack/tinylib/testdata/user_gen.go MarshalMsg: the map header and key bytes it
    # appends, then msgp.AppendString / AppendInt64 of each value.
    user = User(handle="@bench", country="US", timestamp=5, description="d")
    expected = (
        bytes([0x84, 0xA6, 0x68, 0x61, 0x6E, 0x64, 0x6C, 0x65])
        + b"\xa6@bench"
        + bytes([0xA7, 0x63, 0x6F, 0x75, 0x6E, 0x74, 0x72, 0x79])
        + b"\xa2US"
        + bytes([0xA9, 0x74, 0x69, 0x6D, 0x65, 0x73, 0x74, 0x61, 0x6D, 0x70])
        + b"\x05"
        + bytes([0xAB, 0x64, 0x65, 0x73, 0x63, 0x72, 0x69, 0x70, 0x74, 0x69, 0x6F, 0x6E])
        + b"\xa1d"
    )
    assert MsgpackCodec(User).encode(user) == expected


def test_decodes_tinylib_int64_of_a_nanosecond_timestamp() -> None:
    # msgp.AppendInt64 writes a large value as int 64 (0xd3), not uint 64 (0xcf).
    nanos = 1_764_000_000_123_456_789
    data = (
        b"\x84\xa6handle\xa6@bench\xa7country\xa2US\xa9timestamp\xd3"
        + nanos.to_bytes(8, "big", signed=True)
        + b"\xabdescription\xa0"
    )
    user = MsgpackCodec(User).decode(data)
    assert user.timestamp == nanos
    assert user.description == ""


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip(name: str) -> None:
    codec = MsgpackCodec(Order)
    assert codec.decode(codec.encode(SAMPLES[name])) == SAMPLES[name]


@pytest.mark.slow  # bulk data
def test_round_trip_of_a_megabyte() -> None:
    codec = MsgpackCodec(Order)
    order = large()
    data = codec.encode(order)
    assert len(data) > 1_000_000
    assert codec.decode(data) == order


def test_map_is_keyed_by_alias_in_declaration_order() -> None:
    raw = msgpack.unpackb(MsgpackCodec(Order).encode(NESTED), timestamp=3)
    assert list(raw) == [
        "id", "customerId", "lines", "tags", "note", "paid", "created", "discount"
    ]  # fmt: skip
    assert raw["lines"][0] == {"sku": "a-1", "qty": 2, "price": 12.5}


def test_datetime_is_the_timestamp_extension() -> None:
    data = MsgpackCodec(Order).encode(NESTED)
    # ext type -1 with 8 bytes (the 64-bit form: nanoseconds and seconds).
    assert b"\xd7\xff" in data
    assert msgpack.unpackb(data, timestamp=3)["created"] == CREATED


def test_other_offsets_and_naive_datetimes() -> None:
    codec = MsgpackCodec(datetime)
    plus_two = datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    assert codec.decode(codec.encode(plus_two)) == plus_two  # the same instant, in UTC
    assert codec.decode(codec.encode(plus_two)).tzinfo == UTC
    naive = datetime(2026, 1, 1, 12)
    assert codec.decode(codec.encode(naive)) == naive.replace(tzinfo=UTC)


def test_reads_each_timestamp_form_the_spec_has() -> None:
    codec = MsgpackCodec(datetime)
    for moment in (
        datetime(2026, 1, 1, tzinfo=UTC),  # 32-bit
        datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=UTC),  # 64-bit
        datetime(1900, 1, 1, tzinfo=UTC),  # 96-bit, before 1970
        datetime(2500, 1, 1, 0, 0, 0, 999_999, tzinfo=UTC),  # 96-bit, past 2446
    ):
        assert codec.decode(msgpack.packb(moment, datetime=True)) == moment


def test_bytes_as_bin_and_ints_exact() -> None:
    codec = MsgpackCodec(Blob)
    blob = Blob(raw=b"\x00\xff\x10", big=2**64 - 1, small=-(2**63), ratio=0.1, counts={7: "x"})
    data = codec.encode(blob)
    assert b"\xc4\x03\x00\xff\x10" in data  # bin 8
    assert b"\xcf" + (2**64 - 1).to_bytes(8, "big") in data
    assert codec.decode(data) == blob


def test_nan_and_infinity_travel() -> None:
    codec = MsgpackCodec(list[float])
    values = codec.decode(codec.encode([math.inf, -math.inf, math.nan]))
    assert values[:2] == [math.inf, -math.inf]
    assert math.isnan(values[2])


@pytest.mark.parametrize(
    ("tp", "value"),
    [(Event, {"name": "signup", "count": 3}), (list[int], [1, 2]), (str, "héllo"), (int, 7)],
)
def test_plain_types(tp: Any, value: Any) -> None:
    codec: MsgpackCodec[Any] = MsgpackCodec(tp)
    assert codec.decode(codec.encode(value)) == value


def test_encode_refuses_the_wrong_type() -> None:
    with pytest.raises(EncodeError, match="cannot encode Data as Order") as info:
        MsgpackCodec(Order).encode(Data(name="x"))  # type: ignore[arg-type]
    assert info.value.type_name == "Order"
    with pytest.raises(EncodeError, match="as int"):
        MsgpackCodec(int).encode(True)
    with pytest.raises(EncodeError, match="Event"):
        MsgpackCodec(Event).encode({"name": "x"})  # type: ignore[typeddict-item]


def test_encode_refuses_an_integer_past_64_bits() -> None:
    class Big(BaseModel):
        n: int

    with pytest.raises(EncodeError, match="64-bit"):
        MsgpackCodec(Big).encode(Big(n=2**64))


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"", "not MessagePack"),
        (b"\x81\xa4na", "not MessagePack"),  # truncated
        (b"\xc1", "not MessagePack"),  # never used
        (b"\x81\xa4name\xabexample-123\x00", "not MessagePack"),  # trailing bytes
        (b"\x81\xa4name\xa2\xff\xfe", "not MessagePack"),  # not UTF-8
        (b"\xd6\x05abcd", "unknown extension type 5"),  # tinylib's own time extension
        (b"\x81\xa4name\x05", "name: Input should be a valid string"),
        (b"\x80", "name: Field required"),
    ],
)
def test_decode_errors_name_the_type_and_cause(data: bytes, cause: str) -> None:
    with pytest.raises(DecodeError, match=cause) as info:
        MsgpackCodec(Data).decode(data)
    assert info.value.type_name == "Data"
    assert info.value.size == len(data)
    assert "Data" in str(info.value)


def test_decode_takes_bytearray_and_memoryview_not_str() -> None:
    codec = MsgpackCodec(Data)
    data = codec.encode(Data(name="x"))
    assert codec.decode(bytearray(data)) == codec.decode(memoryview(data)) == Data(name="x")
    with pytest.raises(DecodeError, match="expected bytes"):
        codec.decode("x")  # type: ignore[arg-type]


def test_strict_refuses_what_lax_converts() -> None:
    data = msgpack.packb({"name": "x", "count": "3"})
    assert MsgpackCodec(Event).decode(data) == {"name": "x", "count": 3}
    with pytest.raises(DecodeError, match="count"):
        MsgpackCodec(Event, strict=True).decode(data)


def test_alias_by_name_and_repr_and_content_type() -> None:
    class Aliased(BaseModel):
        customer_id: str = Field(alias="customerId")

    codec = MsgpackCodec(Aliased)
    assert msgpack.unpackb(codec.encode(Aliased(customerId="c"))) == {"customerId": "c"}
    assert repr(codec) == "MsgpackCodec(Aliased)"
    assert codec.content_type == "application/vnd.msgpack"  # IANA, msgpack/msgpack#194
    assert codec.type is Aliased
    as_codec: Codec[Aliased] = codec
    assert as_codec is codec


def test_unicode_and_empty_survive_exactly() -> None:
    codec = MsgpackCodec(Order)
    assert codec.decode(codec.encode(UNICODE)).note == UNICODE.note
    assert codec.decode(codec.encode(EMPTY)) == EMPTY


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


class Part(BaseModel):
    size: Decimal
    colors: frozenset[Color]


class Everything(BaseModel):
    color: Color = Color.RED
    level: Level = Level.LOW
    day: date = date(2024, 1, 2)
    noon: time = time(12, 30)
    wait: timedelta = timedelta(seconds=90)
    amount: Decimal = Decimal("12345678901234567.89")
    uid: UUID = UUID(int=1)
    pair: tuple[int, str] = (1, "a")
    tags: set[str] = Field(default_factory=lambda: {"a", "b"})
    parts: list[Part] = Field(default_factory=lambda: [Part(size=Decimal("1.5"), colors=[])])
    by_day: dict[str, tuple[date, ...]] = Field(default_factory=lambda: {"x": (date.min,)})
    maybe: UUID | None = None
    raw: bytes = b"\x00ok"  # UTF-8: the JSON form of bytes (see MsgpackCodec)
    when: datetime = datetime(2024, 1, 2, tzinfo=UTC)


def test_strict_decodes_its_own_output() -> None:
    # What MessagePack carries as a string or an array (enums, dates, Decimal, UUID,
    # tuples, sets) is read from that form, as JsonCodec(strict=True) reads it from JSON.
    codec = MsgpackCodec(Everything, strict=True)
    value = Everything(maybe=UUID(int=2))
    assert codec.decode(codec.encode(value)) == value
    pair = MsgpackCodec(tuple[date, Decimal], strict=True)
    copied = pickle.loads(pickle.dumps(pair))  # Spark ships codecs
    assert copied.decode(pair.encode((date.min, Decimal(1)))) == (date.min, Decimal(1))
    assert MsgpackCodec(tuple[Color, date], strict=True).decode(b"\x92\xa3red\xaa2024-01-02") == (
        Color.RED,
        date(2024, 1, 2),
    )


@pytest.mark.parametrize(
    "wire",
    [
        {"pair": [1, 2]},  # an int for str inside the tuple
        {"pair": ["1", "a"]},  # a str for int
        {"parts": [{"size": "1.5", "colors": [], "extra": 1}], "day": 20240102},
        {"level": "1"},  # an IntEnum's value is an int
        {"amount": True},
    ],
)
def test_strict_still_refuses_what_lax_converts(wire: dict[str, Any]) -> None:
    data = msgpack.packb(wire)
    with pytest.raises(DecodeError):
        MsgpackCodec(Everything, strict=True).decode(data)


# ---------------------------------------------------------------- the read path
# ormsgpack reads (twice as fast); msgpack reads again what ormsgpack does not read as
# exactly one value with string keys, so what decodes is what msgpack decodes.


def _reference_calls(codec: MsgpackCodec[Any], monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Record each payload the codec hands to msgpack."""
    calls: list[bytes] = []
    reference = codec._reference

    def counted(data: bytes, **options: Any) -> Any:
        calls.append(data)
        return reference(data, **options)

    monkeypatch.setattr(codec, "_reference", counted)
    return calls


def test_ormsgpack_reads_and_msgpack_reads_what_it_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    codec = MsgpackCodec(Order)
    calls = _reference_calls(codec, monkeypatch)
    for sample in SAMPLES.values():
        assert codec.decode(codec.encode(sample)) == sample
    assert calls == []  # models: string keys, one value: ormsgpack alone
    blob = Blob(raw=b"", big=1, small=-1, ratio=0.5, counts={7: "x", -1: "y"})
    blob_codec = MsgpackCodec(Blob)
    blob_calls = _reference_calls(blob_codec, monkeypatch)
    data = blob_codec.encode(blob)
    assert blob_codec.decode(data) == blob  # Go's map[int]string: integer keys
    assert blob_calls == [data]


@pytest.mark.parametrize(
    "after",
    [
        b"\x81\xa4name\xa1y",  # a second value
        b"\xc0",  # nil
        b"\xc4\x10" + bytes(16),  # a bin of 16 bytes
        b"\xc4\x12",  # a bin header that would take in what follows
        b"\xd8\x7f" + bytes(16),  # an extension
    ],
)
def test_any_bytes_after_the_value_are_refused(after: bytes) -> None:
    data = MsgpackCodec(Data).encode(Data(name="x")) + after
    with pytest.raises(DecodeError, match="not MessagePack: unpack\\(b\\) received extra data"):
        MsgpackCodec(Data).decode(data)


def test_a_value_cut_short_is_refused_whatever_it_would_take_in() -> None:
    # A header whose length runs past the end; ormsgpack 1.13.0 aborted the process on
    # the array of 2**32 - 1 items (it tried to make room for them), hence the floor.
    for data in (
        b"\xc4\x05",
        b"\xc4\x12",
        b"\xd9\x20ab",
        b"\x92\x01",
        b"\xdf\x00\x00\x00\x01",
        b"\xdd\xff\xff\xff\xff",
        b"\xdd",
        b"\xdf\xff\xff\xff\xff",
        b"\xdb\xff\xff\xff\xff",
    ):
        with pytest.raises(DecodeError, match="not MessagePack"):
            MsgpackCodec(Any).decode(data)


@pytest.mark.parametrize(
    "data",
    [
        # A map whose last value is a 96-bit timestamp of 1,494,152,596 nanoseconds
        # (past a second), cut short: ormsgpack before 1.13 crashed the process on it
        # (a segmentation fault), hence the floor of the msgpack extra.
        bytes.fromhex(
            "de0004d928" + "78" * 40 + "1ff9da000161c50008f35c5485308a0c83a46e616d65"
            "c70cff590ef5940000003afff4417f"
        ),
        b"\xc7\x0c\xff" + (1_500_000_000).to_bytes(4, "big") + bytes(8),  # ns past a second
        b"\xd7\xff" + ((1_000_000_000 << 34) | 5).to_bytes(8, "big"),
        b"\xc7\x0c\xff" + bytes(4) + (253_402_300_800).to_bytes(8, "big"),  # year 10000
        b"\xc7\x0c\xff" + bytes(4) + (-62_135_596_801).to_bytes(8, "big", signed=True),  # year 0
        b"\xd5\xff\x00\x01",  # 16 bits: no timestamp has that length
    ],
)
def test_a_timestamp_out_of_range_is_a_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError, match="not MessagePack"):
        MsgpackCodec(Any).decode(data)


def _same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down (NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def _msgpack_reads(data: bytes) -> tuple[bool, Any]:
    def refuse(code: int, data: bytes) -> Any:
        raise ValueError(code)

    try:
        return True, msgpack.unpackb(data, timestamp=3, strict_map_key=False, ext_hook=refuse)
    except (ValueError, TypeError, OverflowError):
        return False, None


_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=40)
    | st.binary(max_size=40)
    | st.datetimes(timezones=st.just(UTC))
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=8) | st.integers(-5, 5), inner, max_size=5)
    ),
    max_leaves=30,
)
_ENDINGS = st.sampled_from([b"", b"\x00", b"\xc0", b"\xc4\x10", b"\xd6\xff\x00\x00"])


@pytest.mark.slow  # 400 Hypothesis examples
@settings(max_examples=400, deadline=None)
@given(_VALUES, st.integers(0, 10_000), st.integers(0, 255), _ENDINGS, st.integers(0, 3))
def test_it_reads_what_msgpack_reads_and_refuses_what_it_refuses(
    value: Any, where: int, byte: int, ending: bytes, how: int
) -> None:
    data = msgpack.packb(value, datetime=True)
    if how == 1 and data:  # cut short
        data = data[: where % len(data)]
    elif how == 2 and data:  # one byte changed
        at = where % len(data)
        data = data[:at] + bytes([byte]) + data[at + 1 :]
    elif how == 3:  # bytes after the value
        data += ending
    ok, expected = _msgpack_reads(data)
    codec: MsgpackCodec[Any] = MsgpackCodec(Any)
    try:
        got = codec.decode(data)
    except DecodeError:
        assert not ok, (data, expected)
    else:
        assert ok, (data, got)
        assert _same(got, expected), (data, got, expected)
