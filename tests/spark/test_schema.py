"""PayloadColumns: Spark columns of payload types and the value <-> row conversions."""

from __future__ import annotations

import dataclasses
import enum
import pickle
import re
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, date, datetime, timedelta, timezone
from datetime import time as dtime
from decimal import Decimal
from typing import Annotated, Any, Literal, NamedTuple, NotRequired, cast
from uuid import UUID

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NaiveDatetime,
    RootModel,
    ValidationError,
    condecimal,
    conint,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from typing_extensions import TypedDict

from goflux import DecodeError, JsonCodec
from goflux.transports.spark._errors import SchemaError
from goflux.transports.spark._schema import PayloadColumns, arrow_schema
from tests.models import Order

# ------------------------------------------------------------------ payload types


class Flat(BaseModel):
    id: str
    count: int
    price: float
    active: bool
    data: bytes
    created: datetime
    day: date
    ref: UUID
    note: str | None = None
    kind: Literal["a", "b"] = "a"


class Line(BaseModel):
    sku: str
    qty: int = 1
    price: float | None = None


class Address(BaseModel):
    street: str
    city: str


class Customer(BaseModel):
    name: str
    address: Address
    previous: list[Address] = []


class Basket(BaseModel):
    id: str
    customer: Customer
    lines: list[Line]
    maybe_lines: list[Line | None] = []
    gift: Line | None = None


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Size(enum.IntEnum):
    S = 1
    M = 2


class Shape(enum.StrEnum):
    ROUND = "round"


class Enums(BaseModel):
    color: Color
    size: Size
    shape: Shape
    colors: list[Color] = []
    maybe: Color | None = None
    sized: Literal[Size.S, Size.M] = Size.S


class EnumValues(BaseModel):
    model_config = ConfigDict(use_enum_values=True)

    color: Color
    size: Size


class Maps(BaseModel):
    counts: dict[str, int]
    by_id: dict[int, float | None]
    lines: Mapping[str, Line]
    by_color: dict[Color, list[str]] = {}


class Money(BaseModel):
    exact: condecimal(max_digits=10, decimal_places=2)  # type: ignore[valid-type]
    places: Annotated[Decimal, Field(decimal_places=4)]
    free: Decimal
    digits: Annotated[Decimal, Field(max_digits=12)]


class Times(BaseModel):
    at: datetime
    naive: NaiveDatetime
    clock: dtime
    took: timedelta
    day: date


class Pair(NamedTuple):
    left: int
    right: str


class Tuples(BaseModel):
    fixed: tuple[int, str]
    many: tuple[float, ...]
    pair: Pair
    tags: frozenset[str] = frozenset()


class Constrained(BaseModel):
    small: conint(ge=0, le=10)  # type: ignore[valid-type]
    name: Annotated[str, Field(min_length=1, max_length=5)]
    code: Annotated[str, Field(alias="Code")]
    hidden: int = Field(default=0, exclude=True)
    renamed: int = Field(default=0, serialization_alias="outName")


@dataclasses.dataclass
class Point:
    x: float
    y: float
    label: str | None = None


class Reading(TypedDict):
    sensor: str
    value: float
    unit: NotRequired[str]


class Numbers(RootModel[list[int]]):
    pass


# ------------------------------------------------------------------ helpers


def roundtrip(columns: PayloadColumns[Any], value: Any) -> Any:
    """to_row -> Arrow RecordBatch -> to_pylist -> from_row."""
    batch = pa.RecordBatch.from_pylist([columns.to_row(value)], schema=columns.arrow_schema)
    (row,) = batch.to_pylist()
    return columns.from_row(row)


def spark_row(columns: PayloadColumns[Any], value: Any) -> dict[str, Any]:
    """What Spark's collect() + Row.asDict(recursive=True) give for the row of ``value``."""
    struct = columns.struct
    internal = struct.toInternal(cast(Any, columns.to_row(value)))
    return struct.fromInternal(internal).asDict(recursive=True)


def assert_same_json(type_: Any, got: Any, want: Any) -> None:
    codec = JsonCodec(type_)
    assert codec.encode(got) == codec.encode(want)


def f(name: str, dtype: DataType, nullable: bool = False) -> StructField:
    return StructField(name, dtype, nullable=nullable)


S, L, D, B = StringType(), LongType(), DoubleType(), BooleanType()

LINE = StructType([f("sku", S), f("qty", L), f("price", D, True)])
# The fields of a struct that may be null are nullable too (Spark writes them as nulls).
LINE_OR_NULL = StructType([f("sku", S, True), f("qty", L, True), f("price", D, True)])
ADDRESS = StructType([f("street", S), f("city", S)])

EXPECTED: list[tuple[Any, StructType]] = [
    (
        Flat,
        StructType(
            [
                f("id", S),
                f("count", L),
                f("price", D),
                f("active", B),
                f("data", BinaryType()),
                f("created", TimestampType()),
                f("day", DateType()),
                f("ref", S),
                f("note", S, True),
                f("kind", S),
            ]
        ),
    ),
    (
        Order,
        StructType(
            [
                f("id", S),
                f("customerId", S),
                f("amount", D),
                f("lines", ArrayType(S, containsNull=False)),
                f("created", TimestampType(), True),
            ]
        ),
    ),
    (
        Basket,
        StructType(
            [
                f("id", S),
                f(
                    "customer",
                    StructType(
                        [
                            f("name", S),
                            f("address", ADDRESS),
                            f("previous", ArrayType(ADDRESS, containsNull=False)),
                        ]
                    ),
                ),
                f("lines", ArrayType(LINE, containsNull=False)),
                f("maybe_lines", ArrayType(LINE_OR_NULL, containsNull=True)),
                f("gift", LINE_OR_NULL, True),
            ]
        ),
    ),
    (
        Enums,
        StructType(
            [
                f("color", S),
                f("size", L),
                f("shape", S),
                f("colors", ArrayType(S, containsNull=False)),
                f("maybe", S, True),
                f("sized", L),
            ]
        ),
    ),
    (EnumValues, StructType([f("color", S), f("size", L)])),
    (
        Maps,
        StructType(
            [
                f("counts", MapType(S, L, valueContainsNull=False)),
                f("by_id", MapType(L, D, valueContainsNull=True)),
                f("lines", MapType(S, LINE, valueContainsNull=False)),
                f("by_color", MapType(S, ArrayType(S, False), valueContainsNull=False)),
            ]
        ),
    ),
    (
        Money,
        StructType(
            [
                f("exact", DecimalType(10, 2)),
                f("places", DecimalType(38, 4)),
                f("free", DecimalType(38, 18)),
                f("digits", DecimalType(38, 18)),
            ]
        ),
    ),
    (
        Times,
        StructType(
            [
                f("at", TimestampType()),
                f("naive", TimestampNTZType()),
                f("clock", S),
                f("took", DayTimeIntervalType()),
                f("day", DateType()),
            ]
        ),
    ),
    (
        Tuples,
        StructType(
            [
                f("fixed", StructType([f("_1", L), f("_2", S)])),
                f("many", ArrayType(D, containsNull=False)),
                f("pair", StructType([f("left", L), f("right", S)])),
                f("tags", ArrayType(S, containsNull=False)),
            ]
        ),
    ),
    (
        Constrained,
        StructType([f("small", L), f("name", S), f("Code", S), f("outName", L)]),
    ),
    (Point, StructType([f("x", D), f("y", D), f("label", S, True)])),
    (Reading, StructType([f("sensor", S), f("value", D), f("unit", S, True)])),
    (int, StructType([f("value", L)])),
    (int | None, StructType([f("value", L, True)])),
    (list[int], StructType([f("value", ArrayType(L, containsNull=False))])),
    (Numbers, StructType([f("value", ArrayType(L, containsNull=False))])),
    (list[Line], StructType([f("value", ArrayType(LINE, containsNull=False))])),
]


def _name(case: Any) -> str:
    return str(getattr(case, "__name__", case))


# ------------------------------------------------------------------ schemas


@pytest.mark.parametrize(("type_", "expected"), EXPECTED, ids=[_name(t) for t, _ in EXPECTED])
def test_struct_is_the_expected_one(type_: Any, expected: StructType) -> None:
    columns = PayloadColumns(type_)
    assert columns.struct == expected
    assert columns.names == tuple(expected.names)


def _items_nullable(dtype: DataType) -> DataType:
    """``dtype`` with every array item and map value nullable, through nested types."""
    if isinstance(dtype, ArrayType):
        return ArrayType(_items_nullable(dtype.elementType), containsNull=True)
    if isinstance(dtype, MapType):
        return MapType(dtype.keyType, _items_nullable(dtype.valueType), valueContainsNull=True)
    if isinstance(dtype, StructType):
        return StructType(
            [StructField(f.name, _items_nullable(f.dataType), f.nullable) for f in dtype]
        )
    return dtype


# PySpark 4.0 reads every Arrow list item and map value back as nullable.
_ITEM = pa.field("item", pa.int64(), nullable=False)
_READS_ITEM_NULLABILITY = not cast(
    ArrayType, from_arrow_schema(pa.schema([pa.field("a", pa.list_(_ITEM))]))["a"].dataType
).containsNull


@pytest.mark.parametrize("type_", [t for t, _ in EXPECTED], ids=[_name(t) for t, _ in EXPECTED])
def test_arrow_fields_are_what_spark_expects(type_: Any) -> None:
    columns = PayloadColumns(type_)
    # A Python data source's batches must equal this schema (nullability included).
    assert columns.arrow_schema.equals(arrow_schema(columns.struct))
    assert columns.arrow_fields == list(columns.arrow_schema)
    read_back = from_arrow_schema(pa.schema(columns.arrow_fields), prefer_timestamp_ntz=True)
    if _READS_ITEM_NULLABILITY:
        assert read_back == columns.struct
    else:
        assert read_back == _items_nullable(columns.struct)


def test_arrow_fields_built_by_hand() -> None:
    line = pa.struct(
        [
            pa.field("sku", pa.string(), nullable=False),
            pa.field("qty", pa.int64(), nullable=False),
            pa.field("price", pa.float64()),
        ]
    )
    expected = [
        pa.field("id", pa.string(), nullable=False),
        pa.field("at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("took", pa.duration("us"), nullable=False),
        pa.field("lines", pa.list_(pa.field("element", line, nullable=False)), nullable=False),
        pa.field(
            "counts",
            pa.map_(
                pa.field("key", pa.string(), nullable=False),
                pa.field("value", pa.int64(), nullable=True),
            ),
            nullable=False,
        ),
        pa.field("price", pa.decimal128(10, 2), nullable=True),
    ]

    class Mixed(BaseModel):
        id: str
        at: datetime
        took: timedelta
        lines: list[Line]
        counts: dict[str, int | None]
        price: condecimal(max_digits=10, decimal_places=2) | None  # type: ignore[valid-type]

    assert PayloadColumns(Mixed).arrow_fields == expected


class Inner(BaseModel):
    x: int
    tags: list[str] = []


class Outer(BaseModel):
    inner: Inner
    name: str


class MaybeOuter(BaseModel):
    id: int
    outer: Outer | None = None
    outers: dict[str, Outer | None] = {}


def test_fields_of_a_struct_that_may_be_null_are_nullable() -> None:
    # Spark writes the fields of a null struct as nulls; non-nullable ones break
    # DataFrame.toArrow(). Arrays and maps inside keep their element nullability.
    inner = StructType([f("x", L, True), f("tags", ArrayType(S, containsNull=False), True)])
    outer = StructType([f("inner", inner, True), f("name", S, True)])
    expected = StructType(
        [
            f("id", L),
            f("outer", outer, True),
            f("outers", MapType(S, outer, valueContainsNull=True)),
        ]
    )
    columns = PayloadColumns(MaybeOuter)
    assert columns.struct == expected
    assert columns.arrow_schema.equals(arrow_schema(expected))
    assert PayloadColumns(Line | None).struct == StructType([f("value", LINE_OR_NULL, True)])
    value = MaybeOuter(
        id=1,
        outer=Outer(inner=Inner(x=2, tags=["t"]), name="n"),
        outers={"a": None, "b": Outer(inner=Inner(x=3), name="m")},
    )
    for v in (value, MaybeOuter(id=2)):
        assert_same_json(MaybeOuter, roundtrip(columns, v), v)


def test_column_names_are_the_json_keys() -> None:
    columns = PayloadColumns(Constrained)
    value = Constrained.model_validate(
        {"small": 1, "name": "ab", "Code": "x", "hidden": 3, "renamed": 4}
    )
    keys = JsonCodec(Constrained).encode(value).decode()
    assert re.findall(r'"(\w+)":', keys) == list(columns.names)
    assert columns.to_row(value) == {"small": 1, "name": "ab", "Code": "x", "outName": 4}
    assert roundtrip(columns, value) == value.model_copy(update={"hidden": 0})


# ------------------------------------------------------------------ round trips

NOW = datetime(2024, 5, 17, 8, 30, 15, 123456, tzinfo=UTC)

VALUES: list[tuple[Any, Any]] = [
    (
        Flat,
        Flat(
            id="f-1",
            count=2**62,
            price=-1.5,
            active=True,
            data=b"raw\x00",
            created=NOW,
            day=date(2024, 2, 29),
            ref=UUID(int=42),
            note=None,
            kind="b",
        ),
    ),
    (Order, Order(id="o-1", customerId="c-1", amount=9.5, lines=["x", "y"], created=NOW)),
    (Order, Order(id="o-2", customerId="c-2", amount=0.0)),
    (
        Basket,
        Basket(
            id="b-1",
            customer=Customer(
                name="Ann",
                address=Address(street="Main 1", city="Oslo"),
                previous=[Address(street="Old 2", city="Bergen")],
            ),
            lines=[Line(sku="a"), Line(sku="b", qty=3, price=2.25)],
            maybe_lines=[None, Line(sku="c")],
            gift=Line(sku="g", price=None),
        ),
    ),
    (
        Enums,
        Enums(
            color=Color.BLUE,
            size=Size.M,
            shape=Shape.ROUND,
            colors=[Color.RED, Color.BLUE],
            maybe=None,
            sized=Size.M,
        ),
    ),
    (EnumValues, EnumValues(color=Color.RED, size=Size.S)),
    (
        Maps,
        Maps(
            counts={"a": 1, "b": 2},
            by_id={3: 1.5, 1: None},
            lines={"x": Line(sku="x")},
            by_color={Color.RED: ["r"]},
        ),
    ),
    (
        Money,
        Money(
            exact=Decimal("12345678.90"),
            places=Decimal("1.2345"),
            free=Decimal("-3.141592653589793238"),
            digits=Decimal("7.500000000000000000"),
        ),
    ),
    (
        Times,
        Times(
            at=NOW,
            naive=datetime(2024, 1, 1, 23, 59, 59, 999999),
            clock=dtime(13, 5, 0, 250),
            took=timedelta(days=-2, seconds=5, microseconds=7),
            day=date(1970, 1, 1),
        ),
    ),
    (Tuples, Tuples(fixed=(1, "x"), many=(0.5, 1.0), pair=Pair(2, "y"), tags=frozenset({"t"}))),
    (Point, Point(x=1.0, y=-2.0)),
    (Reading, Reading(sensor="s1", value=20.5, unit="C")),
    (Reading, Reading(sensor="s2", value=0.0)),
    (int, 7),
    (int | None, None),
    (list[int], [1, 2, 3]),
    (Numbers, Numbers([4, 5])),
    (list[Line], [Line(sku="a"), Line(sku="b", qty=2)]),
]


@pytest.mark.parametrize(
    ("type_", "value"), VALUES, ids=[f"{_name(t)}-{i}" for i, (t, _) in enumerate(VALUES)]
)
def test_round_trip_through_arrow(type_: Any, value: Any) -> None:
    columns = PayloadColumns(type_)
    assert_same_json(type_, roundtrip(columns, value), value)


@pytest.fixture
def local_tz() -> Iterator[None]:
    """Run in a non-UTC local time zone, as Spark's Row conversion uses local time."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TZ", "America/New_York")
        time.tzset()
        try:
            yield
        finally:
            mp.undo()
            time.tzset()


@pytest.mark.usefixtures("local_tz")
@pytest.mark.parametrize(
    ("type_", "value"), VALUES, ids=[f"{_name(t)}-{i}" for i, (t, _) in enumerate(VALUES)]
)
def test_round_trip_through_spark_rows(type_: Any, value: Any) -> None:
    # Spark's Row gives maps as dicts, structs as dicts, timestamps as naive local time.
    columns = PayloadColumns(type_)
    assert_same_json(type_, columns.from_row(spark_row(columns, value)), value)


def test_spark_row_timestamps_are_local_naive(local_tz: None) -> None:
    columns = PayloadColumns(Flat)
    value = dict(VALUES)[Flat]
    row = spark_row(columns, value)
    assert row["created"].tzinfo is None
    assert row["created"] != NOW.replace(tzinfo=None)  # local time, not UTC
    assert columns.from_row(row).created == NOW


def test_datetimes_come_back_in_utc() -> None:
    columns = PayloadColumns(Times)
    value = dict(VALUES)[Times]
    plus2 = timezone(timedelta(hours=2))
    shifted = value.model_copy(update={"at": NOW.astimezone(plus2)})
    back = roundtrip(columns, shifted)
    assert back.at == NOW
    assert back.at.utcoffset() == timedelta(0)
    # Naive datetimes are taken as UTC.
    naive = value.model_copy(update={"at": NOW.replace(tzinfo=None)})
    assert roundtrip(columns, naive).at == NOW


def test_decimals_come_back_at_the_column_scale() -> None:
    columns = PayloadColumns(Money)
    value = Money(exact=Decimal("1.5"), places=Decimal("2"), free=Decimal("0.1"), digits=1)
    back = roundtrip(columns, value)
    assert back == value
    assert str(back.exact) == "1.50"
    assert str(back.free) == "0.100000000000000000"


def test_to_row_gives_arrow_ready_values() -> None:
    value = dict(VALUES)[Tuples]
    assert PayloadColumns(Tuples).to_row(value) == {
        "fixed": {"_1": 1, "_2": "x"},
        "many": [0.5, 1.0],
        "pair": {"left": 2, "right": "y"},
        "tags": ["t"],
    }
    row = PayloadColumns(Enums).to_row(dict(VALUES)[Enums])
    assert row == {
        "color": "blue",
        "size": 2,
        "shape": "round",
        "colors": ["red", "blue"],
        "maybe": None,
        "sized": 2,
    }
    assert all(type(v) in (str, int) for k, v in row.items() if k not in ("colors", "maybe"))


def test_from_row_ignores_extra_keys_and_uses_defaults() -> None:
    columns = PayloadColumns(Line)
    assert columns.from_row({"sku": "a", "other": 1, "_seq": 7}) == Line(sku="a")


def test_typed_dict_optional_key_stays_absent() -> None:
    columns = PayloadColumns(Reading)
    back = roundtrip(columns, Reading(sensor="s", value=1.0))
    assert back == {"sensor": "s", "value": 1.0}


# ------------------------------------------------------------------ property


class Item(BaseModel):
    name: str
    qty: int
    price: float | None = None


class Cart(BaseModel):
    id: UUID
    items: list[Item]
    tags: dict[str, int]
    note: str | None = None
    when: datetime
    color: Color
    best: Item | None = None
    codes: list[int | None] = []


int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
floats = st.floats(allow_nan=False, allow_infinity=False)
items = st.builds(Item, name=st.text(), qty=int64, price=st.none() | floats)
carts = st.builds(
    Cart,
    id=st.uuids(),
    items=st.lists(items, max_size=4),
    tags=st.dictionaries(st.text(), int64, max_size=4),
    note=st.none() | st.text(),
    when=st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ),
    color=st.sampled_from(Color),
    best=st.none() | items,
    codes=st.lists(st.none() | int64, max_size=4),
)
CART = PayloadColumns(Cart)


@settings(max_examples=50, deadline=None)
@given(carts)
def test_round_trip_property(cart: Cart) -> None:
    assert_same_json(Cart, roundtrip(CART, cart), cart)


# ------------------------------------------------------------------ unsupported shapes


class UnionLine(BaseModel):
    sku: int | str


class UnionOrder(BaseModel):
    lines: list[UnionLine]


class AnyField(BaseModel):
    data: Any


class ObjectField(BaseModel):
    data: dict[str, object]


class Node(BaseModel):
    name: str
    children: list[Node] = []


class Tree(BaseModel):
    root: Node


class FloatKeys(BaseModel):
    weights: dict[float, int]


class Mixed(enum.Enum):
    A = "a"
    B = 1


class MixedEnum(BaseModel):
    mixed: Mixed


class MixedLiteral(BaseModel):
    kind: Literal[1, "one"]


class Cat(BaseModel):
    kind: Literal["cat"] = "cat"


class Dog(BaseModel):
    kind: Literal["dog"] = "dog"


class Pet(BaseModel):
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]


class TooPrecise(BaseModel):
    amount: condecimal(max_digits=40, decimal_places=2)  # type: ignore[valid-type]


class Opaque:
    pass


class ArbitraryType(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    thing: Opaque


@pytest.mark.parametrize(
    ("type_", "message"),
    [
        (UnionOrder, "UnionOrder.lines[].sku: a union of int | str"),
        (AnyField, "AnyField.data: Any has no Spark SQL type"),
        (ObjectField, "ObjectField.data{}: Any has no Spark SQL type"),
        (Node, "Node.children[]: Node refers to itself"),
        (Tree, "Tree.root.children[]: Node refers to itself"),
        (FloatKeys, "FloatKeys.weights: map keys must be str or int, not float"),
        (MixedEnum, "MixedEnum.mixed: Mixed mixes value types"),
        (MixedLiteral, "MixedLiteral.kind: Literal[1, 'one'] mixes value types"),
        (Pet, "Pet.pet: a discriminated union"),
        (TooPrecise, "TooPrecise.amount: Spark decimals hold at most 38 digits"),
        (ArbitraryType, "ArbitraryType.thing: Opaque has no Spark SQL type"),
        (int | str, "int | str: a union of int | str"),
        (Any, "Any: Any has no Spark SQL type"),
        (list[Any], "list[Any][]: Any has no Spark SQL type"),
        (Opaque, "Opaque: pydantic cannot handle the type"),
    ],
    ids=lambda v: _name(v)[:30],
)
def test_unsupported_shapes_raise_schema_error(type_: Any, message: str) -> None:
    with pytest.raises(SchemaError, match=re.escape(message)):
        PayloadColumns(type_)


def test_schema_error_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        PayloadColumns(UnionOrder)


# ------------------------------------------------------------------ decode errors


def test_from_row_wrong_type_raises_decode_error() -> None:
    columns = PayloadColumns(Line)
    with pytest.raises(DecodeError, match=r"cannot convert a row to Line: qty: ") as info:
        columns.from_row({"sku": "a", "qty": "many"})
    assert isinstance(info.value.__cause__, ValidationError)
    assert info.value.type_name == "Line"


def test_from_row_wrong_shape_raises_decode_error() -> None:
    columns = PayloadColumns(Basket)
    with pytest.raises(DecodeError, match="cannot convert a row to Basket") as info:
        columns.from_row({"id": "b", "customer": 5, "lines": []})
    assert info.value.__cause__ is not None


def test_from_row_missing_required_column_raises_decode_error() -> None:
    with pytest.raises(DecodeError, match="sku: Field required") as info:
        PayloadColumns(Line).from_row({"qty": 1})
    assert isinstance(info.value.__cause__, ValidationError)


# ------------------------------------------------------------------ pickling


def test_pickle_round_trip() -> None:
    columns = PayloadColumns(Basket)
    clone = pickle.loads(pickle.dumps(columns))
    assert clone.struct == columns.struct
    assert clone.names == columns.names
    assert clone.arrow_fields == columns.arrow_fields
    value = dict(VALUES)[Basket]
    assert clone.to_row(value) == columns.to_row(value)
    assert_same_json(Basket, roundtrip(clone, value), value)
    assert repr(clone) == "PayloadColumns(Basket)"
