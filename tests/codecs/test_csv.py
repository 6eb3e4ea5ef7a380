from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Literal

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from goflux import Codec, DecodeError, EncodeError
from goflux.codecs import CsvCodec
from tests.codecs.models import Ratio, Status


class Person(BaseModel):
    name: str
    age: int


class Color(Enum):
    RED = "red"


class Reading(BaseModel):
    sensor: str = Field(alias="sensorId")
    value: float
    ok: bool
    at: datetime
    color: Color
    note: str | None = None


@dataclass
class Point:
    x: int
    y: int


class Pair(TypedDict):
    key: str
    value: int


AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_golden_encoding_csv_example() -> None:
    # goencode csv ExampleNewCodec: [][]string{{"name","age"},{"Alice","30"}} encodes as
    # "name,age\nAlice,30\n": the header row is the field names.
    codec = CsvCodec(Person)
    assert codec.encode([Person(name="Alice", age=30)]) == b"name,age\nAlice,30\n"
    assert codec.decode(b"name,age\nAlice,30\n") == [Person(name="Alice", age=30)]


def test_round_trip_with_aliases_quotes_and_go_text() -> None:
    rows = [
        Reading(sensorId='a,"b"', value=1e6, ok=True, at=AT, color=Color.RED, note="x\ny"),
        Reading(sensorId="ü 日本", value=math.inf, ok=False, at=AT, color=Color.RED),
    ]
    codec = CsvCodec(Reading)
    data = codec.encode(rows)
    assert data.decode().splitlines()[0] == "sensorId,value,ok,at,color,note"
    assert data.decode().split("\n")[1] == '"a,""b""",1e+06,true,2026-01-02T03:04:05+00:00,red,"x'
    assert ",+Inf,false," in data.decode()
    assert codec.decode(data) == rows


def test_empty_values() -> None:
    codec = CsvCodec(Reading)
    assert codec.encode([]) == b"sensorId,value,ok,at,color,note\n"
    assert codec.decode(codec.encode([])) == []
    assert codec.decode(b"") == []
    row = Reading(sensorId="", value=0.0, ok=False, at=AT, color=Color.RED, note=None)
    assert codec.decode(codec.encode([row])) == [row]


def test_a_bare_carriage_return_is_quoted() -> None:
    codec = CsvCodec(Person)
    data = codec.encode([Person(name="a\rb", age=1), Person(name="c", age=2)])
    assert data == b'name,age\n"a\rb",1\nc,2\n'
    assert codec.decode(data) == [Person(name="a\rb", age=1), Person(name="c", age=2)]


@pytest.mark.slow  # bulk data
def test_a_megabyte_of_rows() -> None:
    codec = CsvCodec(Person)
    rows = [Person(name=f"person number {i}", age=i) for i in range(50_000)]
    data = codec.encode(rows)
    assert len(data) > 1_000_000
    assert codec.decode(data) == rows
    assert list(csv.reader(io.StringIO(data.decode())))[1] == ["person number 0", "0"]


def test_columns_by_name_in_any_order_and_a_bom() -> None:
    codec = CsvCodec(Person)
    assert codec.decode(b"\xef\xbb\xbfage,extra,name\r\n30,x,Alice\r\n") == [
        Person(name="Alice", age=30)
    ]


def test_dataclass_and_typeddict_rows() -> None:
    assert CsvCodec(Point).decode(CsvCodec(Point).encode([Point(1, 2)])) == [Point(1, 2)]
    pairs: list[Pair] = [{"key": "k", "value": 1}]
    assert CsvCodec(Pair).decode(CsvCodec(Pair).encode(pairs)) == pairs


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"name,age\nAlice,x\n", "0.age: Input should be a valid integer"),
        (b"name,age\nAlice,1\nBob\n", "line 3 has 1 fields, the header 2"),
        (b'name,age\n"Alice,1\n', "not CSV"),
        (b"\xff", "invalid UTF-8"),
        (b"name\nAlice\n", "0.age: Field required"),
    ],
)
def test_decode_errors_name_the_type_and_cause(data: bytes, cause: str) -> None:
    with pytest.raises(DecodeError, match=cause) as info:
        CsvCodec(Person).decode(data)
    assert info.value.type_name == "list[Person]"
    assert info.value.size == len(data)


def test_encode_errors() -> None:
    codec = CsvCodec(Person)
    with pytest.raises(EncodeError, match="row 1 is a Point, not a Person") as info:
        codec.encode([Person(name="a", age=1), Point(1, 2)])  # type: ignore[list-item]
    assert info.value.type_name == "list[Person]"
    with pytest.raises(EncodeError, match="expected a list of Person"):
        codec.encode(Person(name="a", age=1))  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="Pair"):
        CsvCodec(Pair).encode([{"key": "k"}])  # type: ignore[typeddict-item]


def test_rows_must_be_flat() -> None:
    class Nested(BaseModel):
        name: str
        tags: list[str]

    with pytest.raises(TypeError, match="tags holds a list, mapping or model"):
        CsvCodec(Nested)
    with pytest.raises(TypeError, match="row type with fields"):
        CsvCodec(int)


def test_repr_content_type_header_and_typing() -> None:
    codec = CsvCodec(Reading)
    assert repr(codec) == "CsvCodec(Reading)"
    assert codec.content_type == "text/csv; charset=utf-8"
    assert codec.header == ["sensorId", "value", "ok", "at", "color", "note"]
    assert codec.type is Reading
    as_codec: Codec[list[Reading]] = codec
    assert as_codec.decode(b"sensorId,value,ok,at,color\n") == []


class Row(BaseModel):
    id: int
    name: str


def test_fields_as_long_as_the_input_are_read() -> None:
    rows = [Row(id=1, name="x" * 1_000_000), Row(id=2, name="y" * 200_000)]
    assert CsvCodec(Row).decode(CsvCodec(Row).encode(rows)) == rows


@pytest.mark.parametrize(
    ("rows", "cause"),
    [
        ([Row(id=1, name="\ud800")], "surrogates not allowed"),
        ([Row(id=10**5000, name="x")], "Exceeds the limit"),
    ],
    ids=["lone-surrogate", "int-of-5001-digits"],
)
def test_what_csv_cannot_carry_is_an_encode_error(rows: list[Row], cause: str) -> None:
    with pytest.raises(EncodeError, match=cause) as info:
        CsvCodec(Row).encode(rows)
    assert info.value.type_name == "list[Row]"


@pytest.mark.parametrize(
    "data",
    [
        b"id,name\n1,a\n\n2,b\n",
        b"id,name\n1,a\n2,b\n\n",
        b"\nid,name\r\n\r\n1,a\r\n2,b\r\n\r\n\r\n",
    ],
    ids=["between-rows", "trailing", "crlf-and-before-the-header"],
)
def test_empty_lines_are_skipped_as_go_skips_them(data: bytes) -> None:
    assert CsvCodec(Row).decode(data) == [Row(id=1, name="a"), Row(id=2, name="b")]


class Account(BaseModel):
    status: Status
    level: Literal[1, 2]
    ratio: Ratio
    maybe: Status | None = None


def test_enums_and_literals_of_numbers_round_trip() -> None:
    rows = [
        Account(status=Status.CLOSED, level=2, ratio=Ratio.HALF, maybe=Status.ACTIVE),
        Account(status=Status.ACTIVE, level=1, ratio=Ratio.HALF),
    ]
    data = CsvCodec(Account).encode(rows)
    assert data == b"status,level,ratio,maybe\n2,2,0.5,1\n1,1,0.5,\n"
    assert CsvCodec(Account).decode(data) == rows


class Text(BaseModel):
    a: str
    b: str


@pytest.mark.parametrize(
    ("a", "b", "line"),
    [
        ("", "", b","),
        ("x", "", b"x,"),
        (" x", "y", b'" x",y'),
        ("\tx", "y", b'"\tx",y'),
        ("\u00a0x", "y", '"\u00a0x",y'.encode()),
        ("\u3000x", "y", '"\u3000x",y'.encode()),
        ("\x1cx", "y", b"\x1cx,y"),  # Python calls it space, Go does not
        ("x ", "y", b"x ,y"),
        ("\\.", "y", b'"\\.",y'),
        ("\\.x", "y", b"\\.x,y"),
        ("a,b", "y", b'"a,b",y'),
        ('say "hi"', "y", b'"say ""hi""",y'),
        ("a\rb", "y", b'"a\rb",y'),
        ("a\nb", "y", b'"a\nb",y'),
        ("y", " ", b'y," "'),
    ],
)
def test_fields_are_quoted_as_go_quotes_them(a: str, b: str, line: bytes) -> None:
    # Go: csv.NewWriter(w).Write([]string{a, b}): fieldNeedsQuotes, field by field
    data = CsvCodec(Text).encode([Text(a=a, b=b)])
    assert data == b"a,b\n" + line + b"\n"
    assert CsvCodec(Text).decode(data) == [Text(a=a, b=b)]


class One(BaseModel):
    only: str


def test_a_row_of_one_empty_field_is_quoted_not_an_empty_line() -> None:
    rows = [One(only=""), One(only="x")]
    data = CsvCodec(One).encode(rows)
    assert data == b'only\n""\nx\n'
    assert CsvCodec(One).decode(data) == rows


class Optional(BaseModel):
    id: int
    note: str | None


def test_empty_text_where_none_is_allowed_is_refused() -> None:
    codec = CsvCodec(Optional)
    rows = [Optional(id=1, note=None), Optional(id=2, note="x")]
    assert codec.decode(codec.encode(rows)) == rows
    with pytest.raises(EncodeError, match=r"1\.note: CSV writes '' and None alike"):
        codec.encode([Optional(id=1, note="a"), Optional(id=2, note="")])


class Unions(BaseModel):
    a: int | str = ""
    b: bool | int = False
    c: float | int = 0.5
    d: int | float = 0
    e: str | int = ""
    f: Literal["1"] | int = "1"
    g: int | str | None = None


@pytest.mark.parametrize(
    ("row", "cause"),
    [
        (Unions(a=1), r"1\.a: text cannot tell int from str in int \| str"),
        (Unions(b=1), r"1\.b: text cannot tell int from bool in bool \| int"),
        (Unions(b=0), r"1\.b: text cannot tell int from bool in bool \| int"),
        (Unions(c=1), r"1\.c: text cannot tell int from float in float \| int"),
        (Unions(d=1.0), r"1\.d: text cannot tell float from int in int \| float"),
        (Unions(e=1), r"1\.e: text cannot tell int from str in str \| int"),
        (Unions(f=1), r"1\.f: text cannot tell int from str in Literal\['1'\] \| int"),
        (Unions(a="x", g=1), r"1\.g: text cannot tell int from str"),
    ],
    ids=repr,
)
def test_a_union_of_leaves_text_cannot_tell_apart_is_refused(row: Unions, cause: str) -> None:
    with pytest.raises(EncodeError, match=cause):
        CsvCodec(Unions).encode([Unions(), row])


def test_a_union_of_leaves_text_tells_apart_round_trips() -> None:
    rows = [
        Unions(a="1", b=True, c=1.5, d=2, e="1", f="1", g="x"),
        Unions(a="x", b=2, c=2.5, d=3, e="", f=2, g=None),
    ]
    codec = CsvCodec(Unions)
    back = codec.decode(codec.encode(rows))
    assert back == rows
    assert repr(back) == repr(rows)


class Measure(BaseModel):
    value: float
    note: str


def test_floats_are_written_as_go_writes_them_whatever_else_is_in_the_column() -> None:
    # strconv.FormatFloat(v, 'g', -1, 64)
    texts = [
        (0.0, "0"),
        (-0.0, "-0"),
        (1.0, "1"),
        (-2.5, "-2.5"),
        (19.99, "19.99"),
        (1e-4, "0.0001"),
        (5e-5, "5e-05"),
        (123456.5, "123456.5"),
        (1e6, "1e+06"),
        (1234567.5, "1.2345675e+06"),
        (1e16, "1e+16"),
        (1e22, "1e+22"),
        (math.inf, "+Inf"),
    ]
    codec = CsvCodec(Measure)
    for value, text in texts:
        # alone (with a column of plain floats), and with all the others
        rows = [Measure(value=value, note="x"), Measure(value=1.5, note="y")]
        assert codec.encode(rows) == f"value,note\n{text},x\n1.5,y\n".encode()
    rows = [Measure(value=value, note=" x" if value else "\\.") for value, _ in texts]
    quoted = {True: '" x"', False: '"\\."'}
    lines = [f"{text},{quoted[bool(value)]}" for value, text in texts]
    assert codec.encode(rows) == "\n".join(["value,note", *lines, ""]).encode()
    assert codec.decode(codec.encode(rows)) == rows
