"""Codecs turn payload values into bytes and back.

The wire carries the codec's bytes of the bare payload, no envelope, so a Go goflux
service using ``encoding/json`` on the same subject reads what :class:`JsonCodec`
writes and vice versa.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar, cast

import pydantic_core
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from pydantic.errors import PydanticUserError
from typing_extensions import TypeForm, is_typeddict

from goflux._errors import DecodeError, EncodeError

__all__ = (
    "BytesCodec",
    "Codec",
    "JsonCodec",
    "StrCodec",
    "as_decode_error",
    "content_type_of",
    "decode_with",
    "describe_validation",
    "type_adapter",
    "type_name",
)

T = TypeVar("T")

_MAX_REPORTED_ERRORS = 5


class Codec(Protocol[T]):
    """Converts payload values of type ``T`` to bytes and back."""

    def encode(self, value: T, /) -> bytes:
        """Return the wire bytes for ``value``.

        Raises:
            EncodeError: ``value`` is not a ``T`` or cannot be represented.
        """
        ...

    def decode(self, data: bytes, /) -> T:
        """Return the value the wire bytes ``data`` carry.

        Raises:
            DecodeError: ``data`` is malformed or not a valid ``T``.
        """
        ...


def content_type_of(codec: object) -> str | None:
    """The MIME type of what ``codec`` writes (its ``content_type``), or None if it does not say.

    HTTP sends it as ``Content-Type``; AsyncAPI documents state it.
    """
    found = getattr(codec, "content_type", None)
    return found if isinstance(found, str) else None


def as_decode_error(exc: Exception, codec: object, data: object) -> DecodeError:
    """``exc``, raised by ``codec.decode(data)``, as a :class:`DecodeError`.

    A DecodeError is returned as it is. Anything else means the codec broke its
    contract (a custom codec raising ``ValueError``, a parser hitting its recursion
    limit): it becomes a DecodeError naming the codec and what it raised, with ``exc``
    as its cause, so the message is treated as undecodable (refused, terminated or
    dead-lettered) instead of as a handler failure that is retried forever.
    """
    if isinstance(exc, DecodeError):
        return exc
    size = len(data) if isinstance(data, bytes | bytearray | memoryview) else 0
    found = getattr(codec, "type", None)
    error = DecodeError(
        f"{codec!r} raised {type(exc).__name__} decoding {size} bytes: {exc}",
        type_name=type_name(found) if found is not None else type(codec).__name__,
        size=size,
    )
    error.__cause__ = exc
    return error


def decode_with(codec: Codec[T], data: bytes) -> T:
    """``codec.decode(data)``, where whatever it raises is a :class:`DecodeError`.

    For paths off the per-message hot loop (a requester's reply); see
    :func:`as_decode_error`.

    Raises:
        DecodeError: ``data`` does not decode, with what the codec raised as the cause.
    """
    try:
        return codec.decode(data)
    except Exception as caught:  # noqa: BLE001 - any codec failure: undecodable
        error = as_decode_error(caught, codec, data)
        raise error  # noqa: B904 - its cause is set: caught, or its own


def type_name(tp: object) -> str:
    """Return a readable name for a type or type expression (``Order``, ``list[int]``)."""
    if isinstance(tp, type) and not getattr(tp, "__args__", None):
        return tp.__qualname__.rpartition("<locals>.")[2]
    return repr(tp).replace("typing.", "")


def describe_validation(exc: ValidationError) -> str:
    """Summarise a pydantic validation error in one line (the first few failures)."""
    errors = exc.errors(include_url=False)
    parts = [
        f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
        for err in errors[:_MAX_REPORTED_ERRORS]
    ]
    if len(errors) > _MAX_REPORTED_ERRORS:
        parts.append(f"... and {len(errors) - _MAX_REPORTED_ERRORS} more")
    return "; ".join(parts)


def _opaque(obj: object) -> object:
    # Sets hold values too; anything else json cannot walk holds no float of interest.
    return list(obj) if isinstance(obj, set | frozenset) else None


def _contains_non_finite(obj: object) -> bool:
    """Report whether a Python structure holds a NaN or infinite float (C-speed walk)."""
    try:
        json.dumps(obj, allow_nan=False, default=_opaque, skipkeys=True, check_circular=False)
    except ValueError:
        return True
    return False


_FLOAT_SCHEMAS = frozenset({"float", "any", "complex"})


def _may_hold_float(core_schema: object) -> bool:
    """Report whether a pydantic core schema can produce a float anywhere inside."""
    stack = [core_schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            kind = node.get("type")  # a model's field called "type" maps to its schema
            if (isinstance(kind, str) and kind in _FLOAT_SCHEMAS) or node.get(
                "extra_fields_behavior"
            ) == "allow":
                return True  # extra="allow" fields are untyped: they may hold floats
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return False


def _writes_inf_nan_tokens(core_schema: object) -> bool:
    """Report whether some config in the schema serialises NaN as a token or string."""
    stack = [core_schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("ser_json_inf_nan") in ("constants", "strings"):
                return True
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return False


# For types without a config of their own: finite floats only, and bytes as base64
# (what Go's encoding/json does with []byte).
_PLAIN_TYPE_CONFIG = ConfigDict(
    allow_inf_nan=False, ser_json_bytes="base64", val_json_bytes="base64"
)


def type_adapter(type_: object) -> TypeAdapter[Any]:
    """Build the TypeAdapter, refusing non-finite floats where the type takes our config."""
    try:
        return TypeAdapter(cast(Any, type_), config=_PLAIN_TYPE_CONFIG)
    except PydanticUserError as exc:
        if exc.code != "type-adapter-config-unused":
            raise
    return TypeAdapter(cast(Any, type_))  # a model, dataclass or TypedDict: its own config


class JsonCodec(Generic[T]):
    """Compact JSON codec for any type pydantic can validate.

    ``JsonCodec(Order)`` is typed ``JsonCodec[Order]``; it works for pydantic models,
    dataclasses, TypedDicts (``typing_extensions.TypedDict`` on Python 3.11) and plain
    types such as ``list[int]``. The ``TypeAdapter`` is built once, here.

    Encoding writes compact UTF-8 JSON using field aliases, readable by Go's
    ``encoding/json``, and refuses what JSON cannot carry: NaN and Infinity raise
    instead of silently becoming ``null``. Decoding validates with pydantic (lax by
    default, ``strict=True`` for exact types) and refuses the non-JSON tokens
    ``NaN``/``Infinity``. Whether a float field accepts valid JSON that lax
    validation turns into a non-finite float (the string ``"nan"``, ``1e999``) is
    the model's own ``allow_inf_nan`` setting (pydantic allows it by default; set
    ``model_config = ConfigDict(allow_inf_nan=False)`` to refuse it). For types
    without a config of their own (``float``, ``list[float]``, ...) it is refused.

    Raises:
        TypeError: pydantic cannot build a schema for the given type.
    """

    __slots__ = (
        "_adapter",
        "_check_instance",
        "_floats",
        "_name",
        "_nan_tokens",
        "_prevalidate",
        "_refuse_bool",
        "_to_json",
        "_type",
        "_validate",
        "_validate_python",
        "_warnings",
    )

    content_type: ClassVar[str] = "application/json"
    """The MIME type of what it writes."""

    def __init__(self, type_: TypeForm[T], /, *, strict: bool = False) -> None:
        self._type = type_
        self._name = type_name(type_)
        try:
            adapter: TypeAdapter[T] = type_adapter(type_)
        except PydanticUserError as exc:
            raise TypeError(f"JsonCodec cannot handle {self._name}: {exc}") from exc
        self._adapter = adapter
        self._validate_python = adapter.validate_python
        self._to_json = adapter.serializer.to_json
        # pydantic's serializer accepts look-alike objects for model types and
        # TypedDicts missing required keys, so those get a check of their own; its
        # warnings-as-errors mode (twice the cost) is kept for types with no other check.
        self._check_instance: type | None = None
        self._prevalidate = False
        self._warnings: bool | Literal["error"] = True
        self._floats = _may_hold_float(adapter.core_schema)
        self._nan_tokens = _writes_inf_nan_tokens(adapter.core_schema)
        # bool is an int to Python, but True is not a number on the wire.
        self._refuse_bool = type_ in (int, float)
        if not isinstance(type_, type) or is_typeddict(type_):
            self._prevalidate = True
        elif issubclass(type_, BaseModel) or dataclasses.is_dataclass(type_):
            self._check_instance = type_
        else:
            self._warnings = "error"
        # The core validator directly, once the type is complete: TypeAdapter's own
        # validate_json adds a Python call and argument checks to every message.
        validate_json = (
            adapter.validator.validate_json if adapter.pydantic_complete else adapter.validate_json
        )
        self._validate = functools.partial(validate_json, strict=True) if strict else validate_json

    @property
    def type(self) -> TypeForm[T]:
        """The payload type this codec was built for."""
        return self._type

    def __repr__(self) -> str:
        return f"JsonCodec({self._name})"

    def encode(self, value: T, /) -> bytes:
        """Return compact JSON for ``value``.

        Raises:
            EncodeError: ``value`` is not a valid ``T``, or holds NaN/Infinity.
        """
        check = self._check_instance
        if (check is not None and not isinstance(value, check)) or (
            self._refuse_bool and isinstance(value, bool)
        ):
            raise EncodeError(
                f"cannot encode {type(value).__name__} as {self._name}: "
                f"expected an instance of {self._name}",
                type_name=self._name,
            )
        try:
            if self._prevalidate:
                self._validate_python(value, strict=True)
            out = self._to_json(value, by_alias=True, warnings=self._warnings)
        except ValidationError as exc:
            raise EncodeError(
                f"cannot encode {type(value).__name__} as {self._name}: {describe_validation(exc)}",
                type_name=self._name,
            ) from exc
        except (pydantic_core.PydanticSerializationError, ValueError, TypeError) as exc:
            detail = " ".join(str(exc).split())
            raise EncodeError(
                f"cannot encode {type(value).__name__} as {self._name}: {detail}",
                type_name=self._name,
            ) from exc
        # pydantic writes NaN/Infinity as null (or, configured so, as NaN or "NaN"): the
        # precise check of the value runs only when the output shows one of those.
        if (
            self._floats
            and (
                out.find(b"null") >= 0
                or (self._nan_tokens and (out.find(b"NaN") >= 0 or out.find(b"Infinity") >= 0))
            )
            and self._non_finite(value)
        ):
            raise EncodeError(
                f"cannot encode {type(value).__name__} as {self._name}: "
                "NaN and Infinity are not valid JSON (Go's encoding/json rejects them)",
                type_name=self._name,
            )
        return out

    def _non_finite(self, value: T) -> bool:
        dumped = self._adapter.dump_python(value, mode="python", by_alias=True, warnings=False)
        return _contains_non_finite(dumped)

    def decode(self, data: bytes, /) -> T:
        """Parse and validate JSON ``data`` as a ``T``.

        Raises:
            DecodeError: ``data`` is not bytes or not JSON (``NaN``/``Infinity`` tokens
                included), or is not a valid ``T``.
        """
        if type(data) is not bytes:
            given: object = data
            if isinstance(given, memoryview):
                data = given.tobytes()
            elif not isinstance(given, bytearray):
                raise DecodeError(
                    f"cannot decode {type(given).__name__} as {self._name}: expected bytes",
                    type_name=self._name,
                    size=0,
                )
        try:
            value = self._validate(data)
        except ValidationError as exc:
            raise DecodeError(
                f"cannot decode {len(data)} bytes as {self._name}: {describe_validation(exc)}",
                type_name=self._name,
                size=len(data),
            ) from exc
        # A one-byte search is a memchr: the exact search runs only if N or I occur.
        # partition (one argument, its head the data itself when nothing is found) costs
        # about 500 CPU instructions less a call than find (whose optional arguments
        # are parsed), and find much less than `in` (which first tries an int needle).
        if (
            self._floats
            and (data.partition(b"N")[1] or data.partition(b"I")[1])
            and (data.find(b"NaN") >= 0 or data.find(b"Infinity") >= 0)
        ):
            try:
                pydantic_core.from_json(data, allow_inf_nan=False)
            except ValueError as exc:
                raise DecodeError(
                    f"cannot decode {len(data)} bytes as {self._name}: "
                    "NaN and Infinity are not valid JSON",
                    type_name=self._name,
                    size=len(data),
                ) from exc
        return value


class BytesCodec:
    """Passes bytes through unchanged (``Codec[bytes]``)."""

    __slots__ = ()

    content_type: ClassVar[str] = "application/octet-stream"
    """The MIME type of what it writes."""

    def __repr__(self) -> str:
        return "BytesCodec()"

    def encode(self, value: bytes | bytearray | memoryview, /) -> bytes:
        """Return ``value`` as bytes (bytearray and memoryview are copied).

        Raises:
            EncodeError: ``value`` is not bytes-like.
        """
        if isinstance(value, bytes):
            return value
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        raise EncodeError(
            f"cannot encode {type(value).__name__} as bytes: expected bytes, bytearray "
            "or memoryview",
            type_name="bytes",
        )

    def decode(self, data: bytes, /) -> bytes:
        """Return ``data`` as bytes."""
        return data if isinstance(data, bytes) else bytes(data)


class StrCodec:
    """UTF-8 text (``Codec[str]``)."""

    __slots__ = ()

    content_type: ClassVar[str] = "text/plain; charset=utf-8"
    """The MIME type of what it writes."""

    def __repr__(self) -> str:
        return "StrCodec()"

    def encode(self, value: str, /) -> bytes:
        """Return ``value`` encoded as UTF-8.

        Raises:
            EncodeError: ``value`` is not a str or holds unencodable surrogates.
        """
        if not isinstance(value, str):
            raise EncodeError(
                f"cannot encode {type(value).__name__} as str: expected str", type_name="str"
            )
        try:
            return value.encode()
        except UnicodeEncodeError as exc:
            raise EncodeError(f"cannot encode str as UTF-8: {exc}", type_name="str") from exc

    def decode(self, data: bytes, /) -> str:
        """Return ``data`` decoded from UTF-8.

        Raises:
            DecodeError: ``data`` is not valid UTF-8.
        """
        try:
            return str(data, "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(
                f"cannot decode {len(data)} bytes as str: invalid UTF-8 at byte {exc.start}",
                type_name="str",
                size=len(data),
            ) from exc
