"""Payloads as AsyncAPI sees them: a name, a content type and a JSON Schema per codec."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from types import GenericAlias
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import PydanticUserError, TypeAdapter

from goflux._codecs import (
    BytesCodec,
    JsonCodec,
    StrCodec,
    content_type_of,
    type_adapter,
    type_name,
)
from goflux.codecs import CsvCodec, MsgpackCodec, Pipe, TomlCodec, XmlCodec, YamlCodec

__all__ = ("Mode", "Payload", "PayloadSchemas", "component_key", "payload_of")

Mode = Literal["validation", "serialization"]
"""Which side of a JSON codec: what it accepts (received) or what it writes (sent)."""

SCHEMA_REF = "#/components/schemas/{model}"
_NOT_A_KEY = re.compile(r"[^A-Za-z0-9._-]+")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


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


def _name_of(tp: object) -> str:
    """A stable, readable name of a payload type (``Order``, ``list[Order]``).

    ``Annotated`` metadata is left out (validators would bring their memory
    addresses), and so are memory addresses anywhere.
    """
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return _ADDRESS.sub("", type_name(tp))


def _fit(schema: Any) -> Any:
    """A pydantic JSON Schema made fit for AsyncAPI (its Schema Object is draft 7's).

    - ``discriminator`` is a property name there, not OpenAPI's object;
    - JSON has no NaN or infinity: such values (defaults, examples) are written as
      pydantic writes them with ``ser_json_inf_nan="strings"``.
    """
    if isinstance(schema, dict):
        fitted = {key: _fit(value) for key, value in schema.items()}
        discriminator = fitted.get("discriminator")
        if isinstance(discriminator, dict) and "propertyName" in discriminator:
            fitted["discriminator"] = discriminator["propertyName"]
        return fitted
    if isinstance(schema, list):
        return [_fit(item) for item in schema]
    if isinstance(schema, float) and not math.isfinite(schema):
        return "NaN" if math.isnan(schema) else ("Infinity" if schema > 0 else "-Infinity")
    return schema


# Codecs of a pydantic type in another format: the payload's schema is the type's (the
# structure of the data), and the content type says how it is written.
_TYPED_CODECS = (JsonCodec, MsgpackCodec, YamlCodec, TomlCodec, XmlCodec)


_ROWS: dict[object, object] = {}


def _rows_of(row: object) -> object:
    """``list[row]``, the value a ``CsvCodec(row)`` carries (one object per row type)."""
    return _ROWS.setdefault(row, GenericAlias(list, (row,)))


def payload_of(codec: object, mode: Mode) -> Payload:
    """The payload a codec reads (``mode="validation"``) or writes (``"serialization"``).

    Its content type is the codec's own ``content_type``, the one the HTTP transport
    sends as ``Content-Type`` (``application/gzip`` for a pipe ending in gzip). The
    schema of a codec of a type (JSON, MessagePack, YAML, TOML, XML; a list of rows
    for CSV) is the type's; a pipe's is its first stage's, the value it carries.
    """
    content_type = content_type_of(codec)
    if isinstance(codec, Pipe):
        inner = payload_of(codec.stages[0], mode)
        return replace(inner, content_type=content_type)
    if isinstance(codec, _TYPED_CODECS):
        return Payload(_name_of(codec.type), content_type, json_type=codec.type, mode=mode)
    if isinstance(codec, CsvCodec):
        rows = _rows_of(codec.type)
        return Payload(f"list[{_name_of(codec.type)}]", content_type, json_type=rows, mode=mode)
    if isinstance(codec, BytesCodec):
        return Payload("bytes", content_type, schema={"type": "string", "format": "binary"})
    if isinstance(codec, StrCodec):
        return Payload("text", content_type, schema={"type": "string"})
    return Payload(
        type(codec).__name__,
        content_type,
        schema={"description": f"bytes encoded by {type(codec).__qualname__}"},
    )


class PayloadSchemas:
    """The JSON Schemas of many payloads at once: nested models become shared components.

    Add every payload, then :meth:`resolve`: each payload's schema (a ``$ref`` into
    ``#/components/schemas`` for models) and the component schemas, sorted by name.
    """

    def __init__(self) -> None:
        self._payloads: dict[tuple[str, Mode, int], Payload] = {}
        self.failures: list[tuple[str, str]] = []  # (payload name, why it has no schema)

    @staticmethod
    def _key(payload: Payload) -> tuple[str, Mode, int]:
        return (payload.name, payload.mode, id(payload.json_type))

    def add(self, payload: Payload) -> None:
        """Take ``payload`` into the next :meth:`resolve`."""
        if payload.json_type is not None:
            self._payloads.setdefault(self._key(payload), payload)

    def resolve(self) -> tuple[dict[tuple[str, Mode, int], Any], dict[str, Any]]:
        """Each JSON payload's schema by key, and the component schemas (sorted by name)."""
        inputs: list[tuple[tuple[str, Mode, int], Mode, TypeAdapter[Any]]] = []
        by_key: dict[tuple[str, Mode, int], Any] = {}
        self.failures = []
        for key, payload in sorted(self._payloads.items(), key=lambda item: item[0][:2]):
            adapter = type_adapter(payload.json_type)
            try:  # alone first: one type without a JSON Schema must not sink the others
                adapter.json_schema(mode=payload.mode)
            except PydanticUserError as exc:
                why = _ADDRESS.sub("", " ".join(str(exc).split("\n")[0].split()))
                self.failures.append((payload.name, why))
                by_key[key] = {"description": f"{payload.name}: no JSON Schema ({why})"}
                continue
            inputs.append((key, payload.mode, adapter))
        if not inputs:
            return by_key, {}
        schemas, top = TypeAdapter.json_schemas(inputs, ref_template=SCHEMA_REF)
        definitions: dict[str, Any] = top.get("$defs", {})
        by_key.update({key: _fit(schema) for (key, _), schema in schemas.items()})
        return by_key, {name: _fit(definitions[name]) for name in sorted(definitions)}

    def schema_of(self, payload: Payload, resolved: dict[tuple[str, Mode, int], Any]) -> Any:
        """The schema of ``payload`` after :meth:`resolve`."""
        if payload.json_type is None:
            return payload.schema
        return resolved[self._key(payload)]


def component_key(name: str) -> str:
    """``name`` as a components key (letters, digits, ``.``, ``-``, ``_``)."""
    return _NOT_A_KEY.sub("_", name).strip("_") or "payload"
