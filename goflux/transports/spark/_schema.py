"""Spark SQL columns for goflux payload types: schema, Arrow fields and converters.

:class:`PayloadColumns` reads a payload type ``T`` (anything :class:`goflux.JsonCodec`
accepts) once and derives its Spark ``StructType``, the matching Arrow fields, and
precompiled converters between validated ``T`` values and row dicts. A struct-like
``T`` (pydantic model, dataclass, TypedDict) gives one column per field, named like
the JSON key on the wire (the field's serialization alias if it has one); any other
``T`` (``int``, ``list[str]``, ...) gives a single column named ``value``.

Type mapping, recursively through fields, items and map values:

========================================  ==============================================
Python / pydantic                         Spark SQL (Arrow)
========================================  ==============================================
``str``, ``uuid.UUID``, URLs              ``StringType`` (``string``)
``int``                                   ``LongType`` (``int64``)
``float``                                 ``DoubleType`` (``float64``)
``bool``                                  ``BooleanType`` (``bool``)
``bytes``                                 ``BinaryType`` (``binary``)
``datetime.datetime``                     ``TimestampType`` (``timestamp[us, UTC]``);
                                          pydantic ``NaiveDatetime`` gives
                                          ``TimestampNTZType`` (``timestamp[us]``)
``datetime.date``                         ``DateType`` (``date32``)
``datetime.time``                         ``StringType``, ISO 8601 text
``datetime.timedelta``                    ``DayTimeIntervalType`` (``duration[us]``)
``decimal.Decimal``                       ``DecimalType(max_digits, decimal_places)`` when
                                          both constraints are set, else (38, 18); a
                                          ``decimal_places`` alone gives (38, places)
``Enum`` / ``Literal[...]``               the type of their values (str, int, float, bool)
constrained types (``conint``, ...)       the base type (validators are ignored)
``X | None``, fields defaulting to None   the type of ``X``, nullable
``list``/``set``/``frozenset``/``deque``  ``ArrayType``; ``containsNull`` when the items
``tuple[X, ...]``, ``Sequence[X]``        are optional
``tuple[A, B]``, ``NamedTuple``           ``StructType`` with fields ``_1``, ``_2``, ...
                                          (a NamedTuple keeps its field names)
``dict[str, X]``, ``Mapping[str, X]``     ``MapType(StringType, X)``; int, str-enum and
                                          UUID keys also work (``LongType``/``StringType``)
models, dataclasses, TypedDicts           ``StructType``, recursively
========================================  ==============================================

Only optional types (``X | None``, ``Optional[X]``, a ``None`` literal), fields
defaulting to ``None`` and ``NotRequired`` TypedDict keys are nullable, and so are the
fields of a struct that may itself be null, through nested structs (Spark writes them
as nulls, and ``DataFrame.toArrow()`` refuses nulls in non-nullable fields); every
other column and nested field is ``nullable=False``. The Arrow fields say exactly the
same, so the batches match what Spark derives from :attr:`PayloadColumns.struct`.

Not supported (:class:`~goflux.transports.spark.SchemaError` naming the field path, for example
``Order.lines[].sku``): ``Any``/``object``, unions of different types, discriminated
unions, self-referencing types, map keys other than str/int, ``Json[...]``, and types
pydantic validates with opaque functions or ``isinstance`` checks (``Path``, IP
addresses, ``SecretStr``, arbitrary classes).

Fields excluded from serialization (``Field(exclude=True)``) have no column; computed
fields and the extra fields of ``extra="allow"`` models are not carried either.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
from collections.abc import Callable, Mapping
from enum import Enum
from operator import attrgetter, itemgetter
from typing import Any, Generic, TypeVar, cast

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from pydantic import TypeAdapter, ValidationError
from pydantic.errors import PydanticUserError
from pyspark.sql.pandas.types import to_arrow_schema
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
from typing_extensions import TypeForm

from goflux._codecs import describe_validation, type_adapter, type_name
from goflux._errors import DecodeError
from goflux.transports.spark._errors import SchemaError

__all__ = ("VALUE_COLUMN", "PayloadColumns", "arrow_schema", "loosen_nulls")

T = TypeVar("T")

VALUE_COLUMN = "value"
"""The single column's name for payload types that are not struct-like."""

# TimestampType as Arrow timestamp[us, UTC]: PySpark 4.0 says so with timestamp_utc=True
# (its default), later versions with timezone="UTC".
_UTC_TIMESTAMPS: dict[str, Any] = (
    {"timezone": "UTC"}
    if "timezone" in inspect.signature(to_arrow_schema).parameters
    else {"timestamp_utc": True}
)


def arrow_schema(struct: StructType) -> pa.Schema:
    """Spark's Arrow schema for ``struct``, with ``TimestampType`` as ``timestamp[us, UTC]``."""
    return to_arrow_schema(struct, **_UTC_TIMESTAMPS)


_Convert = Callable[[Any], Any]
_MISSING: Any = object()
_MAX_DECIMAL_DIGITS = 38
_DEFAULT_DECIMAL = (38, 18)

_LEAF_TYPES: dict[str, DataType] = {
    "str": StringType(),
    "int": LongType(),
    "float": DoubleType(),
    "bool": BooleanType(),
    "bytes": BinaryType(),
    "date": DateType(),
    "timedelta": DayTimeIntervalType(),
}
# Schemas whose validated value is that of an inner "schema" of the same type.
_WRAPPERS = frozenset({"function-after", "function-before", "function-wrap", "custom-error"})
_ARRAYS = frozenset({"list", "set", "frozenset", "deque"})
_NOT_SUPPORTED = {
    "any": "Any has no Spark SQL type; annotate a concrete type",
    "none": "None alone has no Spark SQL type; use X | None",
    "json": "Json[...] fields hold parsed values but validate JSON text; use the inner type",
    "tagged-union": "a discriminated union has no single Spark SQL type; "
    "use one model with optional fields",
    "function-plain": "a type validated by a plain function has no known Spark SQL type; "
    "use a concrete type",
    "generator": "iterators cannot be stored; use list[X]",
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Node:
    """What one type becomes: its Spark type and its value converters.

    ``to`` turns a validated value into what Arrow accepts, ``back`` turns what Arrow or
    Spark return into input pydantic validates as the type; None means "as is". Both
    accept None when ``nullable``.
    """

    dtype: DataType
    nullable: bool = False
    to: _Convert | None = None
    back: _Convert | None = None
    fields: tuple[_Field, ...] | None = None  # set for models, dataclasses, TypedDicts


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str  # attribute or key name, which validation accepts (by_name=True)
    column: str  # the JSON key on the wire
    node: _Node
    optional_key: bool = False  # a NotRequired TypedDict key: absent and None are alike
    init: bool = True  # dataclass init=False fields are not passed back


def _none_safe(conv: _Convert | None) -> _Convert | None:
    if conv is None:
        return None

    def convert(value: Any) -> Any:
        return None if value is None else conv(value)

    return convert


def loosen_nulls(dtype: DataType) -> DataType:
    """Make every field of a struct that may be null nullable, through nested structs.

    Spark writes a null struct's fields as nulls too, and pyspark refuses such batches
    for non-nullable fields (``DataFrame.toArrow()``: "nulls in input cannot be viewed
    as non-nullable").
    """
    if not isinstance(dtype, StructType):
        return dtype
    return StructType([StructField(f.name, loosen_nulls(f.dataType), nullable=True) for f in dtype])


def _nullable(node: _Node) -> _Node:
    if node.nullable:
        return node
    return dataclasses.replace(
        node,
        dtype=loosen_nulls(node.dtype),
        nullable=True,
        to=_none_safe(node.to),
        back=_none_safe(node.back),
    )


def _enum_value(value: Any) -> Any:
    # Models with use_enum_values=True hold the raw value already.
    return value.value if isinstance(value, Enum) else value


def _to_utc(value: Any) -> Any:
    # Arrow returns aware datetimes; Spark's Row returns naive ones in the local time
    # zone (datetime.fromtimestamp), which astimezone reads as local time too.
    return value.astimezone(dt.UTC) if isinstance(value, dt.datetime) else value


def _schema_name(schema: Mapping[str, Any]) -> str:
    cls = schema.get("cls")
    if cls is not None:
        return type_name(cls)
    kind = str(schema["type"])
    if kind == "nullable":
        return f"{_schema_name(schema['schema'])} | None"
    if kind in _WRAPPERS:
        return _schema_name(schema["schema"])
    return kind


class _Builder:
    """Walks a pydantic core schema into :class:`_Node` objects."""

    def __init__(self) -> None:
        self._definitions: dict[str, Mapping[str, Any]] = {}
        self._expanding: list[str] = []

    def walk(self, schema: Mapping[str, Any], path: str) -> _Node:
        ref = schema.get("ref")
        if ref is None:
            return self._walk(schema, path)
        if ref in self._expanding:
            raise SchemaError(
                f"{path}: {_schema_name(schema)} refers to itself; recursive types have "
                "no Spark SQL type"
            )
        self._expanding.append(ref)
        try:
            return self._walk(schema, path)
        finally:
            self._expanding.pop()

    def _walk(self, schema: Mapping[str, Any], path: str) -> _Node:  # noqa: PLR0911, PLR0912
        kind = schema["type"]
        leaf = _LEAF_TYPES.get(kind)
        if leaf is not None:
            return _Node(leaf)
        if kind in _WRAPPERS:
            return self.walk(schema["schema"], path)
        if kind == "nullable":
            return _nullable(self.walk(schema["schema"], path))
        if kind == "default":
            node = self.walk(schema["schema"], path)
            return _nullable(node) if schema.get("default", _MISSING) is None else node
        if kind == "definitions":
            for definition in schema["definitions"]:
                self._definitions[definition["ref"]] = definition
            return self.walk(schema["schema"], path)
        if kind == "definition-ref":
            return self.walk(self._definitions[schema["schema_ref"]], path)
        if kind == "json-or-python":
            return self.walk(schema["python_schema"], path)
        if kind == "lax-or-strict":
            return self.walk(schema["strict_schema"], path)
        if kind == "chain":
            return self.walk(schema["steps"][-1], path)
        if kind in ("str", "uuid", "url", "multi-host-url"):
            return _Node(StringType(), to=None if kind == "str" else str)
        if kind == "datetime":
            if schema.get("tz_constraint") == "naive":
                return _Node(TimestampNTZType())
            return _Node(TimestampType(), back=_to_utc)
        if kind == "time":
            return _Node(StringType(), to=dt.time.isoformat)
        if kind == "decimal":
            return _Node(_decimal_type(schema, path))
        if kind == "enum":
            return self._enum(schema, path)
        if kind == "literal":
            return self._literal(schema, path)
        if kind == "union":
            return self._union(schema, path)
        if kind in _ARRAYS:
            return self._array(schema.get("items_schema"), path)
        if kind == "tuple":
            return self._tuple(schema, path)
        if kind == "dict":
            return self._map(schema, path)
        if kind in ("model", "dataclass", "typed-dict", "named-tuple"):
            return self._record(schema, path)
        if kind == "is-instance":
            name = type_name(schema["cls"])
            raise SchemaError(f"{path}: {name} has no Spark SQL type; use a concrete type")
        reason = _NOT_SUPPORTED.get(kind, f"{kind} values have no Spark SQL type")
        raise SchemaError(f"{path}: {reason}")

    def _enum(self, schema: Mapping[str, Any], path: str) -> _Node:
        values = [member.value for member in schema["members"]]
        return _Node(_common_type(values, type_name(schema["cls"]), path), to=_enum_value)

    def _literal(self, schema: Mapping[str, Any], path: str) -> _Node:
        expected = list(schema["expected"])
        values = [_enum_value(value) for value in expected if value is not None]
        name = f"Literal{expected!r}"
        has_enum = any(isinstance(value, Enum) for value in expected)
        node = _Node(_common_type(values, name, path), to=_enum_value if has_enum else None)
        return _nullable(node) if len(values) < len(expected) else node

    def _union(self, schema: Mapping[str, Any], path: str) -> _Node:
        choices = [c[0] if isinstance(c, tuple) else c for c in schema["choices"]]
        nodes = [self.walk(choice, path) for choice in choices]
        first = nodes[0]
        if all(n.dtype == first.dtype and n.to is first.to and n.back is first.back for n in nodes):
            return _nullable(first) if any(n.nullable for n in nodes) else first
        names = " | ".join(_schema_name(choice) for choice in choices)
        raise SchemaError(
            f"{path}: a union of {names} has no single Spark SQL type; use one concrete type"
        )

    def _array(self, items: Mapping[str, Any] | None, path: str) -> _Node:
        if items is None:
            raise SchemaError(f"{path}: {_NOT_SUPPORTED['any']} for the items")
        item = self.walk(items, f"{path}[]")
        dtype = ArrayType(item.dtype, containsNull=item.nullable)
        to, back = item.to, item.back
        return _Node(
            dtype,
            # set, frozenset and deque become lists; Arrow takes any sequence as is.
            to=list if to is None else (lambda value: [to(x) for x in value]),
            back=None if back is None else (lambda value: [back(x) for x in value]),
        )

    def _tuple(self, schema: Mapping[str, Any], path: str) -> _Node:
        items = schema["items_schema"]
        variadic = schema.get("variadic_item_index")
        if variadic is not None:
            if len(items) != 1:
                raise SchemaError(
                    f"{path}: tuples mixing fixed and variable-length items have no Spark "
                    "SQL type; use tuple[X, ...] or a model"
                )
            return self._array(items[0], path)
        if not items:
            raise SchemaError(f"{path}: the empty tuple has no Spark SQL type")
        names = [f"_{i}" for i in range(1, len(items) + 1)]
        return self._positional(names, items, path)

    def _positional(self, names: list[str], items: list[Mapping[str, Any]], path: str) -> _Node:
        """Build a struct for a tuple: a dict on the way out, a list on the way back."""
        nodes = [self.walk(item, f"{path}[{i}]") for i, item in enumerate(items)]
        dtype = StructType(
            [
                StructField(n, node.dtype, nullable=node.nullable)
                for n, node in zip(names, nodes, strict=True)
            ]
        )
        outs = tuple(zip(names, [node.to for node in nodes], strict=True))
        backs = tuple(zip(names, [node.back for node in nodes], strict=True))

        def to(value: Any) -> dict[str, Any]:
            return {
                n: x if conv is None else conv(x) for (n, conv), x in zip(outs, value, strict=True)
            }

        def back(value: Mapping[str, Any]) -> list[Any]:
            return [value[n] if conv is None else conv(value[n]) for n, conv in backs]

        return _Node(dtype, to=to, back=back)

    def _map(self, schema: Mapping[str, Any], path: str) -> _Node:
        keys_schema = schema.get("keys_schema")
        values_schema = schema.get("values_schema")
        if keys_schema is None or values_schema is None:
            raise SchemaError(f"{path}: {_NOT_SUPPORTED['any']} for the keys and values")
        key = self.walk(keys_schema, f"{path}{{key}}")
        if key.nullable or not isinstance(key.dtype, StringType | LongType):
            raise SchemaError(
                f"{path}: map keys must be str or int, not {_schema_name(keys_schema)}"
            )
        value = self.walk(values_schema, f"{path}{{}}")
        dtype = MapType(key.dtype, value.dtype, valueContainsNull=value.nullable)
        kto, vto, vback = key.to, value.to, value.back
        to: _Convert | None = None
        if kto is not None or vto is not None:

            def to(mapping: Mapping[Any, Any]) -> dict[Any, Any]:
                return {
                    k if kto is None else kto(k): v if vto is None else vto(v)
                    for k, v in mapping.items()
                }

        def back(entries: Any) -> dict[Any, Any]:
            # Arrow gives a list of (key, value) tuples, Spark's Row a dict.
            pairs = entries.items() if isinstance(entries, Mapping) else entries
            if vback is None:
                return dict(pairs)
            return {k: vback(v) for k, v in pairs}

        return _Node(dtype, to=to, back=back)

    def _record(self, schema: Mapping[str, Any], path: str) -> _Node:
        kind = schema["type"]
        if kind == "named-tuple":
            names = [field["name"] for field in schema["fields"]]
            items = [field["schema"] for field in schema["fields"]]
            return self._positional(names, items, path)
        if kind == "model" and schema.get("root_model"):
            node = self.walk(schema["schema"], path)
            inner = node.to
            to = attrgetter("root")
            return _Node(
                node.dtype,
                node.nullable,
                to=to if inner is None else (lambda value: inner(value.root)),
                back=node.back,
            )
        fields = tuple(self._fields(schema, path))
        columns = [f.column for f in fields]
        duplicates = sorted({c for c in columns if columns.count(c) > 1})
        if duplicates:
            raise SchemaError(f"{path}: more than one field is written as {duplicates}")
        dtype = StructType(
            [StructField(f.column, f.node.dtype, nullable=f.node.nullable) for f in fields]
        )
        return _Node(
            dtype,
            to=_record_to(fields, by_key=kind == "typed-dict"),
            back=_record_back(fields),
            fields=fields,
        )

    def _fields(self, schema: Mapping[str, Any], path: str) -> list[_Field]:
        kind = schema["type"]
        inner = schema["schema"] if kind in ("model", "dataclass") else schema
        while inner["type"] in _WRAPPERS:  # model validators wrap the fields schema
            inner = inner["schema"]
        raw = inner["fields"]
        entries = raw.items() if isinstance(raw, Mapping) else ((f["name"], f) for f in raw)
        fields = []
        for name, field in entries:
            if field.get("serialization_exclude") or field.get("init_only"):
                continue
            node = self.walk(field["schema"], f"{path}.{name}")
            optional_key = kind == "typed-dict" and not field.get("required", True)
            fields.append(
                _Field(
                    name=name,
                    column=field.get("serialization_alias") or name,
                    node=_nullable(node) if optional_key else node,
                    optional_key=optional_key,
                    init=field.get("init", True) is not False,
                )
            )
        return fields


def _common_type(values: list[Any], name: str, path: str) -> DataType:
    """Return the Spark type all ``values`` share (for enums and literals)."""
    kinds = {type(v) for v in values}
    for python_type, spark_type in ((bool, BooleanType()), (int, LongType())):
        if kinds == {python_type}:
            return spark_type
    if kinds and kinds <= {str}:
        return StringType()
    if kinds and kinds <= {float, int}:
        return DoubleType()
    raise SchemaError(
        f"{path}: {name} mixes value types ({', '.join(sorted(k.__name__ for k in kinds))}); "
        "Spark SQL needs one: use values of one type"
    )


def _decimal_type(schema: Mapping[str, Any], path: str) -> DecimalType:
    digits = schema.get("max_digits")
    places = schema.get("decimal_places")
    if places is None:
        precision, scale = _DEFAULT_DECIMAL
    elif digits is None:
        precision, scale = _MAX_DECIMAL_DIGITS, places
    else:
        precision, scale = max(digits, places), places
    if precision > _MAX_DECIMAL_DIGITS:
        raise SchemaError(
            f"{path}: Spark decimals hold at most {_MAX_DECIMAL_DIGITS} digits, "
            f"max_digits is {digits}"
        )
    return DecimalType(precision, scale)


def _record_to(fields: tuple[_Field, ...], *, by_key: bool) -> _Convert:
    """Compile a value-to-dict converter: one getter (and converter) per field."""
    plan = tuple((f.column, _getter(f, by_key=by_key)) for f in fields)

    def to(value: Any) -> dict[str, object]:
        return {column: get(value) for column, get in plan}

    return to


def _getter(field: _Field, *, by_key: bool) -> _Convert:
    name, conv = field.name, field.node.to
    get: _Convert
    if field.optional_key:
        get = lambda value: value.get(name)  # noqa: E731
    else:
        get = itemgetter(name) if by_key else attrgetter(name)
    if conv is None:
        return get
    return lambda value: conv(get(value))


def _record_back(fields: tuple[_Field, ...]) -> _Convert:
    """Compile a row-to-input converter: column keys become field names."""
    plan = tuple((f.column, f.name, f.node.back, f.optional_key) for f in fields if f.init)

    def back(row: Mapping[str, Any]) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for column, name, conv, optional_key in plan:
            item = row.get(column, _MISSING)
            if item is _MISSING or (item is None and optional_key):
                continue
            data[name] = item if conv is None else conv(item)
        return data

    return back


class PayloadColumns(Generic[T]):
    """The Spark columns of a payload type, with converters between values and rows.

    Built once per payload type: the type is analysed and the per-field converters are
    compiled here. ``PayloadColumns(Order)`` is typed ``PayloadColumns[Order]``.
    Instances pickle as their payload type alone and are rebuilt on unpickling, so they
    can travel to Spark executors (the type must be importable there).

    Rows hold what ``pa.RecordBatch.from_pylist(rows, schema=arrow_schema)`` accepts.
    ``from_row(to_row(v))`` encodes to the same JSON as ``v``, except that:

    * timestamps are instants kept to the microsecond: :meth:`to_row` takes naive
      datetimes as UTC, and every ``datetime`` comes back aware, in UTC (an offset such
      as +02:00 comes back as the same instant in UTC, a naive value with a ``Z`` on
      the wire). :meth:`from_row` reads naive datetimes as local time, which is what
      Spark's ``Row`` holds (Arrow gives aware ones). ``NaiveDatetime`` fields are
      ``TimestampNTZType`` columns and stay naive;
    * decimals come back at the column's scale (``1.5`` in a ``DecimalType(10, 2)``
      column returns as ``1.50``);
    * a ``NotRequired`` TypedDict key holding None comes back absent.

    Attributes:
        struct: The Spark schema of the payload's columns.
        arrow_fields: The same columns as Arrow fields, the exact types Spark expects
            for ``struct`` (timestamps in UTC).
        arrow_schema: ``pa.schema(arrow_fields)``.
        names: The column names, in order.

    Raises:
        SchemaError: The type, or one of its fields, has no Spark SQL type (a union of
            different types, ``Any``, a recursive model, ...); the message names the
            field path, such as ``Order.lines[].sku``.
    """

    __slots__ = (
        "_back",
        "_name",
        "_to",
        "_type",
        "_validate",
        "arrow_fields",
        "arrow_schema",
        "names",
        "struct",
    )

    struct: StructType
    arrow_fields: list[pa.Field]
    arrow_schema: pa.Schema
    names: tuple[str, ...]

    def __init__(self, type_: TypeForm[T]) -> None:
        self._type = type_
        self._name = name = type_name(type_)
        try:
            adapter: TypeAdapter[T] = type_adapter(type_)
        except PydanticUserError as exc:
            raise SchemaError(f"{name}: pydantic cannot handle the type: {exc}") from exc
        self._validate = adapter.validate_python
        node = _Builder().walk(adapter.core_schema, name)
        self._to: _Convert
        self._back: _Convert
        if node.fields is not None and not node.nullable:
            # A record: its fields are the columns, its converters build the rows.
            self.struct = cast(StructType, node.dtype)
            self._to, self._back = cast(_Convert, node.to), cast(_Convert, node.back)
        else:
            self.struct = StructType([StructField(VALUE_COLUMN, node.dtype, node.nullable)])
            to, back = node.to, node.back
            self._to = (
                (lambda value: {VALUE_COLUMN: value})
                if to is None
                else (lambda value: {VALUE_COLUMN: to(value)})
            )
            self._back = (
                (lambda row: row.get(VALUE_COLUMN))
                if back is None
                else (lambda row: back(row.get(VALUE_COLUMN)))
            )
        self.arrow_schema = arrow_schema(self.struct)
        self.arrow_fields = list(self.arrow_schema)
        self.names = tuple(self.struct.names)

    @property
    def type(self) -> TypeForm[T]:
        """The payload type these columns were built for."""
        return self._type

    def __repr__(self) -> str:
        return f"PayloadColumns({self._name})"

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return (PayloadColumns, (self._type,))

    def to_row(self, value: T) -> dict[str, object]:
        """Return the row for a validated payload value: ``{column: Arrow-ready value}``.

        Nested models become dicts, UUIDs and URLs strings, enums their values, sets
        lists, times ISO text; the value is not validated again.

        Raises:
            AttributeError: ``value`` is not a ``T`` (a field is missing).
            KeyError: a required key of a TypedDict payload is missing.
        """
        row: dict[str, object] = self._to(value)
        return row

    def from_row(self, row: Mapping[str, object]) -> T:
        """Rebuild a payload value from a row and validate it with pydantic.

        ``row`` is what ``pa.RecordBatch.to_pylist()`` or Spark's
        ``Row.asDict(recursive=True)`` give: nested dicts, lists, maps as dicts or
        lists of (key, value) pairs, aware or (Spark) local naive datetimes. Keys that
        are not columns are ignored; a missing column counts as an absent field.

        Raises:
            DecodeError: The row does not hold a valid ``T``; the pydantic
                ``ValidationError`` (or conversion error) is chained as the cause.
                Its ``size`` is 0: rows have no byte size.
        """
        try:
            data = self._back(row)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise DecodeError(
                f"cannot convert a row to {self._name}: {type(exc).__name__}: {exc}",
                type_name=self._name,
                size=0,
            ) from exc
        try:
            value: T = self._validate(data, by_alias=False, by_name=True)
        except ValidationError as exc:
            raise DecodeError(
                f"cannot convert a row to {self._name}: {describe_validation(exc)}",
                type_name=self._name,
                size=0,
            ) from exc
        return value
