"""Strict validation of what a format library parsed, as JsonCodec(strict=True) reads JSON.

pydantic's strict mode wants exact Python types (a ``date``, not ``"2024-01-02"``)
from Python input, and accepts their JSON forms from JSON. A format such as
MessagePack parses into Python values but carries those types in their JSON forms
(enums as their values, dates, Decimal and UUID as strings, tuples and sets as
arrays), so strict Python validation refuses what the codec itself wrote. The
validator here is strict Python validation, and for what that refuses, strict JSON
validation of the value's JSON form: what ``JsonCodec(strict=True)`` accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError, to_json

__all__ = ("strict_as_written",)


def strict_as_written(adapter: TypeAdapter[Any]) -> Callable[[object], Any]:
    """A strict ``validate_python`` that also takes each type in the form JSON gives it.

    Exact types pass at the cost of one strict validation. Otherwise the value is
    written as JSON (bytes as UTF-8, NaN and Infinity as their tokens) and validated
    strictly as JSON; if it cannot be written so (bytes that are not UTF-8), the
    strict Python error stands.
    """
    return _StrictAsWritten(adapter)


class _StrictAsWritten:
    """The validator :func:`strict_as_written` returns (a class: codecs are pickled)."""

    __slots__ = ("_adapter",)

    def __init__(self, adapter: TypeAdapter[Any]) -> None:
        self._adapter = adapter

    def __call__(self, obj: object) -> Any:
        adapter = self._adapter
        try:
            return adapter.validate_python(obj, strict=True)
        except ValidationError as exc:
            try:
                text = to_json(obj, bytes_mode="utf8", inf_nan_mode="constants")
            except (PydanticSerializationError, ValueError, TypeError):
                raise exc from None
        return adapter.validate_json(text, strict=True)
