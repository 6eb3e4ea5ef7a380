"""The HTTP subscriber against a real uvicorn server and a real httpx client."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from goflux import (
    BytesCodec,
    Headers,
    InvalidHeader,
    JsonCodec,
    Message,
    NonRetryable,
    SubscribeError,
)
from goflux.transports import http as ghttp
from tests.conftest import Otel
from tests.helpers import Inbox
from tests.models import Order, order
from tests.transports.http.conftest import Serve

CODEC = JsonCodec(Order)
BODY = order(1).model_dump_json(by_alias=True).encode()


async def test_a_publish_reaches_the_handler_typed_with_id_and_headers(served: Serve) -> None:
    sub = ghttp.Subscriber(CODEC, base_path="/hooks")
    inbox: Inbox[Order] = Inbox()
    await sub.start("orders.created", inbox)
    async with served(sub.app) as url, ghttp.Publisher(url + "/hooks", CODEC) as pub:
        await pub.publish(
            "orders.created",
            order(1),
            headers=Headers([("tenant-id", "acme"), ("tenant-id", "beta"), ("Region", "eu")]),
            message_id="m-1",
        )
    [msg] = inbox.messages
    assert msg.payload == order(1)
    assert msg.subject == "orders.created"
    assert msg.id == "m-1"
    # HTTP names carry no case: they arrive in Go's canonical form, as Go reads them.
    assert list(msg.headers.items()) == [("Tenant-Id", "acme"), ("Region", "eu")]
    assert msg.headers.get_all("tenant-id") == ["acme", "beta"]
    assert msg.data == BODY
    assert msg.wire_headers["content-type"] == "application/json"
    assert msg.wire_headers.get_all("x-goflux-tenant-id") == ["acme", "beta"]
    assert msg.acknowledgeable
    assert msg.delivery is None


async def test_each_answer_of_the_subscriber(served: Serve) -> None:
    async def settle(msg: Message[Order]) -> None:
        match msg.payload.id:
            case "o-1":
                return
            case "o-2":
                raise RuntimeError("boom")
            case "o-3":
                raise NonRetryable("never valid")
            case "o-4":
                await msg.term("duplicate order")
            case "o-5":
                await msg.nak(2.5)
            case "o-6":
                await msg.nak()
            case "o-7":
                await msg.ack()
                raise RuntimeError("after the ack")

    sub = ghttp.Subscriber(CODEC, max_body_size=4096)
    await sub.start("orders.x", settle)
    async with served(sub.app) as url, httpx.AsyncClient(base_url=url) as client:

        async def post(n: int) -> httpx.Response:
            return await client.post("/orders.x", content=order(n).model_dump_json(by_alias=True))

        assert (await post(1)).status_code == 204
        failed = await post(2)
        assert (failed.status_code, failed.text) == (500, "internal server error\n")
        assert failed.headers["content-type"] == "text/plain; charset=utf-8"
        assert failed.headers["x-content-type-options"] == "nosniff"
        non_retryable = await post(3)
        assert non_retryable.status_code == 422
        # The exception's text is logged, not sent: only the handler's own reasons are.
        assert non_retryable.text == "not processable (non-retryable failure)\n"
        terminated = await post(4)
        assert (terminated.status_code, terminated.text) == (422, "duplicate order\n")
        delayed = await post(5)
        assert (delayed.status_code, delayed.headers["retry-after"]) == (503, "3")
        at_once = await post(6)
        assert at_once.status_code == 503
        assert "retry-after" not in at_once.headers
        assert (await post(7)).status_code == 204  # settled before it raised: the ack holds

        bad = await client.post("/orders.x", content=b'{"id": 1}')
        assert bad.status_code == 400
        assert bad.text.startswith("bad request: ")
        assert "Order" in bad.text

        got = await client.get("/orders.x")
        assert (got.status_code, got.headers["allow"]) == (405, "POST")
        assert (await client.put("/orders.x", content=BODY)).status_code == 405

        assert (await client.post("/orders.y", content=BODY)).status_code == 404
        assert (await client.post("/orders..x", content=BODY)).status_code == 404
        assert (await client.post("/", content=BODY)).status_code == 404

        too_large = await client.post("/orders.x", content=b" " * 4097)
        assert too_large.status_code == 413
        assert (await post(1)).status_code == 204  # the pool recovers from the closed one
    subscription = next(iter(sub._subscriptions))
    assert (subscription.handled, subscription.failed, subscription.undecodable) == (5, 3, 1)


async def _status_line(url: str, request: bytes) -> bytes:
    """Send raw bytes of a request (left unfinished) and read the answer's status line."""
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(10):
            return await reader.readline()
    finally:
        writer.close()


async def test_a_body_over_the_limit_is_refused_before_it_is_read_whole(served: Serve) -> None:
    inbox: Inbox[bytes] = Inbox()
    sub = ghttp.Subscriber(BytesCodec(), max_body_size=1024)
    await sub.start("blobs", inbox)
    async with served(sub.app) as url:
        # Declared too large: answered before a byte of the body is sent.
        declared = await _status_line(
            url, b"POST /blobs HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n"
        )
        # Undeclared (chunked): answered once it passes the limit, the rest never sent.
        chunked = await _status_line(
            url,
            b"POST /blobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"800\r\n"
            + b"x" * 2048
            + b"\r\n",
        )
        async with ghttp.Publisher(url, BytesCodec()) as pub:
            with pytest.raises(ghttp.StatusError) as refused:
                await pub.publish("blobs", b"x" * 2000)
            # The sender writes its whole body before it reads: the server discards the
            # rest, so the answer arrives (not a reset connection), on a connection kept.
            with pytest.raises(ghttp.StatusError) as far_too_large:
                await pub.publish("blobs", b"x" * (3 << 20))
            await pub.publish("blobs", b"x" * 1024)
    assert declared.startswith(b"HTTP/1.1 413"), declared
    assert chunked.startswith(b"HTTP/1.1 413"), chunked
    assert refused.value.status == 413
    assert refused.value.permanent
    assert "exceeds 1024 bytes" in str(refused.value)
    assert far_too_large.value.status == 413
    assert [len(m.payload) for m in inbox.messages] == [1024]


async def test_a_slow_body_is_answered_408_and_does_not_reach_the_handler(served: Serve) -> None:
    inbox: Inbox[Order] = Inbox()
    sub = ghttp.Subscriber(CODEC, body_timeout=0.3)
    await sub.start("orders.slow", inbox)
    async with served(sub.app) as url:
        status_line = await _status_line(
            url, b"POST /orders.slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + BODY[:10]
        )
    assert status_line.startswith(b"HTTP/1.1 408"), status_line
    assert not inbox.messages


async def test_wildcards_serve_the_most_specific_route(served: Serve) -> None:
    exact: Inbox[Order] = Inbox()
    star: Inbox[Order] = Inbox()
    tail: Inbox[Order] = Inbox()
    sub = ghttp.Subscriber(CODEC)
    await sub.start("orders.>", tail)
    await sub.start("orders.*", star)
    await sub.start("orders.vip", exact)
    async with served(sub.app) as url, ghttp.Publisher(url, CODEC) as pub:
        for subject in ("orders.eu", "orders.eu.de", "orders.vip"):
            await pub.publish(subject, order())
        with pytest.raises(ghttp.StatusError) as refused:
            await pub.publish("invoices.eu", order())
    assert refused.value.status == 404
    assert refused.value.permanent
    assert [m.subject for m in star.messages] == ["orders.eu"]
    assert [m.subject for m in tail.messages] == ["orders.eu.de"]
    assert [m.subject for m in exact.messages] == ["orders.vip"]


async def test_subjects_are_escaped_as_go_escapes_a_path_segment(served: Serve) -> None:
    inbox: Inbox[Order] = Inbox()
    sub = ghttp.Subscriber(CODEC)
    await sub.start("a/b?c#d%e$f", inbox)  # valid NATS subject characters
    async with served(sub.app) as url, ghttp.Publisher(url, CODEC) as pub:
        await pub.publish("a/b?c#d%e$f", order())
        assert pub._poster.url("a/b?c#d%e$f") == f"{url}/a%2Fb%3Fc%23d%25e$f"
    assert [m.subject for m in inbox.messages] == ["a/b?c#d%e$f"]


async def test_stop_drains_in_flight_requests_then_answers_503(served: Serve) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(msg: Message[Order]) -> None:
        started.set()
        await release.wait()

    sub = ghttp.Subscriber(CODEC)
    subscription = await sub.start("orders.drain", slow)
    async with served(sub.app) as url, httpx.AsyncClient(base_url=url) as client:
        in_flight = asyncio.create_task(client.post("/orders.drain", content=BODY))
        await started.wait()
        stopping = asyncio.create_task(subscription.stop(timeout=10))
        late = await client.post("/orders.drain", content=BODY)
        assert (late.status_code, late.headers["retry-after"]) == (503, "1")
        assert late.headers["connection"] == "close"  # kept-alive clients go elsewhere
        assert not stopping.done()
        release.set()
        await stopping
        assert (await in_flight).status_code == 204
        assert not subscription.running
        assert (await client.post("/orders.drain", content=BODY)).status_code == 503


async def test_the_drain_deadline_cancels_handlers_and_answers_503(served: Serve) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def stuck(msg: Message[Order]) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    sub = ghttp.Subscriber(CODEC, drain_timeout=0.2)
    subscription = await sub.start("orders.stuck", stuck)
    async with served(sub.app) as url, httpx.AsyncClient(base_url=url) as client:
        in_flight = asyncio.create_task(client.post("/orders.stuck", content=BODY))
        await started.wait()
        await subscription.stop()
        assert cancelled.is_set()
        answer = await in_flight
        assert answer.status_code == 503
        assert "stopped" in answer.text


async def test_a_route_taken_is_refused_and_a_stopped_one_can_be_served_again(
    served: Serve,
) -> None:
    router = ghttp.Router()
    first = ghttp.Subscriber(CODEC, router=router)
    second = ghttp.Subscriber(CODEC, router=router)
    old: Inbox[Order] = Inbox()
    new: Inbox[Order] = Inbox()
    subscription = await first.start("orders.x", old)
    with pytest.raises(SubscribeError, match="already served"):
        await second.start("orders.x", new)
    responder = ghttp.Responder(CODEC, CODEC, router=router)
    with pytest.raises(SubscribeError, match="already served"):
        await responder.start("orders.x", _echo)
    await subscription.stop()
    await second.start("orders.x", new)
    async with served(router) as url, ghttp.Publisher(url, CODEC) as pub:
        await pub.publish("orders.x", order())
    assert (len(old.messages), len(new.messages)) == (0, 1)


async def _echo(value: Order) -> Order:
    return value


async def test_streams_hold_the_request_until_the_message_is_settled(served: Serve) -> None:
    sub = ghttp.Subscriber(CODEC)
    async with served(sub.app) as url, ghttp.Publisher(url, CODEC) as pub:
        async with sub.stream("orders.streamed") as stream:
            publishing = asyncio.create_task(pub.publish("orders.streamed", order(1)))
            async for msg in stream:
                await asyncio.sleep(0)
                assert not publishing.done(), "the answer came before the message was settled"
                await msg.nak(1)
                break
        with pytest.raises(ghttp.StatusError) as given_back:
            await publishing
    assert (given_back.value.status, given_back.value.retry_after) == (503, 1.0)
    assert not given_back.value.permanent


async def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="base_path"):
        ghttp.Subscriber(CODEC, base_path="hooks")
    with pytest.raises(ValueError, match="base_path"):
        ghttp.Subscriber(CODEC, base_path="/a?b")
    with pytest.raises(ValueError, match="max_body_size"):
        ghttp.Subscriber(CODEC, max_body_size=-1)
    with pytest.raises(ValueError, match="body_timeout"):
        ghttp.Responder(CODEC, CODEC, body_timeout=0)
    assert ghttp.Subscriber(CODEC, base_path="/hooks/").base_path == "/hooks"


async def test_nothing_in_a_header_value_becomes_a_goflux_header(served: Serve) -> None:
    inbox: Inbox[Order] = Inbox()
    sub = ghttp.Subscriber(CODEC)
    await sub.start("orders.h", inbox)
    async with served(sub.app) as url, ghttp.Publisher(url, CODEC) as pub:
        for forged in ("a\r\nX-Goflux-Admin: 1", "a\nX-Goflux-Admin: 1", "a\x00b"):
            with pytest.raises(InvalidHeader):
                await pub.publish("orders.h", order(), headers={"Note": forged})
        with pytest.raises(InvalidHeader):
            await pub.publish("orders.h", order(), headers={"Bad Name": "x"})
        with pytest.raises(InvalidHeader):
            await pub.publish("orders.h", order(), message_id="m\r\nX-Goflux-Admin: 1")
        await pub.publish("orders.h", order(), headers={"Note": "X-Goflux-Admin: 1"})
        async with httpx.AsyncClient(base_url=url) as client:
            answer = await client.post(
                "/orders.h", content=BODY, headers={"X-Goflux-": "x", "X-Goflux-Ok": "1"}
            )
    assert answer.status_code == 204
    first, second = inbox.messages
    assert dict(first.headers) == {"Note": "X-Goflux-Admin: 1"}
    assert dict(second.headers) == {"Ok": "1"}  # a bare prefix names no header


async def test_a_handler_failure_is_logged_with_its_traceback(
    served: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    async def boom(msg: Message[Order]) -> None:
        raise RuntimeError("kaput")

    sub = ghttp.Subscriber(CODEC)
    await sub.start("orders.boom", boom)
    with caplog.at_level(logging.ERROR, "goflux.transports.http"):
        async with served(sub.app) as url, ghttp.Publisher(url, CODEC) as pub:
            with pytest.raises(ghttp.StatusError, match="answered 500: internal server error"):
                await pub.publish("orders.boom", order())
    [record] = [r for r in caplog.records if "kaput" in r.getMessage()]
    assert record.exc_info is not None


async def test_a_stopped_route_answers_503_only_where_no_running_route_serves(
    served: Serve,
) -> None:
    exact: Inbox[Order] = Inbox()
    tail: Inbox[Order] = Inbox()
    sub = ghttp.Subscriber(CODEC)
    stopped = await sub.start("orders.created", exact)
    stopped_star = await sub.start("orders.*", exact)
    await sub.start("orders.>", tail)
    await stopped.stop()
    await stopped_star.stop()
    only = ghttp.Subscriber(CODEC)
    gone = await only.start("invoices.created", Inbox[Order]())
    await gone.stop()
    # Merged routers: an exact path in a later router wins over an earlier wildcard.
    early, late = ghttp.Router(), ghttp.Router()
    vip: Inbox[Order] = Inbox()
    await ghttp.Subscriber(CODEC, router=early).start("vip.>", Inbox[Order]())
    await ghttp.Subscriber(CODEC, router=late).start("vip.created", vip)
    merged = ghttp.Router.merged(sub.app, only.app, early, late)
    async with served(merged) as url, ghttp.Publisher(url, CODEC) as pub:
        await pub.publish("orders.created", order())  # the running wildcard takes it
        await pub.publish("orders.updated", order())
        with pytest.raises(ghttp.StatusError) as stopping:
            await pub.publish("invoices.created", order())
        await pub.publish("vip.created", order())
    assert [m.subject for m in tail.messages] == ["orders.created", "orders.updated"]
    assert not exact.messages
    assert stopping.value.status == 503
    assert len(vip.messages) == 1


async def test_an_empty_message_id_is_none_as_go_reads_it(served: Serve) -> None:
    inbox: Inbox[Order] = Inbox()
    sub = ghttp.Subscriber(CODEC)
    await sub.start("orders.id", inbox)
    async with served(sub.app) as url, httpx.AsyncClient(base_url=url) as client:
        answer = await client.post("/orders.id", content=BODY, headers={"X-Message-ID": ""})
    assert answer.status_code == 204
    assert inbox.messages[0].id is None


async def test_max_concurrency_sheds_load_with_503(served: Serve) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(msg: Message[Order]) -> None:
        started.set()
        await release.wait()

    sub = ghttp.Subscriber(CODEC, max_concurrency=1)
    await sub.start("orders.busy", slow)
    async with served(sub.app) as url, httpx.AsyncClient(base_url=url) as client:
        first = asyncio.create_task(client.post("/orders.busy", content=BODY))
        await started.wait()
        busy = await client.post("/orders.busy", content=BODY)
        release.set()
        assert (await first).status_code == 204
        assert (busy.status_code, busy.headers["retry-after"]) == (503, "1")
        assert "busy" in busy.text
        assert (await client.post("/orders.busy", content=BODY)).status_code == 204
    with pytest.raises(ValueError, match="max_concurrency"):
        ghttp.Subscriber(CODEC, max_concurrency=0)


async def test_a_chunked_body_over_the_limit_closes_the_connection(served: Serve) -> None:
    sub = ghttp.Subscriber(BytesCodec(), max_body_size=16)
    await sub.start("blobs", Inbox[bytes]())
    async with served(sub.app) as url:
        port = int(url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /blobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"20\r\n" + b"x" * 32 + b"\r\n"
        )
        await writer.drain()
        async with asyncio.timeout(10):
            answer = await reader.read()  # to the end: the server closes the connection
        writer.close()
    assert answer.startswith(b"HTTP/1.1 413")
    assert b"connection: close" in answer.lower()


async def test_a_mounted_app_names_the_whole_path(served: Serve, otel: Otel) -> None:
    sub = ghttp.Subscriber(CODEC, telemetry=otel.telemetry)
    await sub.start("orders.created", Inbox[Order]())
    app = Starlette(routes=[Mount("/hooks", app=sub.app)])
    async with served(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/hooks/orders.created", content=BODY)).status_code == 204
        missing = await client.post("/hooks/nope", content=BODY)
    assert (missing.status_code, missing.text) == (404, "no route for /hooks/nope\n")
    attrs = dict(otel.span("process orders.created").attributes or {})
    assert attrs["url.path"] == "/hooks/orders.created"
