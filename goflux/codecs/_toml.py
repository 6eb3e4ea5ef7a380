"""TOML 1.0, as BurntSushi/toml (Go) reads and writes it: tomllib and tomli-w."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from datetime import date, datetime, time, timedelta
from typing import Any, ClassVar, Generic, TypeVar

import pydantic_core
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from typing_extensions import TypeForm

from goflux._codecs import describe_validation
from goflux._extras import require
from goflux.codecs._typed import Typed, as_bytes, one_line

__all__ = ("TomlCodec",)

T = TypeVar("T")

_DATES = (datetime, date, time)
_I64 = 1 << 63
_SEQUENCES = (list, tuple, set, frozenset)
MAX_KEY_DEPTH = 500
"""Keys (dotted keys, table headers) of more dot-separated parts are refused when decoding.

The standard library's ``tomllib`` takes quadratic time and memory on them: 200 KB of
``k.k.k…`` exhausts gigabytes. The bound is YamlCodec's nesting limit.
"""
# Strings and comments, whose dots are no key's (an unclosed string runs to the end of
# its line or the document, so that no start is tried twice: tomllib refuses it anyway);
# then more dots than the limit with nothing between them that ends a key (=, comma,
# brackets, braces, a line break), from where a key can start: linear time.
_NOT_KEYS = re.compile(
    r'"""(?:[^"\\]|\\.|"(?!""))*(?:"{3,5}|\Z)'
    r"|'''(?:[^']|'(?!''))*(?:'{3,5}|\Z)"
    r'|"(?:[^"\\\n]|\\.)*"?'
    r"|'[^'\n]*'?"
    r"|#[^\n]*",
    re.DOTALL,
)
_DEEP_KEY = re.compile(r"(?:\A|(?<=[=,{}\[\]\n]))(?:[^=,{}\[\]\n.]*\.){%d}" % MAX_KEY_DEPTH)  # noqa: UP031
_MINUTE = timedelta(minutes=1)


class _Refused(Exception):
    """What TOML cannot hold, and where: the path is built as the walk unwinds."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []

    @property
    def detail(self) -> str:
        return f"{self.reason} (at {'.'.join(reversed(self.path)) or '<root>'})"


def _tomlable(obj: Any) -> Any:
    """The dumped value as TOML holds it: tables, arrays, strings, 64-bit ints, floats, dates.

    A Decimal, UUID or enum becomes what pydantic's JSON mode writes for it (a Decimal
    its exact text, as a string), a tuple or set an array, bytes the UTF-8 text they hold.

    Raises:
        _Refused: a None (TOML has no null) or an int outside 64 bits, and where.
        RecursionError: nested too deep.
    """
    kind = type(obj)
    if kind is str or kind is float or kind is bool or (kind is int and -_I64 <= obj < _I64):
        return obj
    if kind is dict:
        return _table(obj)
    if kind in _SEQUENCES:
        return _array(obj)
    if kind is int:
        raise _Refused("TOML integers are 64-bit signed")
    if obj is None:
        raise _Refused("TOML has no null")
    if isinstance(obj, _DATES):
        offset = obj.utcoffset() if isinstance(obj, datetime | time) else None
        if offset is not None and offset % _MINUTE:
            raise _Refused(f"UTC offset {offset}: TOML offsets are whole minutes")
        return obj
    # bytes: the text they hold, as pydantic's JSON mode writes them
    return obj.decode() if kind is bytes else _tomlable(pydantic_core.to_jsonable_python(obj))


def _table(obj: dict[Any, Any]) -> dict[str, Any]:
    table = {}
    for key, value in obj.items():
        name = key if type(key) is str else str(pydantic_core.to_jsonable_python(key))
        try:
            table[name] = _tomlable(value)
        except _Refused as exc:
            exc.path.append(name)
            raise
    return table


def _array(obj: Any) -> list[Any]:
    array = []
    for index, value in enumerate(obj):
        try:
            array.append(_tomlable(value))
        except _Refused as exc:
            exc.path.append(str(index))
            raise
    return array


def _has_nullable_default(schema: Any) -> bool:
    """Whether the core schema has a field admitting None whose default is not None."""
    stack, seen = [schema], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            if node.get("type") == "default" and (
                node.get("default") is not None or "default_factory" in node
            ):
                inner = node.get("schema", {})
                kind = inner.get("type")
                if kind in ("nullable", "none", "any") or (
                    kind == "union"
                    and any(
                        (choice[0] if isinstance(choice, tuple) else choice).get("type") == "none"
                        for choice in inner.get("choices", ())
                    )
                ):
                    return True
            stack.extend(value for key, value in node.items() if key != "default")
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return False


def _field_default(field: Any) -> tuple[bool, Any]:
    """Whether the field's default is other than None, and it (``...`` if made by a factory)."""
    if isinstance(field, FieldInfo):
        if field.default_factory is not None:
            return True, ...
        return field.default is not None and field.default is not PydanticUndefined, field.default
    if field.default_factory is not dataclasses.MISSING:
        return True, ...
    default = field.default
    if isinstance(default, FieldInfo):
        return _field_default(default)
    return default is not None and default is not dataclasses.MISSING, default


def _none_for_default(value: Any) -> str | None:
    """Where a None field would read back as its default (TOML leaves it out), and what."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, BaseModel):
            fields: Any = [
                (name, field.alias or name, field)
                for name, field in type(node).model_fields.items()
            ]
        elif dataclasses.is_dataclass(node) and not isinstance(node, type):
            fields = [(field.name, field.name, field) for field in dataclasses.fields(node)]
        elif isinstance(node, dict):
            stack.extend((item, f"{path}{key}.") for key, item in node.items())
            continue
        elif isinstance(node, _SEQUENCES):
            stack.extend((item, f"{path}{index}.") for index, item in enumerate(node))
            continue
        else:
            continue
        for name, key, field in fields:
            item = getattr(node, name, None)
            if item is None:
                differs, default = _field_default(field)
                if differs:
                    made = "" if default is ... else f" {default!r}"
                    return f"{path}{key} is None but would read back as its default{made}"
            else:
                stack.append((item, f"{path}{key}."))
    return None


def _fill_none(obj: Any, errors: list[Any]) -> list[tuple[dict[str, Any], str, tuple[Any, ...]]]:
    """Set None where a field is missing; return each (table, key, loc) filled.

    TOML has no null: a None field was left out (as BurntSushi/toml leaves out a nil
    pointer). Steps of ``loc`` the document lacks (a union member's name) are skipped.
    """
    filled = []
    for error in errors:
        if error["type"] != "missing" or not error["loc"]:
            continue
        loc = error["loc"]
        node = obj
        for step in loc[:-1]:
            if (isinstance(node, dict) and step in node) or (
                isinstance(node, list) and isinstance(step, int) and -len(node) <= step < len(node)
            ):
                node = node[step]
        key = loc[-1]
        if isinstance(node, dict) and isinstance(key, str) and key not in node:
            node[key] = None
            filled.append((node, key, loc))
    return filled


class TomlCodec(Generic[T]):
    """TOML codec for types that are tables: models, dataclasses, TypedDicts, mappings.

    ``TomlCodec(Config)`` is typed ``TomlCodec[Config]``, a ``Codec[Config]``
    (``goflux[toml]``). A model is a table keyed by field name (alias where it has
    one), nested models are sub-tables, lists of models arrays of tables:
    what Go's ``BurntSushi/toml`` writes for a struct and reads back.

    TOML has no null and no top-level value other than a table: a ``None`` field is
    left out, as BurntSushi/toml leaves out a nil pointer, and a field missing when
    decoding is ``None`` if its type admits ``None`` (as Go's decoder leaves a pointer
    nil), else its default, else an error; so ``note: str | None`` without a default
    travels. A ``None`` field whose default is not ``None`` (``a: int | None = 5``,
    at any depth) would read back as that default: it is an
    :class:`~goflux.EncodeError` naming the field, never a silent change. A ``None``
    inside a list or as a mapping's value is an EncodeError too, and so is a payload
    type that is not a table (``list[int]``, ``str``), an ``int`` outside 64 bits
    (TOML's integers are signed 64-bit), a value nested too deep, or a ``datetime`` or
    ``time`` whose UTC offset is not whole minutes (zones before 1900 ran on local mean
    time: Amsterdam was +00:19:32), which TOML cannot write. Datetimes, dates and times
    are TOML's own (a naive ``datetime`` is a local date-time). A ``Decimal`` is
    always a string of its exact digits (``"12345678901234567.89"``), as pydantic's
    JSON mode and Go's text-marshalling decimals write it: a TOML float would round
    it. ``UUID`` and enums are written as in JSON, tuples and sets as arrays,
    ``bytes`` as the UTF-8 text they hold (as pydantic's JSON mode); NaN and Infinity
    as ``nan`` and ``inf``.

    Decoding parses TOML 1.0 with the standard library's ``tomllib`` and validates
    with pydantic: lax by default; ``strict=True`` takes exact types where TOML has
    them and, for what it carries as in JSON (enums by value, ``Decimal``, ``UUID`` and
    ``bytes`` as strings, tuples and sets as arrays), what ``JsonCodec(strict=True)``
    takes, so a strict codec reads its own output. A key of more than 500
    dot-separated parts (a dotted key or a table header; YamlCodec's nesting limit) is
    refused before ``tomllib`` reads the document, which takes quadratic time and
    memory on them (200 KB of ``k.k.k…`` would exhaust the machine's memory). Dots in
    strings and comments do not count; a quoted key part holding dots counts as a
    bare one, so only a key with hundreds of parts can be refused.

    Raises:
        TypeError: pydantic cannot build a schema for the given type.
        MissingDependency: ``tomli-w`` is not installed.
    """

    __slots__ = ("_defaults", "_dumps", "_typed")

    content_type: ClassVar[str] = "application/toml"
    """The MIME type of what it writes."""

    def __init__(self, type_: TypeForm[T], /, *, strict: bool = False) -> None:
        require("tomli_w", "toml", "TomlCodec")
        import tomli_w  # noqa: PLC0415

        self._typed = Typed(type_, "TomlCodec", strict=strict)
        self._dumps = tomli_w.dumps
        # Only a type with a None-admitting field defaulting to other than None pays for
        # the walk that refuses such a None.
        self._defaults = _has_nullable_default(self._typed.adapter.core_schema)

    @property
    def type(self) -> TypeForm[T]:
        """The payload type this codec was built for."""
        return self._typed.type  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"TomlCodec({self._typed.name})"

    def encode(self, value: T, /) -> bytes:
        """Return the TOML document of ``value``, UTF-8.

        Raises:
            EncodeError: ``value`` is not a valid ``T``, is not a table, holds a
                ``None`` TOML cannot carry (inside a list or mapping, or a field whose
                default is not None), an ``int`` outside 64 bits or a UTC offset that
                is not whole minutes, or is nested too deep.
        """
        typed = self._typed
        obj = typed.to_python(value, exclude_none=True)
        if not isinstance(obj, dict):
            typed.encode_error(
                value, "a TOML document is a table: encode a model, dataclass or mapping"
            )
        if self._defaults:
            where = _none_for_default(value)
            if where is not None:
                typed.encode_error(value, f"TOML has no null: {where}")
        try:
            text = self._dumps(_tomlable(obj))
        except _Refused as exc:
            typed.encode_error(value, exc.detail)
        except RecursionError:
            typed.encode_error(value, "nested too deep")
        except (TypeError, ValueError) as exc:
            typed.encode_error(value, one_line(exc))
        return text.encode()

    def decode(self, data: bytes, /) -> T:
        """Parse and validate the TOML document ``data`` as a ``T``.

        Raises:
            DecodeError: ``data`` is not bytes, not UTF-8, not TOML (nested too deep, a
                key of more than 500 parts, an integer of more than 4300 digits), or not
                a valid ``T``.
        """
        typed = self._typed
        data = as_bytes(data, typed.name)
        size = len(data)
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            typed.decode_error(size, f"invalid UTF-8 at byte {exc.start}")
        if data.count(b".") >= MAX_KEY_DEPTH and _DEEP_KEY.search(_NOT_KEYS.sub("s", text)):
            typed.decode_error(size, f"a key nested deeper than {MAX_KEY_DEPTH} levels")
        try:
            obj = tomllib.loads(text)
        except (ValueError, RecursionError) as exc:  # TOMLDecodeError is a ValueError
            typed.decode_error(size, f"not TOML: {one_line(exc)}")
        except MemoryError:
            typed.decode_error(size, "not TOML: out of memory parsing it")
        try:
            value: T = typed.validate(obj)
        except ValidationError as exc:
            try:
                value = self._validate_again(obj, exc)
            except ValidationError as final:
                typed.decode_error(size, describe_validation(final))
            except pydantic_core.PydanticSerializationError as exc:  # strict's JSON form
                typed.decode_error(size, f"nested too deep: {one_line(exc)}")
        return value

    def _validate_again(self, obj: Any, error: ValidationError) -> Any:
        """Validate once more with None for missing fields, and (strict) as JsonCodec does.

        Raises:
            ValidationError: still not a valid ``T``.
        """
        typed = self._typed
        filled = _fill_none(obj, error.errors())
        if filled or typed.strict:
            try:
                return self._again(obj)
            except ValidationError as exc:
                error = exc
            wrong = [
                (table, key)
                for table, key, loc in filled
                if any(tuple(e["loc"][: len(loc)]) == loc for e in error.errors())
            ]
            if wrong:  # fields that refuse None: missing after all
                for table, key in wrong:
                    del table[key]
                try:
                    return self._again(obj)
                except ValidationError as exc:
                    error = exc
        raise error

    def _again(self, obj: Any) -> Any:
        """Lax: the same validation. Strict: JsonCodec's strict rules, on the JSON form.

        Strict JSON takes an enum by value, a Decimal, UUID or bytes from a string, a
        tuple or set from an array: TOML carries them so, as JSON does.
        """
        typed = self._typed
        if not typed.strict:
            return typed.validate(obj)
        text = pydantic_core.to_json(obj, inf_nan_mode="constants")
        return typed.adapter.validate_json(text, strict=True)
