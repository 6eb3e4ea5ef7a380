"""Core NATS transport against a real nats-server: request/reply, queue groups, limits."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import weakref
from collections import Counter

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from goflux import (
    BytesCodec,
    DecodeError,
    JsonCodec,
    Message,
    NoResponders,
    PublishError,
    RemoteError,
    RequestTimeout,
    SubscribeError,
)
from goflux.transports import nats as gnats
from tests.conftest import Otel
from tests.helpers import (
    Box,
    BoxCodec,
    Inbox,
    held_only_by,
    one_at_a_time_until_idle,
    publish_large,
)
from tests.models import PRICE, QUOTE, Order, Price, Quote, order, price


async def test_typed_request_reply_round_trip(nc: Client) -> None:
    async with gnats.Responder(nc, QUOTE, PRICE) as responder:
        serving = await responder.start("pricing.quote", price)
        requester = gnats.Requester(nc, QUOTE, PRICE, timeout=5)
        reply = await requester.request("pricing.quote", Quote(sku="apple", quantity=4))
        assert reply == Price(sku="apple", total=10.0)
        assert serving.answered == 1


async def test_remote_failures_raise_at_once_with_the_remote_message(nc: Client) -> None:
    async with gnats.Responder(nc, QUOTE, PRICE) as responder:
        await responder.start("pricing.quote", price)
        requester = gnats.Requester(nc, QUOTE, PRICE, timeout=10)
        began = time.perf_counter()
        with pytest.raises(RemoteError, match="negative quantity -1") as info:
            await requester.request("pricing.quote", Quote(sku="apple", quantity=-1))
        assert time.perf_counter() - began < 1.0  # not after the 10 s timeout
        assert info.value.code == 500
        assert info.value.remote_message == "ValueError: negative quantity -1"
        with pytest.raises(RemoteError) as info:
            await requester.request("pricing.quote", Quote(sku="ghost", quantity=1))
        assert (info.value.code, info.value.remote_message) == (404, "unknown sku ghost")


async def test_no_responders_is_reported_at_once(nc: Client) -> None:
    requester = gnats.Requester(nc, QUOTE, PRICE, timeout=10)
    began = time.perf_counter()
    with pytest.raises(NoResponders, match=r"no responder serves 'pricing\.nobody'"):
        await requester.request("pricing.nobody", Quote(sku="a", quantity=1))
    assert time.perf_counter() - began < 1.0


async def test_a_slow_responder_times_out_at_the_configured_timeout(nc: Client) -> None:
    release = asyncio.Event()

    async def slow(quote: Quote) -> Price:
        await release.wait()
        return Price(sku=quote.sku, total=0)

    async with gnats.Responder(nc, QUOTE, PRICE) as responder:
        await responder.start("pricing.slow", slow)
        requester = gnats.Requester(nc, QUOTE, PRICE, timeout=10)
        began = time.perf_counter()
        with pytest.raises(RequestTimeout) as info:
            await requester.request("pricing.slow", Quote(sku="a", quantity=1), timeout=0.3)
        elapsed = time.perf_counter() - began
        release.set()
    assert 0.3 <= elapsed < 1.0
    assert info.value.timeout == 0.3
    assert isinstance(info.value, TimeoutError)


async def test_undecodable_requests_get_an_error_reply(nc: Client) -> None:
    async with gnats.Responder(nc, QUOTE, PRICE) as responder:
        serving = await responder.start("pricing.quote", price)
        reply = await nc.request("pricing.quote", b'{"sku": 1', timeout=5)
        headers = reply.headers or {}
        assert headers[gnats.ERROR_CODE_HEADER] == "400"
        assert headers[gnats.ERROR_HEADER].startswith("bad request: cannot decode 9 bytes as Quote")
        assert reply.data == b""
        await nc.publish("pricing.quote", b"{}")  # no reply subject: nothing to answer
        await nc.flush()
    assert (serving.failed, serving.unanswerable) == (1, 1)


async def test_two_responders_in_a_queue_group_answer_each_request_once(nc: Client) -> None:
    answered: Counter[str] = Counter()

    def member(name: str):  # type: ignore[no-untyped-def]
        async def handle(quote: Quote) -> Price:
            answered[name] += 1
            return Price(sku=f"{quote.sku}@{name}", total=0)

        return handle

    async with (
        gnats.Responder(nc, QUOTE, PRICE, queue="pricing") as first,
        gnats.Responder(nc, QUOTE, PRICE, queue="pricing") as second,
    ):
        await first.start("pricing.q", member("a"))
        await second.start("pricing.q", member("b"))
        requester = gnats.Requester(nc, QUOTE, PRICE)
        replies = await asyncio.gather(
            *(requester.request("pricing.q", Quote(sku=f"s{n}", quantity=1)) for n in range(200))
        )
    assert sum(answered.values()) == 200  # each request answered exactly once
    assert set(answered) == {"a", "b"}
    assert sorted(r.sku.split("@")[0] for r in replies) == sorted(f"s{n}" for n in range(200))


async def test_raw_nats_py_clients_interoperate_both_ways(nc: Client) -> None:
    # A raw requester talks to our responder: bare JSON both ways.
    async with gnats.Responder(nc, QUOTE, PRICE) as responder:
        await responder.start("pricing.quote", price)
        reply = await nc.request("pricing.quote", b'{"sku":"pear","quantity":2}', timeout=5)
        assert json.loads(reply.data) == {"sku": "pear", "total": 5.0}
        assert not reply.headers

    # Our requester talks to a raw responder.
    async def raw_responder(msg: Msg) -> None:
        quote = json.loads(msg.data)
        await msg.respond(json.dumps({"sku": quote["sku"], "total": 1.25}).encode())

    await nc.subscribe("pricing.raw", cb=raw_responder)
    await nc.flush()
    answer = await gnats.Requester(nc, QUOTE, PRICE).request(
        "pricing.raw", Quote(sku="x", quantity=1)
    )
    assert answer == Price(sku="x", total=1.25)


async def test_the_responder_span_is_a_child_of_the_requester_span(nc: Client, otel: Otel) -> None:
    async with gnats.Responder(nc, QUOTE, PRICE, telemetry=otel.telemetry) as responder:
        await responder.start("pricing.quote", price)
        requester = gnats.Requester(nc, QUOTE, PRICE, telemetry=otel.telemetry)
        await requester.request("pricing.quote", Quote(sku="a", quantity=1), message_id="q-1")
    client = otel.span("send pricing.quote")
    server = otel.span("process pricing.quote")
    assert client.kind.name == "CLIENT"
    assert server.kind.name == "SERVER"
    assert client.context is not None
    assert server.parent is not None
    assert (server.parent.trace_id, server.parent.span_id) == (
        client.context.trace_id,
        client.context.span_id,
    )
    assert not server.links
    assert dict(server.attributes or {})["messaging.message.id"] == "q-1"


async def test_the_message_id_comes_back_on_the_reply(nc: Client) -> None:
    async with gnats.Responder(nc, QUOTE, PRICE) as responder:
        await responder.start("pricing.quote", price)
        reply = await nc.request(
            "pricing.quote", b'{"sku":"a","quantity":1}', headers={"X-Message-ID": "q-9"}
        )
    assert (reply.headers or {})["X-Message-ID"] == "q-9"


async def test_drain_handles_what_was_already_delivered(nc: Client) -> None:
    release = asyncio.Event()
    handled: list[str] = []

    async def gated(msg: Message[Order]) -> None:
        await release.wait()
        handled.append(msg.payload.id)

    subscription = await gnats.Subscriber(nc, JsonCodec(Order)).start("orders.d", gated)
    publisher = gnats.Publisher(nc, JsonCodec(Order))
    for n in range(20):
        await publisher.publish("orders.d", order(n))
    await nc.flush()  # the server has processed them, and sent them to us before its PONG
    stopping = asyncio.create_task(subscription.stop(timeout=10))
    release.set()
    await stopping
    assert handled == [f"o-{n}" for n in range(20)]


async def test_a_slow_consumer_drops_are_counted_and_logged(
    nc: Client, caplog: pytest.LogCaptureFixture
) -> None:
    release = asyncio.Event()
    handled: list[int] = []
    first = asyncio.Event()

    async def stuck(msg: Message[bytes]) -> None:
        first.set()
        await release.wait()
        handled.append(int(msg.payload))

    subscriber = gnats.Subscriber(nc, BytesCodec(), pending_messages=5)
    subscription = await subscriber.start("load", stuck)
    for n in range(50):
        await nc.publish("load", str(n).encode())
        if n == 0:
            await first.wait()  # the handler holds message 0; 5 fit in the queue
    await nc.flush()
    with caplog.at_level(logging.WARNING, logger="goflux.transports.nats"):
        release.set()
        await subscription.stop()
    assert handled[:6] == [0, 1, 2, 3, 4, 5]
    assert subscription.dropped == 50 - len(handled)
    assert subscription.dropped > 0
    assert "slow consumer on 'load'" in caplog.text


async def test_undecodable_messages_are_counted_and_logged(
    nc: Client, caplog: pytest.LogCaptureFixture
) -> None:
    inbox: Inbox[Order] = Inbox()
    subscription = await gnats.Subscriber(nc, JsonCodec(Order)).start("orders.u", inbox)
    with caplog.at_level(logging.ERROR, logger="goflux.transports.nats"):
        await nc.publish("orders.u", b"{broken")
        await gnats.Publisher(nc, JsonCodec(Order)).publish("orders.u", order(1))
        await inbox.wait_for(1)
        await subscription.stop()
    assert subscription.undecodable == 1
    assert (
        "undecodable message on 'orders.u' skipped: cannot decode 7 bytes as Order" in caplog.text
    )


async def test_oversized_payloads_and_closed_connections_are_clear_errors(nc: Client) -> None:
    publisher = gnats.Publisher(nc, BytesCodec())
    with pytest.raises(PublishError, match=r"exceed the server's max_payload of \d+ bytes"):
        await publisher.publish("big", b"x" * (nc.max_payload + 1))
    subscription = await gnats.Subscriber(nc, BytesCodec()).start("x", Inbox[bytes]())
    await nc.close()
    with pytest.raises(SubscribeError, match="connection closed"):
        async with asyncio.timeout(10):
            await subscription.wait()
    with pytest.raises(PublishError, match="the connection is closed") as closed:
        await publisher.publish("x", b"1")
    assert closed.value.permanent


async def test_a_reply_the_codec_cannot_read_is_a_decode_error(nc: Client) -> None:
    async def raw(msg: Msg) -> None:
        await msg.respond(b"not json")

    await nc.subscribe("pricing.broken", cb=raw)
    await nc.flush()
    with pytest.raises(DecodeError, match="as Price"):
        await gnats.Requester(nc, QUOTE, PRICE).request(
            "pricing.broken", Quote(sku="a", quantity=1)
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queue": "has space"}, "queue group"),
        ({"concurrency": 0}, "concurrency"),
        ({"pending_messages": 0}, "pending limits"),
        ({"drain_timeout": -1}, "drain_timeout"),
    ],
)
async def test_invalid_options(nc: Client, options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        gnats.Subscriber(nc, BytesCodec(), **options)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        gnats.Responder(nc, BytesCodec(), BytesCodec(), **options)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        gnats.Requester(nc, BytesCodec(), BytesCodec(), timeout=0)


@pytest.mark.parametrize("path", ["inline", "concurrent", "telemetry", "failed", "responder"])
async def test_an_idle_subscription_holds_none_of_the_messages_it_handled(
    nc: Client, path: str, request: pytest.FixtureRequest
) -> None:
    """Large messages are not kept alive (bytes, headers or payload) once handled.

    nats-py's dispatch task keeps the last message it called back with until the
    next arrives; with nothing more coming, a subscription would hold its bytes.
    """
    payloads: list[weakref.ref[Box]] = []
    received: list[object] = []

    async def handle(msg: Message[Box]) -> None:
        payloads.append(weakref.ref(msg.payload))
        received.extend((msg.data, msg._wire, msg.id))
        if path == "failed":
            raise ValueError("not this one")

    async def answer(box: Box) -> Box:
        payloads.append(weakref.ref(box))
        received.append(box.data)
        return Box(b"ok")

    telemetry = request.getfixturevalue("otel").telemetry if path == "telemetry" else None
    if path == "failed":  # (pytest keeps what is logged: a traceback holds the message)
        request.getfixturevalue("caplog").set_level(logging.CRITICAL, logger="goflux")
    closer: gnats.Responder[Box, Box] | gnats.Subscriber[Box]
    if path == "responder":
        closer = responder = gnats.Responder(nc, BoxCodec(), BoxCodec())
        serving = await responder.start("big.ask", answer)
        requester = gnats.Requester(nc, BoxCodec(), BoxCodec(), timeout=5)

        async def send(n: int) -> None:
            await requester.request("big.ask", Box(b"%d" % n * 100_000), message_id=str(n) * 10)

        def idle() -> bool:
            return serving.answered == len(payloads) and not serving._tasks

    else:
        concurrency = 2 if path == "concurrent" else 1
        closer = subscriber = gnats.Subscriber(
            nc, BoxCodec(), concurrency=concurrency, telemetry=telemetry
        )
        subscription = await subscriber.start("big.>", handle)
        publisher = gnats.Publisher(nc, BoxCodec())

        send = functools.partial(publish_large, publisher, "big.one")

        def idle() -> bool:
            settled = subscription.handled + subscription.failed
            return settled == len(payloads) and not subscription._tasks

    try:
        await one_at_a_time_until_idle(idle, send, lambda: len(payloads), 3)
        assert [ref() for ref in payloads] == [None, None, None]
        held_only_by(received)  # the bytes, header mappings and IDs: by this test alone
    finally:
        await closer.close()


async def test_an_idle_requester_holds_none_of_the_replies_it_read(nc: Client) -> None:
    # nats-py's reply task keeps the last reply it handed over until the next.
    async def answer(box: Box) -> Box:
        return Box(box.data * 200_000)

    replies: list[weakref.ref[Box]] = []
    received: list[object] = []
    async with gnats.Responder(nc, BoxCodec(), BoxCodec()) as responder:
        await responder.start("big.ask", answer)
        requester = gnats.Requester(nc, BoxCodec(), BoxCodec(), timeout=5)
        for n in range(3):
            reply = await requester.request("big.ask", Box(b"%d" % n))
            replies.append(weakref.ref(reply))
            received.append(reply.data)
            del reply
        assert [ref() for ref in replies] == [None, None, None]
        held_only_by(received)  # the bytes of the replies: by this test alone
