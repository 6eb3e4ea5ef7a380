"""MessagePack, as Go's msgpack libraries write structs: a map keyed by field name."""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar, cast

import pydantic_core
from typing_extensions import TypeForm

from goflux._extras import require
from goflux.codecs._strict import strict_as_written
from goflux.codecs._typed import Typed, as_bytes, one_line

__all__ = ("MsgpackCodec",)

T = TypeVar("T")


def _unknown_extension(code: int, data: bytes) -> object:
    raise ValueError(f"unknown extension type {code} ({len(data)} bytes)")


class MsgpackCodec(Generic[T]):
    """MessagePack codec for any type pydantic can validate (``goflux[msgpack]``).

    ``MsgpackCodec(Order)`` is typed ``MsgpackCodec[Order]``, a ``Codec[Order]``. A
    model, dataclass or TypedDict is written as a map keyed by field name (its alias
    where it has one), fields in declaration order: what Go's
    ``vmihailenco/msgpack`` and ``tinylib/msgp`` write for a struct with ``msgpack:``
    / ``msg:`` tags, and what they read back. Integers are written exactly (up to 64
    bits, as Go), ``bytes`` as ``bin``, floats as float64 (NaN and Infinity
    included: MessagePack carries them, and so does Go), ``datetime`` as the
    spec's timestamp extension (type -1; naive datetimes are taken as UTC), which
    vmihailenco/msgpack v5 reads into ``time.Time``. Other values pydantic
    serialises (``date``, ``UUID``, ``Decimal``, enums) go as their JSON form.

    Floats are always float64 (``0xcb``): Go reads them into ``float64`` fields.
    vmihailenco/msgpack and tinylib/msgp refuse a float64 for a ``float32`` field,
    so a Go struct read from this codec declares its floats ``float64``.

    Decoding validates with pydantic (lax by default, ``strict=True`` for exact
    types); timestamps come back as UTC datetimes, to the microsecond. Integer map
    keys are read (Go writes them for ``map[int]T``). ``strict=True`` takes what
    MessagePack carries as strings or arrays (enums, dates, ``Decimal``, ``UUID``,
    tuples, sets) in that form, as ``JsonCodec(strict=True)`` does from JSON, so it
    decodes its own output; only a value that holds such a type and bytes that are
    not UTF-8 (bytes have no other JSON form) is refused.

    Differences from Go: tinylib/msgp writes ``time.Time`` as its own extension
    type 5 unless told otherwise, which is refused here as an unknown extension.

    Writes with ``ormsgpack`` (four times faster than ``msgpack`` at packing) and
    reads with ``msgpack``, the reference implementation (``ormsgpack`` refuses maps
    with integer keys, which Go writes for a ``map[int]T``).

    Raises:
        TypeError: pydantic cannot build a schema for the given type.
        MissingDependency: ``ormsgpack`` or ``msgpack`` is not installed.
    """

    __slots__ = ("_options", "_packb", "_typed", "_unpackb")

    content_type: ClassVar[str] = "application/vnd.msgpack"
    """The MIME type of what it writes: the one IANA registered for MessagePack in 2024.

    Older peers send ``application/msgpack`` or ``application/x-msgpack`` (never
    registered); a receiver should take all three.
    """

    def __init__(self, type_: TypeForm[T], /, *, strict: bool = False) -> None:
        require("ormsgpack", "msgpack", "MsgpackCodec")
        require("msgpack", "msgpack", "MsgpackCodec")
        import msgpack  # noqa: PLC0415
        import ormsgpack  # noqa: PLC0415

        self._typed = Typed(type_, "MsgpackCodec", strict=strict)
        if strict:  # strict, but what MessagePack carries as text or arrays is read so
            self._typed.validate = cast(Any, strict_as_written(self._typed.adapter))
        self._packb = ormsgpack.packb
        self._unpackb = msgpack.unpackb
        self._options = (
            ormsgpack.OPT_DATETIME_AS_TIMESTAMP_EXT
            | ormsgpack.OPT_NAIVE_UTC
            | ormsgpack.OPT_NON_STR_KEYS
        )

    @property
    def type(self) -> TypeForm[T]:
        """The payload type this codec was built for."""
        return self._typed.type  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"MsgpackCodec({self._typed.name})"

    def encode(self, value: T, /) -> bytes:
        """Return the MessagePack bytes of ``value``.

        Raises:
            EncodeError: ``value`` is not a valid ``T``, or holds what MessagePack
                cannot carry (an integer past 64 bits).
        """
        typed = self._typed
        obj = typed.to_python(value)
        try:
            out: bytes = self._packb(obj, default=_jsonable, option=self._options)
        except (TypeError, ValueError) as exc:  # ormsgpack.MsgpackEncodeError is a TypeError
            typed.encode_error(value, one_line(exc))
        return out

    def decode(self, data: bytes, /) -> T:
        """Parse and validate MessagePack ``data`` as a ``T``.

        Raises:
            DecodeError: ``data`` is not bytes, not one complete MessagePack value,
                or not a valid ``T``.
        """
        typed = self._typed
        data = as_bytes(data, typed.name)
        try:
            obj = self._unpackb(
                data, timestamp=3, strict_map_key=False, ext_hook=_unknown_extension
            )
        except (ValueError, TypeError, OverflowError) as exc:  # msgpack's errors are ValueErrors
            typed.decode_error(len(data), f"not MessagePack: {one_line(exc)}")
        value: T = typed.from_python(obj, len(data))
        return value


def _jsonable(obj: object) -> Any:
    """What ormsgpack cannot write itself (Decimal, sets, ...): pydantic's JSON form."""
    return pydantic_core.to_jsonable_python(obj)
