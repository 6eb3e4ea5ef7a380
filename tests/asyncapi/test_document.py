"""AsyncAPI documents of real groups on a real nats-server, checked by the official parser."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import nats
import pytest
import yaml

from goflux import Group, JsonCodec, bind_publisher
from goflux.asyncapi import DescribeError, asyncapi_document, asyncapi_html, describe_service
from goflux.asyncapi._servers import Servers
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports import nats as gnats
from tests.asyncapi import services
from tests.asyncapi.parser import parse


@pytest.fixture(scope="module")
def server() -> Iterator[NatsServer]:
    """A JetStream server with its HTTP monitor on a free port (for /subsz and /jsz)."""
    with NatsServer(args=["-m", "-1"]) as running:
        yield running


def monitor(server: NatsServer, path: str) -> dict[str, Any]:
    found = re.search(r"http monitor on [\d.]+:(\d+)", server.log_tail(200))
    assert found, server.log_tail(200)
    with urllib.request.urlopen(f"http://127.0.0.1:{found.group(1)}/{path}", timeout=5) as reply:
        result: dict[str, Any] = json.load(reply)
        return result


@pytest.fixture
def nats_url(server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("NATS_URL", server.url)
    return server.url


@pytest.fixture
async def everything(nats_url: str) -> dict[str, Any]:
    described = await describe_service(services.everything)
    return described.document


async def test_the_document_validates_with_the_official_parser(everything: dict[str, Any]) -> None:
    (verdict,) = parse(json.dumps(everything))
    assert verdict.valid, verdict.diagnostics
    assert verdict.version == "3.0.0"
    assert verdict.problems == []


async def test_one_channel_per_subject_wildcards_as_parameters(everything: dict[str, Any]) -> None:
    channels = everything["channels"]
    addresses = {key: channel["address"] for key, channel in channels.items()}
    assert addresses == {
        "orders.token2.created": "orders.{token2}.created",
        "audit.tail": "audit.{tail}",
        "orders.shipped": "orders.shipped",
        "orders.accept": "orders.accept",
        "orders.accept.reply": None,  # the requester's inbox: known only at run time
        "receipts.issued": "receipts.issued",
        "orders.replayed": "orders.replayed",
    }
    assert set(channels["orders.token2.created"]["parameters"]) == {"token2"}
    assert set(channels["audit.tail"]["parameters"]) == {"tail"}
    # received and sent on the same subject: one channel, two operations
    operations = everything["operations"]
    on_created = [
        (key, op["action"])
        for key, op in operations.items()
        if op["channel"]["$ref"] == "#/channels/orders.token2.created"
    ]
    assert on_created == [
        ("receive.orders.token2.created", "receive"),
        ("send.orders.token2.created", "send"),
    ]


async def test_operations_follow_the_members(everything: dict[str, Any]) -> None:
    operations = everything["operations"]
    assert {key: op["action"] for key, op in operations.items()} == {
        "receive.orders.token2.created": "receive",
        "receive.audit.tail": "receive",
        "receive.orders.shipped": "receive",
        "receive.orders.accept": "receive",
        "send.orders.shipped": "send",
        "send.receipts.issued": "send",
        "send.orders.token2.created": "send",
        "send.orders.replayed": "send",
    }
    shipping = operations["receive.orders.token2.created"]
    assert shipping["description"] == "Ship an order to its address."
    assert shipping["bindings"]["nats"]["x-jetstream"] == {
        "stream": "ORDERS",
        "durable": False,
        "ackPolicy": "explicit",
        "ack": "auto",
        "maxInFlight": 512,
    }
    processed = operations["receive.orders.shipped"]["bindings"]["nats"]["x-jetstream"]
    assert processed["consumer"] == "shipping"
    assert processed["durable"] is True
    assert operations["receive.audit.tail"]["bindings"]["nats"]["queue"] == "auditors"
    assert operations["send.orders.replayed"]["description"] == "Orders re-sent by an operator."


async def test_nested_models_appear_once_under_components(everything: dict[str, Any]) -> None:
    schemas = everything["components"]["schemas"]
    assert {"Order", "Line", "Address", "Shipment", "Receipt"} <= set(schemas)
    text = json.dumps(everything)
    # Address is used by Order (twice) and Shipment, yet defined once, referred to by $ref
    assert text.count('"street": {') == 1
    assert schemas["Order"]["properties"]["ship_to"] == {"$ref": "#/components/schemas/Address"}
    assert schemas["Shipment"]["properties"]["to"] == {"$ref": "#/components/schemas/Address"}
    order_message = everything["components"]["messages"]["Order"]
    assert order_message["payload"] == {"$ref": "#/components/schemas/Order"}
    assert order_message["contentType"] == "application/json"
    raw = everything["components"]["messages"]["bytes"]
    assert raw["contentType"] == "application/octet-stream"
    assert raw["payload"] == {"type": "string", "format": "binary"}


async def test_headers_standard_and_declared(everything: dict[str, Any]) -> None:
    messages = everything["components"]["messages"]
    schemas = everything["components"]["schemas"]
    standard = schemas["goflux.Headers"]["properties"]
    assert set(standard) == {"X-Message-ID", "traceparent", "tracestate"}
    assert "Nats-Msg-Id" in schemas["goflux.JetStreamHeaders"]["properties"]
    # the JetStream subscription declared a user header: its wire name carries the prefix
    declared = [
        message
        for message in messages.values()
        if "X-Goflux-Tenant" in message["headers"].get("properties", {})
    ]
    assert len(declared) == 1
    standard = {"$ref": "#/components/schemas/goflux.JetStreamHeaders"}
    assert declared[0]["headers"]["allOf"] == [standard]
    assert declared[0]["headers"]["properties"]["X-Goflux-Tenant"]["description"] == (
        "Whose order it is."
    )


async def test_request_reply_has_a_reply_channel_errors_and_correlation(
    everything: dict[str, Any],
) -> None:
    operation = everything["operations"]["receive.orders.accept"]
    reply = operation["reply"]
    assert reply["channel"] == {"$ref": "#/channels/orders.accept.reply"}
    refs = [m["$ref"] for m in reply["messages"]]
    assert [ref.rpartition("/")[0] for ref in refs] == [
        "#/channels/orders.accept.reply/messages"
    ] * 2
    channel = everything["channels"]["orders.accept.reply"]
    receipt, error = (channel["messages"][ref.rpartition("/")[2]]["$ref"] for ref in refs)
    messages = everything["components"]["messages"]
    reply_message = messages[receipt.rpartition("/")[2]]
    assert reply_message["payload"] == {"$ref": "#/components/schemas/Receipt"}
    assert reply_message["correlationId"] == {"$ref": "#/components/correlationIds/messageId"}
    assert error == "#/components/messages/ServiceError"
    request = messages[operation["messages"][0]["$ref"].rpartition("/")[2]]
    assert request["payload"] == {"$ref": "#/components/schemas/Order"}
    assert request["correlationId"] == {"$ref": "#/components/correlationIds/messageId"}
    # the same Receipt sent on a topic carries no correlation: another message
    topic = everything["operations"]["send.receipts.issued"]["messages"][0]["$ref"]
    assert "correlationId" not in messages[topic.rpartition("/")[2]]
    assert everything["components"]["correlationIds"]["messageId"]["location"] == (
        "$message.header#/X-Message-ID"
    )
    errors = everything["components"]["schemas"]["goflux.ServiceErrorHeaders"]
    assert errors["required"] == ["Nats-Service-Error", "Nats-Service-Error-Code"]


async def test_servers_come_from_the_connections(everything: dict[str, Any], nats_url: str) -> None:
    host = nats_url.removeprefix("nats://")
    assert everything["servers"] == {
        "nats": {"host": host, "protocol": "nats", "description": "NATS server"}
    }
    assert everything["info"] == {
        "title": "services.everything",
        "version": "0.0.0",
        "description": "A service with every kind of endpoint.",
    }


async def test_in_process_channels_are_left_out_and_said_so(nats_url: str) -> None:
    described = await describe_service(services.everything)
    assert [(s.member, s.reason) for s in described.skipped] == [
        ("subscription to 'in.process'", "an in-process channel, not on NATS")
    ]
    assert "in.process" not in json.dumps(described.document)


async def test_nothing_is_started_nothing_created(
    server: NatsServer, nats_url: str, tmp_path: Path
) -> None:
    flag = tmp_path / "started"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STARTED_FLAG", str(flag))
        before = monitor(server, "subsz")["num_inserts"]
        described = await describe_service(services.everything)
        after = monitor(server, "subsz")["num_inserts"]
    assert described.document["channels"]
    assert after == before, "describing the service subscribed to something"
    assert not flag.exists(), "describing the service ran its start-up function"
    assert monitor(server, "jsz")["streams"] == 0  # the stream is made at start only
    assert monitor(server, "jsz")["consumers"] == 0


async def test_the_same_bytes_every_time(nats_url: str) -> None:
    first = await describe_service("tests.asyncapi.services:everything")
    second = await describe_service("tests.asyncapi.services:everything")
    assert first.to_json() == second.to_json()
    assert first.to_yaml() == second.to_yaml()
    assert yaml.safe_load(first.to_yaml()) == json.loads(first.to_json())


async def test_credentials_never_reach_the_document() -> None:
    async with NatsServer(args=["--user", "bob", "--pass", "s3cret-pass"]) as secured:
        url = secured.url.replace("nats://", "nats://bob:s3cret-pass@")
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("NATS_URL", url)
            described = await describe_service(services.with_credentials)
    text = described.to_json()
    assert "s3cret-pass" not in text
    assert "bob" not in text
    server = described.document["servers"]["nats"]
    assert server["host"] == f"127.0.0.1:{secured.port}"
    assert server["security"] == [{"$ref": "#/components/securitySchemes/userPassword"}]
    assert described.document["components"]["securitySchemes"]["userPassword"]["type"] == (
        "userPassword"
    )
    (verdict,) = parse(text)
    assert verdict.valid, verdict.diagnostics
    assert verdict.problems == []


async def test_a_failing_service_function_is_a_describe_error(nats_url: str) -> None:
    with pytest.raises(DescribeError, match="no configuration for the pricing table") as info:
        await describe_service(services.failing)
    assert isinstance(info.value.__cause__, RuntimeError)


async def test_a_group_built_by_hand(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        group = Group()
        group.describe(title="orders", version="1.2.3", description="Takes orders.")
        publisher = jetstream.Publisher(nc.jetstream(), JsonCodec(services.Order))
        group.own(bind_publisher(publisher, "orders.placed"))
        described = asyncapi_document(group, version="2.0.0")
    finally:
        await nc.close()
    assert described.document["info"] == {
        "title": "orders",
        "version": "2.0.0",
        "description": "Takes orders.",
    }
    assert list(described.document["operations"]) == ["send.orders.placed"]
    message = described.document["components"]["messages"]["Order"]
    assert message["headers"] == {"$ref": "#/components/schemas/goflux.JetStreamHeaders"}


def test_sends_needs_subjects_for_an_unbound_publisher() -> None:
    group = Group()

    class Unbound:
        async def publish(self, *args: object, **kwargs: object) -> None: ...

    with pytest.raises(ValueError, match="needs the subjects"):
        group.sends(Unbound())
    with pytest.raises(TypeError, match="not a string"):
        group.sends(Unbound(), "a.b", headers="Tenant")


async def test_responders_register_their_reply_codec(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        group = Group()
        responder = gnats.Responder(nc, JsonCodec(services.Order), JsonCodec(services.Receipt))
        group.respond(responder, "orders.accept", services.accept)
        document = asyncapi_document(group).document
    finally:
        await nc.close()
    assert document["components"]["messages"]["Receipt"]["payload"] == {
        "$ref": "#/components/schemas/Receipt"
    }


def test_the_page_embeds_the_document_safely() -> None:
    hostile = "</script><script>alert(1)</script>"
    document = {"asyncapi": "3.0.0", "info": {"title": hostile, "version": "1.0.0"}}
    page = asyncapi_html(document, renderer="https://example.org/renderer/")
    assert hostile not in page  # neither in the title nor in the embedded JSON
    assert "&lt;/script&gt;" in page
    assert '"title": "\\u003c/script\\u003e\\u003cscript\\u003ealert(1)' in page
    assert 'src="https://example.org/renderer/browser/standalone/index.js"' in page


async def test_server_hosts_and_credential_kinds() -> None:
    async with NatsServer(args=["--auth", "T0KEN-secret"]) as secured:
        url = secured.url.replace("nats://", "nats://T0KEN-secret@")
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("NATS_URL", url)
            described = await describe_service(services.with_credentials)
    assert "T0KEN-secret" not in described.to_json()
    assert described.document["servers"]["nats"]["security"] == [
        {"$ref": "#/components/securitySchemes/token"}
    ]


def test_ipv6_and_websocket_hosts_are_well_formed() -> None:
    servers = Servers()

    class Client:
        def __init__(self, *urls: str) -> None:
            self.servers = [urlparse(url) for url in urls]
            self.discovered_servers: list[object] = []
            self.options: dict[str, object] = {}

    hosts = servers.add(Client("nats://[::1]:4223", "ws://example.org", "wss://example.org"))
    assert hosts == ["[::1]:4223", "example.org:80", "example.org:443"]
    document, _ = servers.document()
    assert [(s["host"], s["protocol"]) for s in document.values()] == [
        ("[::1]:4223", "nats"),
        ("example.org:80", "ws"),
        ("example.org:443", "wss"),
    ]


def test_the_page_survives_a_comment_opener_in_the_document() -> None:
    document = {
        "asyncapi": "3.0.0",
        "info": {"title": "t", "version": "1", "description": "<!--<script>"},
    }
    page = asyncapi_html(document)
    script = page.split("AsyncApiStandalone.render(", 1)[1]
    assert "<" not in script.split("</script>", 1)[0]


async def test_a_template_channel_documents_its_typed_parameters(nats_url: str) -> None:
    document = (await describe_service(services.templated)).document
    (verdict,) = parse(json.dumps(document))
    assert verdict.valid, verdict.diagnostics
    assert verdict.problems == []
    [(key, channel)] = document["channels"].items()  # one channel, with or without template
    assert key == "shipments.region.order_id.shipped"
    assert channel["address"] == "shipments.{region}.{order_id}.shipped"
    assert channel["parameters"] == {
        "region": {
            "description": "Where the order was placed.",
            "enum": ["eu", "us"],
            "x-schema": {
                "description": "Where the order was placed.",
                "enum": ["eu", "us"],
                "type": "string",
            },
        },
        "order_id": {
            "description": "Token 3 of the subject: order_id of Key.",
            "examples": ["o-1"],
            "x-schema": {"examples": ["o-1"], "minLength": 2, "type": "string"},
        },
    }
    actions = sorted(op["action"] for op in document["operations"].values())
    assert actions == ["receive", "receive", "send"]
    assert {op["channel"]["$ref"] for op in document["operations"].values()} == {
        f"#/channels/{key}"
    }


async def test_two_templates_with_one_pattern_are_two_channels(nats_url: str) -> None:
    document = (await describe_service(services.twin_templates)).document
    (verdict,) = parse(json.dumps(document))
    assert verdict.valid, verdict.diagnostics
    assert verdict.problems == []
    channels = document["channels"]
    addresses = {key: channel["address"] for key, channel in channels.items()}
    assert addresses == {
        "shipments.region.order_id.shipped": "shipments.{region}.{order_id}.shipped",
        "shipments.customer.order_id.shipped": "shipments.{customer}.{order_id}.shipped",
        # the plain pattern could mean either template: a channel of its own
        "shipments.token2.token3.shipped": "shipments.{token2}.{token3}.shipped",
    }
    customer = channels["shipments.customer.order_id.shipped"]["parameters"]["customer"]
    assert customer["x-schema"] == {"type": "integer"}
    region = channels["shipments.region.order_id.shipped"]["parameters"]["region"]
    assert region["enum"] == ["eu", "us"]
    used = sorted(op["channel"]["$ref"] for op in document["operations"].values())
    assert used == sorted(f"#/channels/{key}" for key in channels)  # one operation each
