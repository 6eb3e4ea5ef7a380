"""Payloads as AsyncAPI sees them: a name, a content type and a JSON Schema per codec."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter

from goflux._codecs import BytesCodec, JsonCodec, StrCodec, type_adapter, type_name

__all__ = ("Mode", "Payload", "PayloadSchemas", "component_key", "payload_of")

Mode = Literal["validation", "serialization"]
"""Which side of a JSON codec: what it accepts (received) or what it writes (sent)."""

SCHEMA_REF = "#/components/schemas/{model}"
_NOT_A_KEY = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Payload:
    """What a codec puts on the wire.

    Attributes:
        name: A readable name for the payload type (``Order``, ``bytes``).
        content_type: Its MIME type, None when the codec does not say.
        json_type: The type a JSON codec encodes (its schema comes from pydantic).
        mode: Which of its schemas applies.
        schema: A fixed schema for codecs that are not JSON.
    """

    name: str
    content_type: str | None
    json_type: Any = None
    mode: Mode = "validation"
    schema: Any = field(default=None, compare=False)  # follows from the name


def payload_of(codec: object, mode: Mode) -> Payload:
    """The payload a codec reads (``mode="validation"``) or writes (``"serialization"``)."""
    if isinstance(codec, JsonCodec):
        return Payload(type_name(codec.type), "application/json", json_type=codec.type, mode=mode)
    if isinstance(codec, BytesCodec):
        return Payload(
            "bytes", "application/octet-stream", schema={"type": "string", "format": "binary"}
        )
    if isinstance(codec, StrCodec):
        return Payload("text", "text/plain", schema={"type": "string"})
    return Payload(
        type(codec).__name__,
        None,
        schema={"description": f"bytes encoded by {type(codec).__qualname__}"},
    )


class PayloadSchemas:
    """The JSON Schemas of many payloads at once: nested models become shared components.

    Add every payload, then :meth:`resolve`: each payload's schema (a ``$ref`` into
    ``#/components/schemas`` for models) and the component schemas, sorted by name.
    """

    def __init__(self) -> None:
        self._payloads: dict[tuple[str, Mode, int], Payload] = {}

    @staticmethod
    def _key(payload: Payload) -> tuple[str, Mode, int]:
        return (payload.name, payload.mode, id(payload.json_type))

    def add(self, payload: Payload) -> None:
        """Take ``payload`` into the next :meth:`resolve`."""
        if payload.json_type is not None:
            self._payloads.setdefault(self._key(payload), payload)

    def resolve(self) -> tuple[dict[tuple[str, Mode, int], Any], dict[str, Any]]:
        """Each JSON payload's schema by key, and the component schemas (sorted by name)."""
        inputs: Iterable[tuple[tuple[str, Mode, int], Mode, TypeAdapter[Any]]] = [
            (key, payload.mode, type_adapter(payload.json_type))
            for key, payload in sorted(self._payloads.items(), key=lambda item: item[0][:2])
        ]
        inputs = list(inputs)
        if not inputs:
            return {}, {}
        schemas, top = TypeAdapter.json_schemas(inputs, ref_template=SCHEMA_REF)
        definitions: dict[str, Any] = top.get("$defs", {})
        by_key = {key: schema for (key, _), schema in schemas.items()}
        return by_key, {name: definitions[name] for name in sorted(definitions)}

    def schema_of(self, payload: Payload, resolved: dict[tuple[str, Mode, int], Any]) -> Any:
        """The schema of ``payload`` after :meth:`resolve`."""
        if payload.json_type is None:
            return payload.schema
        return resolved[self._key(payload)]


def component_key(name: str) -> str:
    """``name`` as a components key (letters, digits, ``.``, ``-``, ``_``)."""
    return _NOT_A_KEY.sub("_", name).strip("_") or "payload"
