"""The pydantic half every serialization codec shares: a value to plain Python and back.

Each codec here is a format library plus this: :class:`Typed` builds the
``TypeAdapter`` once, checks what is encoded the way :class:`goflux.JsonCodec` does,
dumps it to Python structures (by alias), and validates what the format library
parsed, turning every failure into an :class:`~goflux.EncodeError` or
:class:`~goflux.DecodeError` that names the type and the cause.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from decimal import Decimal
from typing import Any, Literal, NoReturn, cast

import pydantic_core
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.errors import PydanticUserError
from typing_extensions import is_typeddict

from goflux._codecs import describe_validation, type_name
from goflux._errors import DecodeError, EncodeError

__all__ = ("Typed", "as_bytes", "go_float", "one_line")


def one_line(exc: BaseException) -> str:
    """The exception's message on one line (format libraries like multi-line ones)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def go_float(value: float) -> str:  # noqa: PLR0911
    """Format a float as Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` does for text formats.

    Shortest round-tripping digits, ``NaN``, ``+Inf`` and ``-Inf``: what Go's
    ``encoding/xml`` writes and ``strconv.ParseFloat`` reads.
    """
    if 1e-4 <= abs(value) < 1e6:  # the common case: Python's repr is Go's, less ".0"
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)  # finite here
    text = "".join(map(str, digits))
    point = len(text) + exponent  # the decimal point's place in the digits
    minus = "-" if sign else ""
    if text == "0":
        return minus + "0"
    exp = point - 1
    if exp < -4 or exp >= 6:  # Go's %e for shortest 'g': at least two exponent digits
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{minus}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{text}"
    if point >= len(text):
        return minus + text + "0" * (point - len(text))
    return f"{minus}{text[:point]}.{text[point:]}"


def as_bytes(data: object, name: str) -> bytes:
    """Return ``data`` as bytes (bytearray and memoryview copied), else a DecodeError."""
    if type(data) is bytes:
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise DecodeError(
        f"cannot decode {type(data).__name__} as {name}: expected bytes", type_name=name, size=0
    )


class Typed:
    """A payload type's adapter, with the encode checks and decode validation of JsonCodec."""

    __slots__ = (
        "adapter",
        "check_instance",
        "codec",
        "dump",
        "name",
        "prevalidate",
        "refuse_bool",
        "strict",
        "type",
        "validate",
        "validate_python",
        "warnings",
    )

    def __init__(self, type_: object, codec: str, *, strict: bool = False) -> None:
        self.type = type_
        self.codec = codec
        self.name = type_name(type_)
        try:
            # pydantic's defaults: unlike JSON, every format here carries NaN and
            # Infinity (MessagePack float64, YAML .nan, TOML nan, Go's text "NaN").
            adapter: TypeAdapter[Any] = TypeAdapter(cast(Any, type_))
        except PydanticUserError as exc:
            raise TypeError(f"{codec} cannot handle {self.name}: {exc}") from exc
        self.adapter = adapter
        self.strict = strict
        self.dump = adapter.serializer.to_python
        validate = (
            adapter.validator.validate_python
            if adapter.pydantic_complete
            else adapter.validate_python
        )
        self.validate_python = validate
        # A keyword argument costs as much as the validation of a small model: only
        # strict codecs pass one.
        self.validate = functools.partial(validate, strict=True) if strict else validate
        # As JsonCodec: the serializer accepts look-alike objects for model types and
        # TypedDicts missing keys, so those get a check of their own.
        self.check_instance: type | None = None
        self.prevalidate = False
        self.warnings: bool | Literal["error"] = True
        self.refuse_bool = type_ in (int, float)
        if not isinstance(type_, type) or is_typeddict(type_):
            self.prevalidate = True
        elif issubclass(type_, BaseModel) or dataclasses.is_dataclass(type_):
            self.check_instance = type_
        else:
            self.warnings = "error"

    def encode_error(self, value: object, detail: str) -> NoReturn:
        """Raise the EncodeError for ``value`` with ``detail`` as its cause."""
        raise EncodeError(
            f"cannot encode {type(value).__name__} as {self.name}: {detail}",
            type_name=self.name,
        )

    def decode_error(self, size: int, detail: str) -> NoReturn:
        """Raise the DecodeError for ``size`` bytes with ``detail`` as its cause."""
        raise DecodeError(
            f"cannot decode {size} bytes as {self.name}: {detail}",
            type_name=self.name,
            size=size,
        )

    def to_python(
        self,
        value: object,
        *,
        mode: Literal["python", "json"] = "python",
        exclude_none: bool = False,
    ) -> Any:
        """Check ``value`` is a ``T`` and dump it to Python structures, by alias.

        Raises:
            EncodeError: it is not a valid ``T``.
        """
        check = self.check_instance
        if (check is not None and not isinstance(value, check)) or (
            self.refuse_bool and isinstance(value, bool)
        ):
            self.encode_error(value, f"expected an instance of {self.name}")
        try:
            if self.prevalidate:
                self.validate_python(value, strict=True)
            return self.dump(
                value, mode=mode, by_alias=True, exclude_none=exclude_none, warnings=self.warnings
            )
        except ValidationError as exc:
            self.encode_error(value, describe_validation(exc))
        except (pydantic_core.PydanticSerializationError, ValueError, TypeError) as exc:
            self.encode_error(value, one_line(exc))

    def from_python(self, obj: object, size: int) -> Any:
        """Validate what the format library parsed as a ``T``.

        Raises:
            DecodeError: it is not a valid ``T``.
        """
        try:
            return self.validate(obj)
        except ValidationError as exc:
            self.decode_error(size, describe_validation(exc))
