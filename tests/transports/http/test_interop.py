"""The HTTP transport against clients and servers of another language: Node.js and curl.

The Node.js peers (tests/node/http_go_*.mjs, built-in modules only) speak HTTP as Go
goflux's transport does: the client writes requests as Go's publisher writes them
(canonical header names, ``url.PathEscape``, one line per header value), the server
reads requests as Go's subscriber and responder read them (``r.Header``,
``extractGofluxHeaders``) and answers as they answer (``http.Error``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from goflux import Headers, JsonCodec, Message, RemoteError, StrCodec
from goflux.transports import http as ghttp
from tests.conftest import Otel
from tests.helpers import Inbox
from tests.models import PRICE, QUOTE, Order, Price, Quote, order
from tests.nodejs import node_peer, run_node
from tests.transports.http.conftest import Serve

CODEC = JsonCodec(Order)

# Every character a NATS subject may hold that a path segment treats apart: Go's
# url.PathEscape escapes / ? # % , ; ! ' ( ) and non-ASCII bytes, keeps $ & + : = @ ~.
ODD_SUBJECT = "tenants.eu/west?x#y%z$a&b+c:d=e@f,g;h!i'j(k)l~m.é"
ODD_ESCAPED = "tenants.eu%2Fwest%3Fx%23y%25z$a&b+c:d=e@f%2Cg%3Bh%21i%27j%28k%29l~m.%C3%A9"

# Sender's trace context: what a Go service inside a trace puts in Traceparent.
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_IDS = ("00f067aa0ba902b7", "b7ad6b7169203331")
TEXT_PLAIN = "text/plain; charset=utf-8"


def _json(value: Order) -> str:
    return value.model_dump_json(by_alias=True)


def _consumer_span(otel: Otel, message_id: str) -> ReadableSpan:
    [span] = [
        s
        for s in otel.spans()
        if s.kind == SpanKind.CONSUMER
        and (s.attributes or {}).get("messaging.message.id") == message_id
    ]
    return span


def _sent_by(traceparent: str, span: ReadableSpan) -> bool:
    """Whether ``traceparent`` names ``span`` as sampled.

    The flags may also carry W3C's "random trace ID" bit (03), which Go's propagator
    accepts and masks away.
    """
    assert span.context is not None
    version, trace_id, span_id, flags = traceparent.split("-")
    ids = (int(trace_id, 16), int(span_id, 16))
    return (
        version == "00"
        and ids == (span.context.trace_id, span.context.span_id)
        and (int(flags, 16) & 1 == 1)
    )


async def _node_client(url: str, *operations: dict[str, Any]) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = await run_node(
        "http_go_client.mjs", url, json.dumps(operations), packages=False
    )
    return answers


# --------------------------------------------- a foreign client, goflux's subscriber


async def test_go_style_posts_from_node_reach_the_handler_typed_traced_with_id_and_headers(
    served: Serve, otel: Otel
) -> None:
    seen: dict[str, trace.SpanContext] = {}
    inbox: Inbox[Order] = Inbox()

    async def handler(msg: Message[Order]) -> None:
        assert msg.id is not None
        seen[msg.id] = trace.get_current_span().get_span_context()
        await inbox(msg)

    sub = ghttp.Subscriber(CODEC, base_path="/hooks", telemetry=otel.telemetry)
    await sub.start("orders.created", handler)
    await sub.start(ODD_SUBJECT, handler)
    async with served(sub.app) as url:
        answers = await _node_client(
            url + "/hooks",
            # Node's fetch: one value per header (it would join repeated values).
            {
                "publish": {
                    "subject": "orders.created",
                    "body": _json(order(1)),
                    "header": {"tenant-id": ["acme"], "region": ["eu"]},
                    "messageId": "m-1",
                    "traceparent": f"00-{TRACE_ID}-{SPAN_IDS[0]}-01",
                    "via": "fetch",
                }
            },
            # node:http: Go's lines exactly, a repeated header on lines of its own.
            {
                "publish": {
                    "subject": ODD_SUBJECT,
                    "body": _json(order(2)),
                    "header": {"tenant-id": ["acme", "beta"], "Region": ["eu"]},
                    "messageId": "m-2",
                    "traceparent": f"00-{TRACE_ID}-{SPAN_IDS[1]}-01",
                    "via": "http",
                }
            },
        )
    assert [a["status"] for a in answers] == [204, 204]
    first, second = inbox.messages
    assert (first.subject, first.payload, first.id) == ("orders.created", order(1), "m-1")
    assert (second.subject, second.payload, second.id) == (ODD_SUBJECT, order(2), "m-2")
    # Named as Go's subscriber hands them over: canonical, the prefix stripped. Go's
    # client writes the names sorted: Region before Tenant-Id.
    assert list(first.headers.items()) == [("Region", "eu"), ("Tenant-Id", "acme")]
    assert list(second.headers.items()) == [("Region", "eu"), ("Tenant-Id", "acme")]
    assert second.headers.get_all("tenant-id") == ["acme", "beta"]
    assert second.wire_headers.get_all("x-goflux-tenant-id") == ["acme", "beta"]
    assert first.wire_headers["content-type"] == "application/json"
    for msg, span_id in zip(inbox.messages, SPAN_IDS, strict=True):
        assert msg.id is not None
        span = _consumer_span(otel, msg.id)
        assert span.parent is not None
        assert span.parent.is_remote
        assert (span.parent.trace_id, span.parent.span_id) == (int(TRACE_ID, 16), int(span_id, 16))
        assert span.context is not None
        assert span.context.trace_id == int(TRACE_ID, 16)
        assert seen[msg.id] == span.context  # the handler runs inside it
        assert not span.links


async def test_node_requests_get_every_status_the_go_subscriber_answers(served: Serve) -> None:
    async def handler(msg: Message[Order]) -> None:
        if msg.payload.id == "o-2":
            raise RuntimeError("boom")

    sub = ghttp.Subscriber(CODEC, base_path="/hooks", max_body_size=1024)
    subscription = await sub.start("orders.created", handler)
    path = "/hooks/orders.created"
    async with served(sub.app) as url:
        ok, bad, get, put, too_large, failed, unknown = await _node_client(
            url,
            {"request": {"method": "POST", "path": path, "body": _json(order(1))}},
            {"request": {"method": "POST", "path": path, "body": "{"}},
            {"request": {"method": "GET", "path": path}},
            {"request": {"method": "PUT", "path": path, "body": _json(order(1))}},
            {"request": {"method": "POST", "path": path, "body": " " * 2000}},
            {"request": {"method": "POST", "path": path, "body": _json(order(2))}},
            {"request": {"method": "POST", "path": "/hooks/orders.other", "body": "{}"}},
        )
    assert (ok["status"], ok["body"]) == (204, "")
    for refused, status in ((bad, 400), (get, 405), (put, 405), (too_large, 413), (failed, 500)):
        assert refused["status"] == status, refused
        # Go's http.Error: plain text the browser must not sniff, ending in a newline.
        assert refused["headers"]["content-type"] == TEXT_PLAIN
        assert refused["headers"]["x-content-type-options"] == "nosniff"
        assert refused["body"].endswith("\n")
    assert bad["body"].startswith("bad request")
    assert (get["headers"]["allow"], put["headers"]["allow"]) == ("POST", "POST")
    assert "exceeds 1024 bytes" in too_large["body"]
    assert failed["body"] == "internal server error\n"
    assert unknown["status"] == 404
    assert (subscription.handled, subscription.failed, subscription.undecodable) == (1, 1, 1)


# ------------------------------------------ a foreign server, goflux's publisher


def _lines(seen: dict[str, Any]) -> list[tuple[str, str]]:
    raw: list[str] = seen["rawHeaders"]
    return list(zip(raw[::2], raw[1::2], strict=True))


async def test_a_node_server_reads_goflux_publishes_as_go_goflux_does(otel: Otel) -> None:
    async with node_peer("http_go_server.mjs", packages=False) as peer:
        url = f"http://127.0.0.1:{peer.ready['port']}"
        async with ghttp.Publisher(url + "/hooks", CODEC, telemetry=otel.telemetry) as pub:
            await pub.publish(
                "orders.created",
                order(1),
                headers=Headers([("tenant-id", "acme"), ("tenant-id", "beta"), ("Region", "eu")]),
                message_id="m-1",
            )
            first = await peer.next_line()
            await pub.publish(ODD_SUBJECT, order(2), message_id="m-2")
            odd = await peer.next_line()
            with pytest.raises(ghttp.StatusError) as failed:
                await pub.publish("orders.fail", order(3))
            assert (await peer.next_line())["status"] == 500
        async with ghttp.Publisher(url + "/nowhere", CODEC) as lost:
            with pytest.raises(ghttp.StatusError) as unknown:
                await lost.publish("orders.created", order(4))
            nowhere = await peer.next_line()

    assert (first["method"], first["rawPath"], first["subject"]) == (
        "POST",
        "/hooks/orders.created",
        "orders.created",
    )
    # What Go's subscriber hands its handler, and the lines it read them from.
    assert first["gofluxHeader"] == {"Tenant-Id": ["acme", "beta"], "Region": ["eu"]}
    lines = _lines(first)
    assert [line for line in lines if line[0].lower() == "x-goflux-tenant-id"] == [
        ("X-Goflux-tenant-id", "acme"),
        ("X-Goflux-tenant-id", "beta"),
    ]
    assert ("X-Message-ID", "m-1") in lines
    assert first["messageId"] == "m-1"
    assert first["traceparentValid"]
    assert _sent_by(first["traceparent"], otel.span("send orders.created"))
    assert [name for name, _ in lines if name.lower() == "traceparent"] == ["traceparent"]
    assert first["contentType"] == "application/json"
    assert first["header"]["Content-Type"] == ["application/json"]
    assert first["body"] == _json(order(1))
    assert Order.model_validate_json(first["body"]) == order(1)

    assert odd["rawPath"] == "/hooks/" + ODD_ESCAPED
    assert (odd["subject"], odd["escapedAsGo"]) == (ODD_SUBJECT, True)
    assert (odd["messageId"], odd["gofluxHeader"]) == ("m-2", None)

    assert (failed.value.status, failed.value.detail) == (500, "internal server error")
    assert not failed.value.permanent
    # A publisher without telemetry sends no trace context, and nothing goflux did not.
    assert (unknown.value.status, unknown.value.detail) == (404, "404 page not found")
    assert unknown.value.permanent
    assert (nowhere["traceparent"], nowhere["messageId"], nowhere["gofluxHeader"]) == ("", "", None)
    assert {name.lower() for name, _ in _lines(nowhere)} == {
        "host",
        "accept",
        "accept-encoding",
        "connection",
        "user-agent",
        "content-length",
        "content-type",
    }


async def test_a_node_server_answers_goflux_requests_as_go_goflux_does(otel: Otel) -> None:
    async with node_peer("http_go_server.mjs", packages=False) as peer:
        url = f"http://127.0.0.1:{peer.ready['port']}"
        async with ghttp.Requester(url + "/api", QUOTE, PRICE, telemetry=otel.telemetry) as req:
            reply = await req.request("pricing.quote", Quote(sku="a", quantity=4), message_id="r-1")
            quoted = await peer.next_line()
            with pytest.raises(RemoteError) as failed:
                await req.request("pricing.fail", Quote(sku="a", quantity=1))
            await peer.next_line()
        async with ghttp.Requester(url + "/api", StrCodec(), PRICE) as text:
            with pytest.raises(RemoteError) as undecodable:
                await text.request("pricing.quote", "no json")
            refused = await peer.next_line()
        async with ghttp.Requester(url, QUOTE, PRICE) as lost:
            with pytest.raises(RemoteError) as unknown:
                await lost.request("pricing.quote", Quote(sku="a", quantity=1))
            await peer.next_line()

    assert reply == Price(sku="a", total=10.0)
    assert (quoted["method"], quoted["rawPath"], quoted["escapedAsGo"]) == (
        "POST",
        "/api/pricing.quote",
        True,
    )
    assert quoted["contentType"] == "application/json"
    assert quoted["messageId"] == "r-1"
    assert quoted["traceparentValid"]
    assert _sent_by(quoted["traceparent"], otel.span("send pricing.quote"))
    assert json.loads(quoted["body"]) == {"sku": "a", "quantity": 4}
    assert (failed.value.code, failed.value.remote_message) == (500, "internal server error")
    assert (refused["status"], refused["body"]) == (400, "no json")
    assert refused["contentType"] == "text/plain; charset=utf-8"
    assert (undecodable.value.code, undecodable.value.remote_message) == (400, "bad request")
    assert (unknown.value.code, unknown.value.remote_message) == (404, "404 page not found")


# ----------------------------------------------------------------------- curl


async def _curl(*args: str) -> tuple[int, str]:
    """Run curl; its answer's status and body."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    process = await asyncio.create_subprocess_exec(
        curl,
        "--silent",
        "--show-error",
        "--write-out",
        "\n%{http_code}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    body, status = out.decode().rsplit("\n", 1)
    return int(status), body


async def test_curl_posts_a_go_style_message(served: Serve, otel: Otel) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    inbox: Inbox[Order] = Inbox()
    sub = ghttp.Subscriber(CODEC, telemetry=otel.telemetry)
    await sub.start(ODD_SUBJECT, inbox)
    async with served(sub.app) as url:
        target = f"{url}/{ODD_ESCAPED}"
        posted = await _curl(
            "--header",
            "Content-Type: application/json",
            "--header",
            f"Traceparent: 00-{TRACE_ID}-{SPAN_IDS[0]}-01",
            "--header",
            "X-Message-Id: c-1",
            "--header",
            "X-Goflux-Tenant-Id: acme",
            "--header",
            "X-Goflux-Tenant-Id: beta",
            "--data-binary",
            _json(order(1)),
            target,
        )
        undecodable = await _curl("--data-binary", "{", target)
        got = await _curl(target)
    assert posted == (204, "")
    assert undecodable[0] == 400
    assert undecodable[1].startswith("bad request")
    assert got == (405, f"method GET not allowed: POST a message to /{ODD_SUBJECT}\n")
    [msg] = inbox.messages
    assert (msg.subject, msg.payload, msg.id) == (ODD_SUBJECT, order(1), "c-1")
    assert msg.headers.get_all("Tenant-Id") == ["acme", "beta"]
    span = _consumer_span(otel, "c-1")
    assert span.parent is not None
    assert (span.parent.trace_id, span.parent.span_id) == (
        int(TRACE_ID, 16),
        int(SPAN_IDS[0], 16),
    )
