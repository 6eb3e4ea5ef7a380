"""What a payload type looks like, read from its pydantic core schema.

Text formats without types or list markers (XML, CSV) need it to rebuild the
structure pydantic validates: which elements repeat as a list, which hold fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from pydantic_core import SchemaValidator, ValidationError

from goflux.codecs._typed import go_float

__all__ = ("Field", "Shape", "Union", "shape_of")

# "tuple" only in a reading plan: a list field whose items each have their own shape.
Kind = Literal["leaf", "fields", "list", "map", "any", "tuple"]

# Schemas that wrap one other schema under "schema", and change nothing of its shape.
_WRAPPERS = frozenset(
    {
        "model",
        "nullable",
        "default",
        "function-after",
        "function-before",
        "function-wrap",
        "json-schema",
    }
)
_LISTS = frozenset({"list", "set", "frozenset", "generator"})


@dataclass(eq=False)
class Field:
    """A field of a model, dataclass or TypedDict as the wire names it."""

    key: str  # the name pydantic validates it by
    shape: Shape
    optional: bool  # has a default, or is not required: leave it out when absent
    nullable: bool  # accepts None
    # Not required and without a default (a TypedDict's NotRequired): a missing key is
    # no value at all, so it cannot be read back as None or [].
    droppable: bool = False


@dataclass(eq=False)
class Shape:
    """The shape of a (sub)type: a leaf, fields by wire name, a list or a map of shapes."""

    kind: Kind = "any"
    fields: dict[str, Field] = field(default_factory=dict)  # by wire name
    item: Shape | None = None  # of a list, or the values of a map
    # Of a tuple's first items, by position (the rest are ``item``), when they differ.
    items: tuple[Shape, ...] | None = None
    nullable: bool = False
    # "any" that is Any itself (or object): nothing in the type says what text stands for.
    untyped: bool = False
    # A leaf Go reads with strings.TrimSpace first (bool, integer, float).
    trim: bool = False
    # A leaf of a closed set of values (enum, Literal): each value by the text written
    # for it, so that text is read back as the value (1, not "1").
    texts: dict[str, Any] | None = None
    # A union of leaves (int | str): text may read back as another member, so what
    # is written is read back and compared before it is sent.
    union: Union | None = None
    # For readers, made on first use: wire name -> (key, kind, shape), and the keys of
    # the required list fields (an absent list is an empty one).
    plan: dict[str, tuple[str, Kind, Shape]] | None = None
    absent: tuple[tuple[str, bool], ...] = ()  # (key, is a list): read when left out

    def reading_plan(self) -> dict[str, tuple[str, Kind, Shape]]:
        """The fields by wire name as (key, kind, shape): one lookup per element read.

        Also sets :attr:`absent`: the fields whose missing element means a value, as
        Go's zero value: ``None`` for a field that accepts ``None`` (Go's nil pointer),
        ``[]`` for any other list (Go's nil slice).
        """
        if self.plan is None:
            self.absent = tuple(
                (f.key, not f.nullable)
                for f in self.fields.values()
                if not f.droppable and (f.nullable or f.shape.kind == "list")
            )
            plan: dict[str, tuple[str, Kind, Shape]] = {}
            for wire, f in self.fields.items():
                if f.shape.items is not None:  # a tuple: each item by its position
                    plan[wire] = (f.key, "tuple", f.shape)
                elif f.shape.kind == "list":
                    plan[wire] = (f.key, "list", f.shape.item or _ANY)
                else:
                    plan[wire] = (f.key, f.shape.kind, f.shape)
            self.plan = plan
        return self.plan

    def item_at(self, index: int) -> Shape:
        """The shape of a list's (or tuple's) item at ``index``."""
        items = self.items
        if items is not None and index < len(items):
            return items[index]
        return self.item or _UNTYPED


class Union:
    """A union of leaf types, whose text must read back as the value it was written for.

    ``1`` in an ``int | str`` field is written ``1``, which pydantic reads back as
    ``"1"``: :meth:`check` validates the text as the union (as decoding does) and
    tells why it would not read back as the same value of the same type.
    """

    __slots__ = ("_definitions", "_schema", "_validator", "label")

    def __init__(
        self, schema: dict[str, Any], choices: list[dict[str, Any]], definitions: dict[str, Any]
    ) -> None:
        self._schema = schema
        self._definitions = definitions  # filled as the whole type is read
        self._validator: SchemaValidator | None = None
        self.label = " | ".join(_label(choice, definitions) for choice in choices)

    def _validate(self, text: str) -> Any:
        validator = self._validator
        if validator is None:
            try:
                validator = SchemaValidator(self._schema)
            except Exception:  # noqa: BLE001 - refers to definitions of the whole type
                validator = SchemaValidator(
                    {
                        "type": "definitions",
                        "schema": self._schema,
                        "definitions": list(self._definitions.values()),
                    }
                )
            self._validator = validator
        return validator.validate_python(text)

    def check(self, value: object, text: str) -> str | None:
        """Why ``text``, written for ``value``, would not read back as it; None if it would."""
        try:
            back = self._validate(text)
        except ValidationError:
            return f"text {text!r} does not read back as {self.label}"
        if type(back) is type(value) and (
            back == value or (isinstance(back, float) and math.isnan(back) and math.isnan(value))  # type: ignore[arg-type]
        ):
            return None
        if type(back) is not type(value):
            return (
                f"text cannot tell {type(value).__name__} from {type(back).__name__} in "
                f"{self.label}; {text!r} reads back as {back!r}: give the field one type"
            )
        return f"text {text!r} reads back as {back!r} in {self.label}, not as {value!r}"


def _label(schema: dict[str, Any], definitions: dict[str, Any]) -> str:
    """A union member's type as Python spells it (int, Literal['1'], Color)."""
    kind = schema.get("type")
    if kind == "literal":
        return f"Literal[{', '.join(map(repr, schema['expected']))}]"
    cls = schema.get("cls")
    if isinstance(cls, type):
        return cls.__name__
    if kind in _WRAPPERS and isinstance(schema.get("schema"), dict):
        return _label(schema["schema"], definitions)
    if kind == "definition-ref":
        target = definitions.get(schema["schema_ref"])
        if target is not None:
            return _label(target, definitions)
        return str(schema["schema_ref"]).partition(":")[0]
    return str(kind)


_ANY = Shape()  # a union of different shapes: read generically, validated as the union
_UNTYPED = Shape(untyped=True, nullable=True)  # Any: read generically, kept as read
_TRIMMED = frozenset({"int", "float", "bool"})


def _text(value: object) -> str:
    """The text a text format writes for an enum or Literal value (as Go's strconv)."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    return str(value)


def _choices(values: list[Any]) -> Shape:
    """A leaf of a closed set of values: strings first, as the text is one already."""
    texts: dict[str, Any] = {}
    for value in values:
        raw = value.value if isinstance(value, Enum) else value
        if isinstance(raw, str):
            texts[raw] = raw
    for value in values:
        raw = value.value if isinstance(value, Enum) else value
        if not isinstance(raw, str):
            texts.setdefault(_text(raw), raw)
    trim = any(not isinstance(v, str) for v in texts.values())
    # Only what is not already its own text needs reading back.
    texts = {text: v for text, v in texts.items() if not isinstance(v, str)}
    return Shape("leaf", trim=trim, texts=texts or None)


def shape_of(schema: dict[str, Any]) -> Shape:
    """Read the shape of a core schema (recursive types included)."""
    return _Reader().read(schema)


class _Reader:
    def __init__(self) -> None:
        self.definitions: dict[str, dict[str, Any]] = {}
        self.made: dict[str, Shape] = {}

    def read(self, schema: dict[str, Any]) -> Shape:  # noqa: PLR0911, PLR0912
        kind = schema.get("type")
        ref = schema.get("ref")
        if isinstance(ref, str):
            if ref in self.made:
                return self.made[ref]
            self.definitions[ref] = schema
        if kind == "definitions":
            for definition in schema["definitions"]:
                self.definitions[definition["ref"]] = definition
            return self.read(schema["schema"])
        if kind == "definition-ref":
            target = schema["schema_ref"]
            if target in self.made:
                return self.made[target]
            return self.read(self.definitions[target])
        if kind == "nullable":
            inner = self.read(schema["schema"])
            return Shape(
                inner.kind,
                inner.fields,
                inner.item,
                nullable=True,
                untyped=inner.untyped,
                trim=inner.trim,
                texts=inner.texts,
                items=inner.items,
                union=inner.union,
            )
        if kind in _WRAPPERS and isinstance(schema.get("schema"), dict):
            if kind == "model" and isinstance(ref, str):
                made = self.made[ref] = Shape("fields")
                made.fields.update(self.read(schema["schema"]).fields)
                return made
            return self.read(schema["schema"])
        if kind == "json-or-python":
            return self.read(schema["python_schema"])
        if kind == "lax-or-strict":
            return self.read(schema["lax_schema"])
        if kind in ("model-fields", "typed-dict", "dataclass-args", "dataclass"):
            return self._fields(schema, ref)
        if kind in _LISTS:
            items = schema.get("items_schema")
            return Shape("list", item=self.read(items) if items else _UNTYPED)
        if kind == "tuple":
            items = schema.get("items_schema") or []
            if len(items) == 1:
                return Shape("list", item=self.read(items[0]))
            # Each item by its position; the variadic one repeats when it is the last.
            positional = tuple(self.read(item) for item in items)
            variadic = schema.get("variadic_item_index")
            if variadic is None:
                return Shape("list", item=_ANY, items=positional)
            last = variadic == len(positional) - 1
            return Shape(
                "list", item=positional[variadic] if last else _ANY, items=positional[:variadic]
            )
        if kind == "dict":
            values = schema.get("values_schema")
            return Shape("map", item=self.read(values) if values else _UNTYPED)
        if kind == "union":
            choices = [c[0] if isinstance(c, tuple) else c for c in schema["choices"]]
            shapes = [self.read(c) for c in choices]
            if any(s.untyped for s in shapes):
                return _UNTYPED
            structured = [s for s in shapes if s.kind != "leaf"]
            if not structured:
                if len(choices) == 1:
                    return shapes[0]
                return Shape("leaf", union=Union(schema, choices, self.definitions))
            # One structured choice and nothing else reads as it; a mix reads generically.
            return structured[0] if len(shapes) == 1 else _ANY
        if kind == "any":
            return _UNTYPED
        if kind in ("tagged-union", "model-fields-with-extra"):
            return _ANY
        if kind == "enum":
            return _choices(list(schema["members"]))
        if kind == "literal":
            return _choices(list(schema["expected"]))
        if kind in _TRIMMED:
            return Shape("leaf", trim=True)
        return Shape("leaf")

    def _fields(self, schema: dict[str, Any], ref: object) -> Shape:
        kind = schema["type"]
        if kind == "dataclass":
            made = Shape("fields")
            if isinstance(ref, str):
                self.made[ref] = made
            made.fields.update(self._fields(schema["schema"], None).fields)
            return made
        made = Shape("fields")
        if isinstance(ref, str):
            self.made[ref] = made
        raw = schema["fields"]
        entries = raw.items() if isinstance(raw, dict) else ((f["name"], f) for f in raw)
        total = schema.get("total", True)
        for name, spec in entries:
            inner = spec["schema"]
            wire = spec.get("serialization_alias") or name
            alias = spec.get("validation_alias")
            key = alias if isinstance(alias, str) else name
            has_default = inner.get("type") == "default"
            droppable = spec.get("required", total) is False and not has_default
            sub = self.read(inner)
            made.fields[wire] = Field(
                key,
                sub,
                optional=has_default or droppable,
                nullable=sub.nullable,
                droppable=droppable,
            )
        return made
