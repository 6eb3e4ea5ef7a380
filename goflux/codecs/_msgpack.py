"""MessagePack, as Go's msgpack libraries write structs: a map keyed by field name."""

from __future__ import annotations

import os
from typing import Any, ClassVar, Generic, TypeVar, cast

import pydantic_core
from pydantic import ValidationError
from typing_extensions import TypeForm

from goflux._codecs import describe_validation
from goflux._extras import require
from goflux.codecs._strict import strict_as_written
from goflux.codecs._typed import Typed, as_bytes, one_line

__all__ = ("MsgpackCodec",)

T = TypeVar("T")

# ormsgpack reads a value and ignores whatever follows it, where msgpack refuses
# trailing bytes. So the fast path reads an array of two, the payload and then a bin
# of 16 random bytes drawn at import: only a payload that is exactly one value puts
# those bytes second, and no sender can write them for it (they never leave the
# process). Anything else goes to msgpack, which says what is wrong.
_NONCE = os.urandom(16)
_OPEN = b"\x92"  # fixarray of 2
_CLOSE = b"\xc4\x10" + _NONCE  # bin 8, 16 bytes


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
    reads with it too (twice as fast as ``msgpack``). What ``ormsgpack`` does not
    read as exactly one value with string map keys (integer keys, which Go writes
    for a ``map[int]T``; bytes after the value; bytes that are not MessagePack) is
    read again by ``msgpack``, the reference implementation, which takes it or says
    what is wrong: the codec takes what ``msgpack`` takes, as the same Python
    values, and refuses what it refuses.

    Raises:
        TypeError: pydantic cannot build a schema for the given type.
        MissingDependency: ``ormsgpack`` or ``msgpack`` is not installed.
    """

    __slots__ = (
        "_name",
        "_options",
        "_packb",
        "_read",
        "_reference",
        "_typed",
        "_unpackb",
        "_validate",
    )

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

        self._typed = typed = Typed(type_, "MsgpackCodec", strict=strict)
        if strict:  # strict, but what MessagePack carries as text or arrays is read so
            typed.validate = cast(Any, strict_as_written(typed.adapter))
        self._name = typed.name
        self._validate = typed.validate
        self._packb = ormsgpack.packb
        self._unpackb = ormsgpack.unpackb
        self._reference = msgpack.unpackb
        self._read = ormsgpack.OPT_DATETIME_AS_TIMESTAMP_EXT
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
        if type(data) is not bytes:
            data = as_bytes(data, self._name)
        try:
            obj, end = self._unpackb(b"".join((_OPEN, data, _CLOSE)), option=self._read)
        except ValueError:  # ormsgpack.MsgpackDecodeError is a ValueError
            obj = self._read_reference(data)
        else:
            if end != _NONCE:  # bytes after the value
                obj = self._read_reference(data)
        try:
            value: T = self._validate(obj)
        except ValidationError as exc:
            self._typed.decode_error(len(data), describe_validation(exc))
        return value

    def _read_reference(self, data: bytes) -> Any:
        """Read ``data`` with msgpack: its value, or the DecodeError naming its cause."""
        try:
            return self._reference(
                data, timestamp=3, strict_map_key=False, ext_hook=_unknown_extension
            )
        except (ValueError, TypeError, OverflowError) as exc:  # msgpack's errors are ValueErrors
            self._typed.decode_error(len(data), f"not MessagePack: {one_line(exc)}")


def _jsonable(obj: object) -> Any:
    """What ormsgpack cannot write itself (Decimal, sets, ...): pydantic's JSON form."""
    return pydantic_core.to_jsonable_python(obj)
