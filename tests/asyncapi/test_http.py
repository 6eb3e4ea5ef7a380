"""HTTP members in AsyncAPI documents: AsyncAPI's HTTP bindings, checked by the official parser."""

from __future__ import annotations

import json
from typing import Any

import pytest

from goflux.asyncapi import describe_service
from goflux.testing import NatsServer
from tests.asyncapi import services
from tests.asyncapi.parser import parse


@pytest.fixture
async def described() -> dict[str, Any]:
    """The document of ``services.over_http`` (no server needed: HTTP members own none)."""
    return (await describe_service(services.over_http)).document


def message(document: dict[str, Any], ref: dict[str, str]) -> dict[str, Any]:
    """The message component a channel's or operation's message reference leads to."""
    path = ref["$ref"].removeprefix("#/").split("/")
    found: Any = document
    for part in path:
        found = found[part]
    while "$ref" in found:  # a channel's message refers on to the component
        found = message(document, found)
    result: dict[str, Any] = found
    return result


@pytest.mark.slow  # the Node parser on three documents
async def test_the_documents_validate_with_the_official_parser(
    described: dict[str, Any],
) -> None:
    example = await describe_service("examples.http_request_reply:service")
    # one Node process for every document: payloads in other formats too (test_codecs)
    formats = await describe_service(services.in_other_formats)
    for verdict in parse(json.dumps(described), example.to_json(), formats.to_json()):
        assert verdict.valid, verdict.diagnostics
        assert verdict.problems == []
    document = example.document
    assert document["info"]["title"] == "pricing over HTTP"
    assert document["channels"]["http.rpc.pricing.quote"]["address"] == "/rpc/pricing.quote"
    operation = document["operations"]["receive.http.rpc.pricing.quote"]
    assert operation["bindings"]["http"]["method"] == "POST"
    reply = message(document, operation["reply"]["messages"][0])
    assert reply["payload"] == {"$ref": "#/components/schemas/Quote"}
    assert reply["bindings"]["http"]["statusCode"] == 200


async def test_channels_are_paths_on_their_servers(described: dict[str, Any]) -> None:
    channels = {
        key: (channel["address"], [s["$ref"] for s in channel.get("servers", [])])
        for key, channel in described["channels"].items()
    }
    served, partner = "#/servers/http", "#/servers/https.partner.example.org_8443"
    receipts = "#/servers/http.receipts.internal"
    assert channels == {
        "http.hooks.orders.token2.created": ("/hooks/orders.{token2}.created", [served]),
        "http.hooks.notes.tail": ("/hooks/notes.{tail}", [served]),
        "http.orders.accept": ("/orders.accept", [served]),
        "http.orders.accept.reply": (None, [served]),  # the answer: the same connection
        "https.partner.example.org_8443.in.audit.raw": ("/in/audit.raw", [partner]),
        "http.receipts.internal.receipts.issue": ("/receipts.issue", [receipts]),
        "http.receipts.internal.receipts.issue.reply": (None, [receipts]),
    }
    parameters = described["channels"]["http.hooks.orders.token2.created"]["parameters"]
    assert set(parameters) == {"token2"}


async def test_servers_the_routes_and_the_endpoints_posted_to(described: dict[str, Any]) -> None:
    servers = described["servers"]
    assert list(servers) == ["http", "https.partner.example.org_8443", "http.receipts.internal"]
    routes = servers["http"]
    assert (routes["host"], routes["protocol"]) == ("{host}", "http")
    assert set(routes["variables"]) == {"host"}  # served wherever the service is run
    partner = servers["https.partner.example.org_8443"]
    assert (partner["host"], partner["protocol"]) == ("partner.example.org:8443", "https")
    assert servers["http.receipts.internal"]["host"] == "receipts.internal"
    text = json.dumps(described)
    assert "s3cret-pass" not in text
    assert "bob" not in text


async def test_operations_are_posts(described: dict[str, Any]) -> None:
    bindings = {key: op["bindings"] for key, op in described["operations"].items()}
    route = {"http": {"method": "POST", "x-max-body-size": 1 << 20, "bindingVersion": "0.3.0"}}
    posted = {"http": {"method": "POST", "bindingVersion": "0.3.0"}}
    assert bindings == {
        "receive.http.hooks.orders.token2.created": {
            "http": {"method": "POST", "x-max-body-size": 4096, "bindingVersion": "0.3.0"}
        },
        "receive.http.hooks.notes.tail": route,
        "receive.http.orders.accept": route,
        "send.https.partner.example.org_8443.in.audit.raw": posted,
        "send.http.receipts.internal.receipts.issue": posted,
    }
    assert {key: op["action"] for key, op in described["operations"].items()} == {
        "receive.http.hooks.orders.token2.created": "receive",
        "receive.http.hooks.notes.tail": "receive",
        "receive.http.orders.accept": "receive",
        "send.https.partner.example.org_8443.in.audit.raw": "send",
        "send.http.receipts.internal.receipts.issue": "send",
    }


async def test_messages_carry_their_http_headers_and_content_types(
    described: dict[str, Any],
) -> None:
    operations = described["operations"]
    hooked = message(
        described, operations["receive.http.hooks.orders.token2.created"]["messages"][0]
    )
    assert hooked["contentType"] == "application/json"
    headers = hooked["bindings"]["http"]["headers"]
    assert headers["type"] == "object"
    assert headers["allOf"] == [{"$ref": "#/components/schemas/goflux.Headers"}]  # X-Message-ID
    assert headers["properties"] == {
        "Content-Type": {"type": "string", "enum": ["application/json"]},
        "X-Goflux-Tenant": {"type": "string", "description": "Whose order it is."},
    }
    assert hooked["bindings"]["http"]["bindingVersion"] == "0.3.0"
    assert "statusCode" not in hooked["bindings"]["http"]  # a request, not a reply
    # each codec says its own content type, on HTTP and in the document alike
    noted = message(described, operations["receive.http.hooks.notes.tail"]["messages"][0])
    assert noted["contentType"] == "text/plain; charset=utf-8"
    assert noted["bindings"]["http"]["headers"]["properties"]["Content-Type"] == {
        "type": "string",
        "enum": ["text/plain; charset=utf-8"],
    }
    raw = message(
        described, operations["send.https.partner.example.org_8443.in.audit.raw"]["messages"][0]
    )
    assert raw["contentType"] == "application/octet-stream"


async def test_a_responders_reply_is_200_with_the_reply_codecs_type(
    described: dict[str, Any],
) -> None:
    operation = described["operations"]["receive.http.orders.accept"]
    reply, error = (message(described, ref) for ref in operation["reply"]["messages"])
    assert reply["contentType"] == "text/plain; charset=utf-8"  # StrCodec's, not JSON
    assert reply["payload"] == {"type": "string"}
    assert reply["bindings"]["http"]["statusCode"] == 200
    assert reply["bindings"]["http"]["headers"]["properties"]["Content-Type"] == {
        "type": "string",
        "enum": ["text/plain; charset=utf-8"],
    }
    assert reply["correlationId"] == {"$ref": "#/components/correlationIds/messageId"}
    assert error["name"] == "HttpError"
    assert error["contentType"] == "text/plain; charset=utf-8"
    assert "X-Message-ID" in error["bindings"]["http"]["headers"]["properties"]
    # HTTP's error answer, not NATS's error headers
    assert "ServiceError" not in described["components"]["messages"]
    assert "goflux.ServiceErrorHeaders" not in described["components"]["schemas"]


async def test_a_requesters_request_expects_its_reply(described: dict[str, Any]) -> None:
    operation = described["operations"]["send.http.receipts.internal.receipts.issue"]
    reply, error = (message(described, ref) for ref in operation["reply"]["messages"])
    assert reply["payload"] == {"$ref": "#/components/schemas/Receipt"}
    assert reply["bindings"]["http"]["statusCode"] == 200
    assert error["name"] == "HttpError"


async def test_nats_and_http_on_one_subject_are_two_channels(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NATS_URL", nats_server.url)
    document = (await describe_service(services.nats_and_http)).document
    channels = {
        key: (channel["address"], [s["$ref"] for s in channel["servers"]])
        for key, channel in document["channels"].items()
    }
    assert channels == {
        "orders.new": ("orders.new", ["#/servers/nats"]),
        "http.orders.new": ("/orders.new", ["#/servers/http"]),
    }
    assert [document["servers"][key]["protocol"] for key in document["servers"]] == [
        "nats",
        "http",
    ]
    bindings = [op.get("bindings", {}) for op in document["operations"].values()]
    assert [list(b) for b in bindings] == [[], ["http"]]
    (verdict,) = parse(json.dumps(document))
    assert verdict.valid, verdict.diagnostics
    assert verdict.problems == []
