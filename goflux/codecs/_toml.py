"""TOML 1.0, as BurntSushi/toml (Go) reads and writes it: tomllib and tomli-w."""

from __future__ import annotations

import tomllib
from datetime import date, datetime, time
from typing import Any, ClassVar, Generic, TypeVar

import pydantic_core
from typing_extensions import TypeForm

from goflux._extras import require
from goflux.codecs._typed import Typed, as_bytes, one_line

__all__ = ("TomlCodec",)

T = TypeVar("T")

_NATIVE = (str, int, float, bool, datetime, date, time)


def _tomlable(obj: Any) -> Any:
    """Turn what TOML cannot hold into what it can: sequences to arrays, others to JSON form.

    Only run when tomli-w refused the plain dump: the fast path does not walk.
    """
    if isinstance(obj, dict):
        return {str(k) if not isinstance(k, str) else k: _tomlable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [_tomlable(v) for v in obj]
    if obj is None or isinstance(obj, _NATIVE):
        return obj
    if isinstance(obj, bytes):
        return obj.decode()  # the text it holds, as pydantic's JSON mode writes bytes
    return _tomlable(pydantic_core.to_jsonable_python(obj))


def _find_none(obj: Any, path: str) -> str | None:
    """The place of the first None in ``obj`` (TOML has no null), or None."""
    if obj is None:
        return path or "<root>"
    items = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for key, item in items:
        found = _find_none(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


class TomlCodec(Generic[T]):
    """TOML codec for types that are tables: models, dataclasses, TypedDicts, mappings.

    ``TomlCodec(Config)`` is typed ``TomlCodec[Config]``, a ``Codec[Config]``
    (``goflux[toml]``). A model is a table keyed by field name (alias where it has
    one), nested models are sub-tables, lists of models arrays of tables:
    what Go's ``BurntSushi/toml`` writes for a struct and reads back.

    TOML has no null and no top-level value other than a table: a ``None`` field is
    left out, as BurntSushi/toml leaves out a nil pointer (decoding then gives the
    field's default), a ``None`` inside a list is an :class:`~goflux.EncodeError`, and
    so is a payload type that is not a table (``list[int]``, ``str``). Datetimes,
    dates and times are TOML's own (a naive ``datetime`` is a local date-time);
    ``bytes`` are written as the UTF-8 text they hold (as pydantic's JSON mode); NaN
    and Infinity as ``nan`` and ``inf``.

    Decoding parses TOML 1.0 with the standard library's ``tomllib`` and validates
    with pydantic (lax by default, ``strict=True`` for exact types).

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
            EncodeError: ``value`` is not a valid ``T``, is not a table, or holds a
                ``None`` TOML cannot carry (inside a list).
        """
        typed = self._typed
        obj = typed.to_python(value, exclude_none=True)
        if not isinstance(obj, dict):
            typed.encode_error(
                value, "a TOML document is a table: encode a model, dataclass or mapping"
            )
        try:
            return self._dumps(obj).encode()
        except TypeError:
            pass  # a value tomli-w does not know, or a None: converted below
        except ValueError as exc:
            typed.encode_error(value, one_line(exc))
        try:
            obj = _tomlable(obj)
            place = _find_none(obj, "")
            text = "" if place is not None else self._dumps(obj)
        except (TypeError, ValueError) as exc:
            typed.encode_error(value, one_line(exc))
        if place is not None:
            typed.encode_error(value, f"TOML has no null (at {place})")
        return text.encode()

    def decode(self, data: bytes, /) -> T:
        """Parse and validate the TOML document ``data`` as a ``T``.

        Raises:
            DecodeError: ``data`` is not bytes, not UTF-8, not TOML, or not a valid
                ``T``.
        """
        typed = self._typed
        data = as_bytes(data, typed.name)
        size = len(data)
        try:
            obj = tomllib.loads(data.decode())
        except UnicodeDecodeError as exc:
            typed.decode_error(size, f"invalid UTF-8 at byte {exc.start}")
        except tomllib.TOMLDecodeError as exc:
            typed.decode_error(size, f"not TOML: {one_line(exc)}")
        value: T = typed.from_python(obj, size)
        return value
