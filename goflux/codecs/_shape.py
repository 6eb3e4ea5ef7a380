"""What a payload type looks like, read from its pydantic core schema.

Text formats without types or list markers (XML, CSV) need it to rebuild the
structure pydantic validates: which elements repeat as a list, which hold fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from goflux.codecs._typed import go_float

__all__ = ("Field", "Shape", "shape_of")

Kind = Literal["leaf", "fields", "list", "map", "any"]

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
    nullable: bool = False
    # "any" that is Any itself (or object): nothing in the type says what text stands for.
    untyped: bool = False
    # A leaf Go reads with strings.TrimSpace first (bool, integer, float).
    trim: bool = False
    # A leaf of a closed set of values (enum, Literal): each value by the text written
    # for it, so that text is read back as the value (1, not "1").
    texts: dict[str, Any] | None = None
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
            self.plan = {
                wire: (
                    f.key,
                    f.shape.kind,
                    f.shape.item or _ANY if f.shape.kind == "list" else f.shape,
                )
                for wire, f in self.fields.items()
            }
        return self.plan


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
            return Shape("list", item=self.read(items[0]) if len(items) == 1 else _ANY)
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
                return Shape("leaf")
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
