"""Codecs beyond JSON in AsyncAPI documents: their content types, and the types' schemas."""

from __future__ import annotations

from typing import Any

import pytest

from goflux import JsonCodec
from goflux.asyncapi import describe_service
from goflux.asyncapi._payloads import payload_of
from goflux.codecs import Base64, Brotli, CsvCodec, Gzip, MsgpackCodec, YamlCodec, pipe
from tests.asyncapi import services
from tests.asyncapi.test_http import message


@pytest.fixture
async def described() -> dict[str, Any]:
    """The document of ``services.in_other_formats`` (HTTP members: no server needed).

    The official parser validates it in ``test_http`` (one Node process for all).
    """
    return (await describe_service(services.in_other_formats)).document


def sent_or_received(document: dict[str, Any], operation: str) -> dict[str, Any]:
    return message(document, document["operations"][operation]["messages"][0])


def content_type_header(found: dict[str, Any]) -> Any:
    return found["bindings"]["http"]["headers"]["properties"]["Content-Type"]


async def test_each_codec_states_its_content_type_and_the_types_schema(
    described: dict[str, Any],
) -> None:
    expected = {  # operation: (content type, payload schema)
        "receive.http.in.orders.packed": (
            "application/vnd.msgpack",
            {"$ref": "#/components/schemas/Order"},
        ),
        "receive.http.in.lines.csv": (
            "text/csv; charset=utf-8",
            {"type": "array", "items": {"$ref": "#/components/schemas/Line"}},
        ),
        "receive.http.orders.accept": ("application/gzip", {"$ref": "#/components/schemas/Order"}),
        "send.http.partner.internal.shipments.sent": (
            "application/yaml",
            {"$ref": "#/components/schemas/Shipment"},
        ),
        "send.http.archive.internal.orders.kept": (
            "application/gzip",
            {"$ref": "#/components/schemas/Order"},
        ),
    }
    found = {}
    for operation in expected:
        sent = sent_or_received(described, operation)
        found[operation] = (sent["contentType"], sent["payload"])
        # HTTP says the same as Content-Type
        assert content_type_header(sent) == {"type": "string", "enum": [sent["contentType"]]}
    assert found == expected
    # the reply of a responder: its reply codec's type (MessagePack compressed by zstd)
    reply, _ = (
        message(described, ref)
        for ref in described["operations"]["receive.http.orders.accept"]["reply"]["messages"]
    )
    assert (reply["contentType"], reply["payload"]) == (
        "application/zstd",
        {"$ref": "#/components/schemas/Receipt"},
    )
    # the models are components, as for JSON: the same schema whatever the format
    schemas = described["components"]["schemas"]
    assert set(schemas["Order"]["properties"]) == {"id", "lines", "ship_to", "bill_to"}
    assert schemas["Line"]["properties"]["quantity"] == {"title": "Quantity", "type": "integer"}


def test_a_pipe_is_its_first_stages_payload_with_the_pipes_content_type() -> None:
    order = payload_of(JsonCodec(services.Order), "validation")
    assert payload_of(pipe(JsonCodec(services.Order), Gzip()), "validation") == type(order)(
        "Order", "application/gzip", json_type=services.Order
    )
    packed = payload_of(pipe(MsgpackCodec(services.Order), Brotli(), Base64()), "serialization")
    assert (packed.name, packed.content_type, packed.json_type, packed.mode) == (
        "Order",
        "text/plain; charset=us-ascii",
        services.Order,
        "serialization",
    )
    yaml = payload_of(YamlCodec(services.Shipment), "validation")
    assert (yaml.name, yaml.content_type, yaml.json_type) == (
        "Shipment",
        "application/yaml",
        services.Shipment,
    )
    rows = payload_of(pipe(CsvCodec(services.Line), Gzip()), "validation")
    assert (rows.name, rows.content_type, rows.json_type) == (
        "list[Line]",
        "application/gzip",
        list[services.Line],
    )
    # bytes compressed stay bytes
    assert payload_of(Gzip(), "validation").schema == {"description": "bytes encoded by Gzip"}
