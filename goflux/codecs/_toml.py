"""TOML 1.0, as BurntSushi/toml (Go) reads and writes it: tomllib and tomli-w."""

from __future__ import annotations

import tomllib
from datetime import date, datetime, time
from typing import Any, ClassVar, Generic, TypeVar

import pydantic_core
from pydantic import ValidationError
from typing_extensions import TypeForm

from goflux._codecs import describe_validation
from goflux._extras import require
from goflux.codecs._typed import Typed, as_bytes, one_line

__all__ = ("TomlCodec",)

T = TypeVar("T")

_DATES = (datetime, date, time)
_I64 = 1 << 63
_SEQUENCES = (list, tuple, set, frozenset)


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
    travels. A ``None`` inside a list or as a mapping's value is an
    :class:`~goflux.EncodeError`, and so is a payload type that is not a table
    (``list[int]``, ``str``), an ``int`` outside 64 bits (TOML's integers are signed
    64-bit), or a value nested too deep. Datetimes, dates and times are TOML's own (a
    naive ``datetime`` is a local date-time). A ``Decimal`` is always a string of its
    exact digits (``"12345678901234567.89"``), as pydantic's JSON mode and Go's
    text-marshalling decimals write it: a TOML float would round it. ``UUID`` and enums
    are written as in JSON, tuples and sets as arrays, ``bytes`` as the UTF-8 text they
    hold (as pydantic's JSON mode); NaN and Infinity as ``nan`` and ``inf``.

    Decoding parses TOML 1.0 with the standard library's ``tomllib`` and validates
    with pydantic: lax by default; ``strict=True`` takes exact types where TOML has
    them and, for what it carries as in JSON (enums by value, ``Decimal``, ``UUID`` and
    ``bytes`` as strings, tuples and sets as arrays), what ``JsonCodec(strict=True)``
    takes, so a strict codec reads its own output.

    Raises:
        TypeError: pydantic cannot build a schema for the given type.
        MissingDependency: ``tomli-w`` is not installed.
    """

    __slots__ = ("_dumps", "_typed")

    content_type: ClassVar[str] = "application/toml"
    """The MIME type of what it writes."""

    def __init__(self, type_: TypeForm[T], /, *, strict: bool = False) -> None:
        require("tomli_w", "toml", "TomlCodec")
        import tomli_w  # noqa: PLC0415

        self._typed = Typed(type_, "TomlCodec", strict=strict)
        self._dumps = tomli_w.dumps

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
                ``None`` TOML cannot carry (inside a list or mapping) or an ``int``
                outside 64 bits, or is nested too deep.
        """
        typed = self._typed
        obj = typed.to_python(value, exclude_none=True)
        if not isinstance(obj, dict):
            typed.encode_error(
                value, "a TOML document is a table: encode a model, dataclass or mapping"
            )
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
            DecodeError: ``data`` is not bytes, not UTF-8, not TOML (nested too deep, an
                integer of more than 4300 digits), or not a valid ``T``.
        """
        typed = self._typed
        data = as_bytes(data, typed.name)
        size = len(data)
        try:
            obj = tomllib.loads(data.decode())
        except UnicodeDecodeError as exc:
            typed.decode_error(size, f"invalid UTF-8 at byte {exc.start}")
        except (ValueError, RecursionError) as exc:  # TOMLDecodeError is a ValueError
            typed.decode_error(size, f"not TOML: {one_line(exc)}")
        try:
            value: T = typed.validate(obj)
        except ValidationError as exc:
            try:
                value = self._validate_again(obj, exc)
            except ValidationError as final:
                typed.decode_error(size, describe_validation(final))
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
