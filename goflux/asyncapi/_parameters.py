"""A subject template's parameters as AsyncAPI 3.0 channel parameters.

AsyncAPI 3.0's Parameter Object has ``description``, ``enum``, ``default``,
``examples`` (all strings) and ``location``, and no schema. Each placeholder of a
:class:`goflux.SubjectTemplate` becomes one: what maps is mapped (a ``Literal``'s or
``Enum``'s values as ``enum``, a field's ``default``, ``examples`` and
``description``), and the field's whole JSON Schema goes under the extension
``x-schema`` (its references inlined), so that nothing of the type is lost.
"""

from __future__ import annotations

from typing import Any

from goflux._subject_template import SubjectTemplate

__all__ = ("SCHEMA_EXTENSION", "template_address")

SCHEMA_EXTENSION = "x-schema"
"""The Parameter Object extension that holds a parameter's JSON Schema."""


def _inline(schema: object, defs: dict[str, Any]) -> Any:
    """``schema`` with its ``#/$defs/...`` references replaced by what they name."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = _inline(defs[ref.removeprefix("#/$defs/")], defs)
            rest = {k: _inline(v, defs) for k, v in schema.items() if k != "$ref"}
            return {**target, **rest}
        return {key: _inline(value, defs) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_inline(item, defs) for item in schema]
    return schema


def _token(value: object) -> str:
    """A JSON value of a parameter (a str or an int) as the token that carries it."""
    return value if isinstance(value, str) else str(value)


def _parameter(name: str, position: int, schema: dict[str, Any], params: str) -> dict[str, Any]:
    parameter: dict[str, Any] = {
        "description": schema.get("description")
        or f"Token {position} of the subject: {name} of {params}.",
    }
    if "enum" in schema:
        parameter["enum"] = [_token(value) for value in schema["enum"]]
    elif "const" in schema:
        parameter["enum"] = [_token(schema["const"])]
    if "default" in schema:
        parameter["default"] = _token(schema["default"])
    if isinstance(schema.get("examples"), list):
        parameter["examples"] = [_token(value) for value in schema["examples"]]
    parameter[SCHEMA_EXTENSION] = schema
    return parameter


def template_address(template: SubjectTemplate[Any]) -> tuple[str, dict[str, Any]]:
    """The channel address of ``template`` (its text) and its parameters, in order."""
    whole = template.json_schema()
    defs = whole.get("$defs", {})
    properties = whole.get("properties", {})
    params = template.params.__qualname__
    parameters: dict[str, Any] = {}
    for position, token in enumerate(template.template.split("."), start=1):
        if token.startswith("{"):
            name = token[1:-1]
            schema = _inline(properties.get(name, {}), defs)
            schema.pop("title", None)
            parameters[name] = _parameter(name, position, schema, params)
    return template.template, parameters
