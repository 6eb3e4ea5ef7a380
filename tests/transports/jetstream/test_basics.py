"""JetStream transport against a real nats-server: wire format, acks, bounds, faults."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from unittest import mock

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry.sdk.metrics.export import Sum

from goflux import (
    AlreadySettled,
    DecodeError,
    InvalidSubject,
    JsonCodec,
    Message,
    PublishError,
    SettlementError,
    SubscribeError,
)
from goflux.testing import NatsServer
from goflux.transports import jetstream
from tests.conftest import STREAM, Otel
from tests.helpers import (
    Box,
    BoxCodec,
    Inbox,
    drained,
    held_only_by,
    one_at_a_time_until_idle,
    publish_large,
    settle_loop,
)
from tests.models import Order, order

CODEC = JsonCodec(Order)


async def consumer_state(js: JetStreamContext, consumer: str) -> tuple[int, int, int]:
    """(num_ack_pending, num_pending, num_redelivered) as the server sees them."""
    info = await js.consumer_info(STREAM, consumer)
    return info.num_ack_pending or 0, info.num_pending or 0, info.num_redelivered or 0


async def settled_state(
    js: JetStreamContext, consumer: str, expected: tuple[int, int, int]
) -> None:
    """Wait until the server reflects the acks sent (they are fire-and-forget)."""
    async with asyncio.timeout(10):
        while await consumer_state(js, consumer) != expected:
            await js._nc.flush()


async def counted_every_ack(js: JetStreamContext, consumer: str, acked: int) -> int:
    """The server's unacked count once it has processed ``acked`` acks, all that were sent.

    The server queues acks and serves pulls on separate paths, so a pull sent after an ack
    can be answered before the ack is counted: until every ack is counted, the unacked
    count is one ack too high. Delivered minus unacked is what it has counted. (A deadline
    looked at in the loop: on Python 3.11 nats-py's request may swallow a cancellation.)
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        info = await js.consumer_info(STREAM, consumer, timeout=5)
        ack_pending = info.num_ack_pending or 0
        delivered = (info.delivered.consumer_seq if info.delivered else 0) or 0
        if delivered - ack_pending >= acked:
            return ack_pending
        assert loop.time() < deadline, f"{delivered - ack_pending} of {acked} acks counted"


# ---------------------------------------------------------------- wire format


async def test_a_raw_nats_client_sees_the_goflux_wire_format(
    nc: Client, js: JetStreamContext, otel: Otel
) -> None:
    raw: asyncio.Queue[Msg] = asyncio.Queue()

    async def capture(msg: Msg) -> None:
        await raw.put(msg)

    await nc.subscribe("orders.>", cb=capture)
    await nc.flush()
    receipt = await jetstream.Publisher(js, CODEC, telemetry=otel.telemetry).publish(
        "orders.created", order(1), headers={"Tenant": "acme"}, message_id="order-1"
    )
    msg = await asyncio.wait_for(raw.get(), 10)
    assert msg.data == b'{"id":"o-1","customerId":"c-1","amount":11.0,"lines":[],"created":null}'
    headers = msg.headers or {}
    assert headers["X-Message-ID"] == "order-1"
    assert headers["Nats-Msg-Id"] == "order-1"
    assert headers["X-Goflux-Tenant"] == "acme"
    producer = otel.span("send orders.created").context
    assert producer is not None
    assert headers["traceparent"] == (  # lowercase key, W3C format, the producer span
        f"00-{producer.trace_id:032x}-{producer.span_id:016x}-{producer.trace_flags:02x}"
    )
    assert "Traceparent" not in headers
    assert (receipt.stream, receipt.sequence, receipt.duplicate) == (STREAM, 1, False)


async def test_repeated_user_headers_travel_as_repeated_lines(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    reader, writer = await asyncio.open_connection(nats_server.host, nats_server.port)
    await reader.readline()  # INFO
    writer.write(b'CONNECT {"headers":true,"verbose":false}\r\nSUB orders.tags 1\r\nPING\r\n')
    await writer.drain()
    assert (await reader.readline()).startswith(b"PONG")
    await jetstream.Publisher(js, CODEC).publish(
        "orders.tags", order(), headers=[("Tag", "a"), ("Tag", "b")]
    )
    head = await asyncio.wait_for(reader.readline(), 10)  # HMSG <subject> <sid> <hdr> <total>
    block = await reader.readexactly(int(head.split()[-1]) + 2)
    writer.close()
    lines = block.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert [line for line in lines if line.startswith(b"X-Goflux-Tag")] == [
        b"X-Goflux-Tag: a",
        b"X-Goflux-Tag: b",
    ]


async def test_a_raw_publish_with_traceparent_reaches_a_typed_handler_with_a_link(
    nc: Client, js: JetStreamContext, otel: Otel
) -> None:
    inbox: Inbox[Order] = Inbox()
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, telemetry=otel.telemetry)
    subscription = await sub.start("orders.raw", inbox)
    body = json.dumps({"id": "go-1", "customerId": "c", "amount": 2.5}).encode()
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    await nc.jetstream().publish("orders.raw", body, headers={"Traceparent": traceparent})
    [msg] = await inbox.wait_for(1)
    await subscription.stop()
    assert msg.payload == Order(id="go-1", customerId="c", amount=2.5)
    assert msg.headers == {}
    span = otel.span("process orders.raw")
    assert span.parent is None
    [link] = span.links
    assert f"{link.context.trace_id:032x}" == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert f"{link.context.span_id:016x}" == "00f067aa0ba902b7"
    attrs = dict(span.attributes or {})
    assert attrs["messaging.system"] == "nats-jetstream"
    assert attrs["messaging.consumer.group.name"] == subscription.consumer
    assert attrs["messaging.nats.stream"] == STREAM
    assert attrs["messaging.nats.stream.sequence"] == 1
    assert attrs["messaging.nats.delivery.count"] == 1


# ----------------------------------------------------------------- publishing


async def test_the_same_message_id_is_stored_once(js: JetStreamContext) -> None:
    pub = jetstream.Publisher(js, CODEC)
    first = await pub.publish("orders.created", order(), message_id="once")
    second = await pub.publish("orders.created", order(), message_id="once")
    assert (first.sequence, first.duplicate) == (1, False)
    assert (second.sequence, second.duplicate) == (1, True)
    assert type(first.duplicate) is bool
    assert (await js.stream_info(STREAM)).state.messages == 1


async def test_expectations_make_publishes_conditional(js: JetStreamContext) -> None:
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish("orders.a", order(1), message_id="m1")
    ok = await pub.publish("orders.a", order(2), expected_last_sequence=1, expected_stream=STREAM)
    assert ok.sequence == 2
    cases = [
        ({"expected_last_sequence": 1}, "last_sequence"),
        ({"expected_last_subject_sequence": 1}, "last_sequence"),
        ({"expected_last_message_id": "m1"}, "last_message_id"),
        ({"expected_stream": "ELSEWHERE"}, "stream"),
    ]
    for options, expectation in cases:
        with pytest.raises(jetstream.ExpectationFailed, match="nothing stored") as info:
            await pub.publish("orders.a", order(3), **options)  # type: ignore[arg-type]
        assert info.value.expectation == expectation
        assert not info.value.may_be_stored
    assert (await js.stream_info(STREAM)).state.messages == 2


async def test_a_publish_without_a_stream_or_too_slow_is_a_clear_error(
    js: JetStreamContext,
) -> None:
    pub = jetstream.Publisher(js, CODEC)
    with pytest.raises(PublishError, match="no stream answered") as info:
        await pub.publish("nowhere.x", order())
    assert not info.value.may_be_stored
    # A timeout does not mean "not stored": the server may already have the message.
    with pytest.raises(PublishError, match="may still have been stored") as info:
        await pub.publish("orders.slow", order(), message_id="slow-1", timeout=1e-6)
    assert info.value.may_be_stored
    retry = await pub.publish("orders.slow", order(), message_id="slow-1")
    assert (await js.stream_info(STREAM)).state.messages == 1
    assert retry.sequence == 1


async def test_publish_many_keeps_order_and_reports_each_outcome(js: JetStreamContext) -> None:
    pub = jetstream.Publisher(js, CODEC)
    outgoing = [
        jetstream.Outgoing(f"orders.{n % 3}", order(n), message_id=f"m{n}") for n in range(500)
    ]
    receipts = await pub.publish_many(outgoing, window=32)
    assert [r.sequence for r in receipts] == list(range(1, 501))
    again = await pub.publish_many(outgoing[:10], window=4)
    assert all(r.duplicate for r in again)
    mixed = [
        jetstream.Outgoing("orders.ok", order(1)),
        jetstream.Outgoing("nowhere.x", order(2)),
        jetstream.Outgoing("orders.ok", order(3)),
    ]
    results = await pub.publish_many(mixed, return_exceptions=True)
    assert isinstance(results[1], PublishError)
    assert [r.sequence for r in (results[0], results[2])] == [501, 502]  # type: ignore[union-attr]
    with pytest.raises(PublishError, match="no stream answered"):
        await pub.publish_many(mixed)


async def test_publish_many_accepts_async_iterators_and_stops_at_bad_input(
    js: JetStreamContext,
) -> None:
    pub = jetstream.Publisher(js, CODEC)

    async def stream_of() -> AsyncIterator[jetstream.Outgoing[Order]]:
        for n in range(5):
            yield jetstream.Outgoing("orders.ok", order(n))
        yield jetstream.Outgoing("orders.*", order(99))  # invalid subject
        yield jetstream.Outgoing("orders.ok", order(100))

    with pytest.raises(InvalidSubject):
        await pub.publish_many(stream_of(), window=2)
    assert (await js.stream_info(STREAM)).state.messages == 5
    with pytest.raises(TypeError, match=r"Outgoing messages, got \('orders.ok'"):
        await pub.publish_many([jetstream.Outgoing("orders.ok", order(6)), ("orders.ok", order(7))])  # type: ignore[list-item]
    assert (await js.stream_info(STREAM)).state.messages == 6


# ---------------------------------------------------------------- consuming


@pytest.mark.slow  # the redelivery back-off
async def test_auto_ack_on_return_and_nak_on_raise(js: JetStreamContext) -> None:
    attempts: Counter[str] = Counter()
    deliveries: list[int] = []
    done = asyncio.Event()

    async def flaky(msg: Message[Order]) -> None:
        attempts[msg.payload.id] += 1
        assert msg.delivery is not None
        deliveries.append(msg.delivery.num_delivered)
        if msg.payload.id == "o-1" and attempts["o-1"] == 1:
            raise RuntimeError("transient")
        if sum(attempts.values()) == 3:
            done.set()

    await jetstream.ensure_consumer(js, stream=STREAM, name="auto", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="auto")
    subscription = await sub.start("orders.>", flaky)
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish("orders.a", order(1))
    await pub.publish("orders.a", order(2))
    async with asyncio.timeout(10):
        await done.wait()
    await settled_state(js, "auto", (0, 0, 0))  # all acked (o-1 after one redelivery)
    await sub.close()
    assert attempts == {"o-1": 2, "o-2": 1}
    assert sorted(deliveries) == [1, 1, 2]
    assert (subscription.handled, subscription.failed, subscription.redelivered) == (2, 1, 1)


async def test_an_auto_acked_message_reads_as_acked_and_refuses_a_second_ack(
    js: JetStreamContext,
) -> None:
    # The auto-ack on return runs inline (no coroutine of Message.ack): the message
    # must still say it is acked, so a task that kept it cannot ack it twice.
    kept: list[Message[Order]] = []
    done = asyncio.Event()

    async def keep(msg: Message[Order]) -> None:
        kept.append(msg)
        if len(kept) == 2:
            done.set()

    sub = jetstream.Subscriber(js, CODEC, stream=STREAM)
    subscription = await sub.start("orders.>", keep)
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish("orders.a", order(1))
    await pub.publish("orders.a", order(2))
    async with asyncio.timeout(10):
        await done.wait()
    await settled_state(js, subscription.consumer, (0, 0, 0))
    assert [m.settled for m in kept] == ["ack", "ack"]
    with pytest.raises(AlreadySettled) as raised:
        await kept[0].ack()
    assert raised.value.outcome == "ack"
    await sub.close()


async def test_manual_ack_nak_and_term(js: JetStreamContext) -> None:
    seen: list[tuple[str, int]] = []
    done = asyncio.Event()

    async def handler(msg: Message[Order]) -> None:
        assert msg.delivery is not None
        seen.append((msg.payload.id, msg.delivery.num_delivered))
        if msg.payload.id == "o-1":
            await msg.ack()
        elif msg.payload.id == "o-2" and msg.delivery.num_delivered == 1:
            await msg.nak()
        elif msg.payload.id == "o-2":
            await msg.ack()
            done.set()
        else:
            await msg.term("not for us")

    await jetstream.ensure_consumer(js, stream=STREAM, name="manual", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="manual", manual_ack=True)
    await sub.start("orders.>", handler)
    pub = jetstream.Publisher(js, CODEC)
    for n in (1, 2, 3):
        await pub.publish("orders.a", order(n))
    async with asyncio.timeout(10):
        await done.wait()
    await settled_state(js, "manual", (0, 0, 0))
    await sub.close()
    assert sorted(seen) == [("o-1", 1), ("o-2", 1), ("o-2", 2), ("o-3", 1)]  # o-3 never again


async def test_an_undecodable_payload_is_terminated_once(
    nc: Client, js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    inbox: Inbox[Order] = Inbox()
    await jetstream.ensure_consumer(js, stream=STREAM, name="strict", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="strict")
    subscription = await sub.start("orders.>", inbox)
    with caplog.at_level(logging.ERROR, logger="goflux.transports.jetstream"):
        await nc.jetstream().publish("orders.bad", b'{"id": 42')
        await jetstream.Publisher(js, CODEC).publish("orders.good", order(7))
        await inbox.wait_for(1)
        await settled_state(js, "strict", (0, 0, 0))
    await sub.close()
    assert inbox.payloads == [order(7)]
    assert subscription.undecodable == 1
    assert "undecodable message 1 on 'orders.bad' terminated" in caplog.text
    assert isinstance(caplog.records[0].exc_info[1], DecodeError)  # type: ignore[index]


class CountingCodec(JsonCodec[Order]):
    """Counts its decode calls (a codec may have side effects: each must run once)."""

    def __init__(self) -> None:
        super().__init__(Order)
        self.decoded: Counter[bytes] = Counter()

    def decode(self, data: bytes, /) -> Order:
        self.decoded[bytes(data)] += 1
        return super().decode(data)


async def test_each_message_is_decoded_once_undecodable_or_not(
    nc: Client, js: JetStreamContext
) -> None:
    inbox: Inbox[Order] = Inbox()
    codec = CountingCodec()
    sub = jetstream.Subscriber(js, codec, stream=STREAM)
    subscription = await sub.start("orders.>", inbox)
    await nc.jetstream().publish("orders.bad", b"not json")
    await jetstream.Publisher(js, CODEC).publish("orders.good", order(7))
    await inbox.wait_for(1)
    await settled_state(js, subscription.consumer, (0, 0, 0))
    await sub.close()
    assert subscription.undecodable == 1
    assert codec.decoded[b"not json"] == 1
    assert sum(codec.decoded.values()) == 2


@pytest.mark.parametrize("path", ["inline", "ordered", "paced", "telemetry", "failed"])
async def test_an_idle_subscription_holds_none_of_the_messages_it_handled(
    js: JetStreamContext, path: str, request: pytest.FixtureRequest
) -> None:
    """Large messages are not kept alive (bytes or payload) by a worker waiting for more.

    One message at a time, each handled before the next is sent: the first of a
    subscription and, with a slow handler ("paced"), the first after each wait are
    timed apart from the others, which run inline; with telemetry each runs in a
    coroutine of its own; a handler that raises leaves the failure path last.
    """
    payloads: list[weakref.ref[Box]] = []
    received: list[object] = []

    async def handle(msg: Message[Box]) -> None:
        payloads.append(weakref.ref(msg.payload))
        assert isinstance(msg._wire, bytes)  # the header block, as received
        received.extend((msg.data, msg._wire, msg.id))
        if path == "paced":
            await asyncio.sleep(0.03)  # (a handler's work: the pull window follows it)
        if path == "failed":
            raise ValueError("not this one")

    telemetry = request.getfixturevalue("otel").telemetry if path == "telemetry" else None
    if path == "failed":  # (pytest keeps what is logged: a traceback holds the message)
        request.getfixturevalue("caplog").set_level(logging.CRITICAL, logger="goflux")
    ordered = path in ("ordered", "failed")  # (not redelivered after failing)
    subscriber = jetstream.Subscriber(
        js, BoxCodec(), stream=STREAM, ordered=ordered, telemetry=telemetry
    )
    subscription = await subscriber.start("orders.>", handle)
    publisher = jetstream.Publisher(js, BoxCodec())

    send = functools.partial(publish_large, publisher, "orders.big")

    try:
        await one_at_a_time_until_idle(lambda: subscription._idle, send, lambda: len(payloads), 3)
        assert [ref() for ref in payloads] == [None, None, None]
        held_only_by(received)  # the bytes, header blocks and IDs: by this test alone
    finally:
        await subscriber.close()


async def test_a_term_reason_over_max_payload_is_a_settlement_error_not_a_lost_connection(
    nc: Client, js: JetStreamContext
) -> None:
    outcomes: list[str] = []
    done = asyncio.Event()

    async def handler(msg: Message[Order]) -> None:
        try:
            await msg.term("r" * (nc.max_payload + 1))
        except SettlementError as exc:
            outcomes.append(f"refused: {exc}")
            await msg.term("short")
            outcomes.append("termed")
        done.set()

    await jetstream.ensure_consumer(js, stream=STREAM, name="long", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="long", manual_ack=True)
    await sub.start("orders.>", handler)
    await jetstream.Publisher(js, CODEC).publish("orders.a", order(1))
    async with asyncio.timeout(10):
        await done.wait()
    await settled_state(js, "long", (0, 0, 0))  # the short term landed
    assert nc.is_connected
    assert nc.stats["reconnects"] == 0
    assert outcomes[1:] == ["termed"]
    assert "maximum payload" in outcomes[0]
    await sub.close()


async def test_max_in_flight_bounds_what_the_server_has_outstanding(js: JetStreamContext) -> None:
    gate = asyncio.Semaphore(0)  # one release lets one handler return
    started: Inbox[Order] = Inbox()
    outstanding: list[int] = []  # the subscription's count as each handler starts

    async def slow(msg: Message[Order]) -> None:
        if running:
            outstanding.append(running[0].outstanding)
        await started(msg)
        await gate.acquire()

    running: list[jetstream.JetStreamSubscription[Order]] = []

    await jetstream.ensure_consumer(js, stream=STREAM, name="bounded", filter_subject="orders.>")
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(50))
    sub = jetstream.Subscriber(
        js, CODEC, stream=STREAM, consumer="bounded", max_in_flight=5, concurrency=2
    )
    subscription = await sub.start("orders.>", slow)
    running.append(subscription)
    await started.wait_for(2)
    ack_pending, pending, _ = await consumer_state(js, "bounded")
    assert (ack_pending, pending) == (5, 45)
    assert subscription.outstanding == 5
    # Settled one at a time, the bound holds after every settlement too: the pulls that
    # refill the room never ask beyond it (the consumer's max_ack_pending, 1,000, would
    # let the server send more).
    for handled in range(1, 49):
        gate.release()
        await started.wait_for(handled + 2)  # the next message has started
        ack_pending = await counted_every_ack(js, "bounded", handled)
        assert ack_pending <= 5, f"{ack_pending} unacked at the server after {handled} settled"
        assert subscription.outstanding <= 5
    assert len(outstanding) >= 47
    assert max(outstanding) <= 5
    gate.release()
    gate.release()
    await settled_state(js, "bounded", (0, 0, 0))
    await sub.close()


async def holding_handler(
    js: JetStreamContext, *, stored: int
) -> tuple[asyncio.Event, Inbox[Order], Callable[[Message[Order]], Awaitable[None]]]:
    """Store ``stored`` orders; a handler that records each start and holds until released."""
    release = asyncio.Event()
    started: Inbox[Order] = Inbox()

    async def slow(msg: Message[Order]) -> None:
        await started(msg)
        await release.wait()

    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(stored))
    return release, started, slow


@pytest.mark.parametrize(
    ("kind", "settings", "beyond"),
    [
        ("ephemeral", {}, 5),  # max_ack_pending = max_in_flight: the server holds it
        ("durable", {}, 0),  # max_ack_pending 1,000 (and anyone may change it)
        ("ephemeral", {"keep_alive": False}, 0),  # a held message may come twice
        ("ephemeral", {"consumer_config": {"ack_policy": "all"}}, 0),  # acks settle others
        ("ephemeral", {"confirm_acks": True}, 0),  # the server frees room before confirming
    ],
)
async def test_a_pull_asks_beyond_max_in_flight_only_where_the_server_holds_the_bound(
    js: JetStreamContext, kind: str, settings: dict[str, Any], beyond: int
) -> None:
    # Where the server holds the in-flight bound, one more batch may be asked for (an
    # ack frees room for the next message at once); elsewhere the client may never
    # ask beyond max_in_flight.
    release, started, slow = await holding_handler(js, stored=30)
    name = None
    if kind == "durable":
        name = "wide"
        await jetstream.ensure_consumer(js, stream=STREAM, name=name, filter_subject="orders.>")
    sub = jetstream.Subscriber(
        js, CODEC, stream=STREAM, consumer=name, max_in_flight=5, concurrency=5, **settings
    )
    subscription = await sub.start("orders.>", slow)
    await started.wait_for(5)
    engine = subscription._engine
    await engine.pull()  # what the watchdog does once the first request is filled
    await js._nc.flush()
    info = await js.consumer_info(STREAM, subscription.consumer)
    assert info.num_ack_pending == 5  # the bound holds at the server either way
    assert subscription.outstanding == 5
    assert engine._requested == beyond
    release.set()
    await started.wait_for(30)
    await sub.close()


async def test_a_consumer_that_stops_holding_the_bound_gets_pulls_within_it_again(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    # An ephemeral consumer's max_ack_pending raised while it runs: the request open
    # beyond the bound brings one batch more, once; from then on the pulls stay
    # within max_in_flight.
    release, started, slow = await holding_handler(js, stored=30)
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, max_in_flight=5, concurrency=5)
    subscription = await sub.start("orders.>", slow)
    await started.wait_for(5)
    engine = subscription._engine
    await engine.pull()
    assert engine._requested == 5
    info = await js.consumer_info(STREAM, subscription.consumer)
    config = info.config.as_dict()
    config["max_ack_pending"] = 1_000
    update = {"stream_name": STREAM, "config": config, "action": "update"}
    with caplog.at_level(logging.WARNING, logger="goflux.transports.jetstream"):
        reply = await js._nc.request(
            f"$JS.API.CONSUMER.CREATE.{STREAM}.{subscription.consumer}",
            json.dumps(update).encode(),
            timeout=5,
        )
        assert json.loads(reply.data)["config"]["max_ack_pending"] == 1_000
        async with asyncio.timeout(10):  # the open request's batch comes
            while subscription.outstanding < 10:
                await js._nc.flush()
    assert "no longer holds the bound" in caplog.text
    assert subscription.outstanding == 10
    assert engine._max_in_flight == 5  # no pull asks beyond the bound again
    await engine.pull()
    await js._nc.flush()
    assert engine._requested == 0  # within the bound again: nothing asked for
    assert (await js.consumer_info(STREAM, subscription.consumer)).num_ack_pending == 10
    release.set()
    await started.wait_for(30)
    await sub.close()


async def test_a_deliverys_acker_holds_it_as_received_and_keeps_its_ack_subject(
    js: JetStreamContext,
) -> None:
    # No nats-py Msg is built for a pull inbox's delivery: its acker holds what the
    # reader parsed. Its public `subject` is still the $JS.ACK subject settlements go
    # to (`reply` too); the subject published to is `message_subject`.
    inbox: Inbox[Order] = Inbox()
    subscription = await jetstream.Subscriber(js, CODEC, stream=STREAM, manual_ack=True).start(
        "orders.>", inbox
    )
    await jetstream.Publisher(js, CODEC).publish("orders.b", order(7), headers={"tenant": "t1"})
    [message] = await inbox.wait_for(1)
    acker = message._acker
    assert isinstance(acker, jetstream.JetStreamAcker)
    assert acker.subject == acker.reply
    assert acker.reply.startswith(f"$JS.ACK.{STREAM}.{subscription.consumer}.1.")
    assert acker.message_subject == message.subject == "orders.b"
    assert acker.data == message.data == CODEC.encode(order(7))
    assert acker.headers is not None
    assert acker.headers is message._wire  # the header lines as received, not a copy
    assert message.headers == {"tenant": "t1"}
    # Built field by field where it arrives (a class call costs more): every field
    # as JetStreamAcker(...) sets it, the delivery count read from the reply here.
    built = jetstream.JetStreamAcker(
        acker._nc,
        acker.reply,
        acker._ledger,
        acker.last_progress,
        None,
        acker.message_subject,
        acker.data,
        acker.headers,
    )
    # (Less `released`: the handler returned, so the room of the message was given back.)
    fields = [f for f in jetstream.JetStreamAcker.__slots__ if f != "released"]
    assert acker.released
    assert {f: getattr(acker, f) for f in fields} == {f: getattr(built, f) for f in fields}
    await message.ack()
    await drained(js, STREAM, subscription.consumer)
    await subscription.stop()


@pytest.mark.parametrize("offset", [-3600.0, 3600.0])
async def test_a_loop_whose_time_is_replaced_times_deliveries_by_that_clock(
    js: JetStreamContext, offset: float
) -> None:
    # The engine reads time.monotonic() itself where the loop's time() is asyncio's
    # own; a time() replaced on the loop (as fake-time tools do) is what the keep-alive
    # and the watchdog compare with, so a delivery's arrival must come from it too.
    loop = asyncio.get_running_loop()

    def shifted() -> float:
        return time.monotonic() + offset

    with mock.patch.object(loop, "time", shifted):
        inbox: Inbox[Order] = Inbox()
        subscription = await jetstream.Subscriber(js, CODEC, stream=STREAM).start("orders.>", inbox)
        await jetstream.Publisher(js, CODEC).publish("orders.a", order(1))
        [message] = await inbox.wait_for(1)
        acker = message._acker
        assert isinstance(acker, jetstream.JetStreamAcker)
        assert abs(loop.time() - acker.last_progress) < 60
        assert abs(loop.time() - subscription._engine._last_activity) < 60
        await subscription.stop()


async def test_a_stopped_or_retired_pull_inbox_is_not_kept_alive(
    nc: Client, js: JetStreamContext
) -> None:
    # The pull inbox's messages skip nats-py's _process_msg through a route per
    # inbox; a route outliving its inbox would keep the subscription alive for as
    # long as the client.
    inbox: Inbox[Order] = Inbox()
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM)
    subscription = await sub.start("orders.>", inbox)
    routes = js._nc._goflux_direct_routes
    first = subscription._engine._sub._id
    assert list(routes) == [first]
    await subscription._engine._reset("a test asks for a new inbox")
    second = subscription._engine._sub._id
    async with asyncio.timeout(10):  # the retired inbox is drained in a task of its own
        while first in routes:
            await js._nc.flush()
    assert list(routes) == [second]
    await jetstream.Publisher(js, CODEC).publish("orders.a", order(1))
    await inbox.wait_for(1)  # the new inbox works
    await subscription.stop()
    assert routes == {}


def test_settings_are_typed_once_and_checked(js: JetStreamContext) -> None:
    defaults = jetstream.Subscriber(js, CODEC, stream=STREAM)._options
    assert (defaults.max_in_flight, defaults.batch, defaults.concurrency) == (512, 512, 1)
    assert (defaults.expires, defaults.heartbeat, defaults.drain_timeout) == (30.0, 5.0, 30.0)
    assert (defaults.manual_ack, defaults.keep_alive, defaults.ordered) == (False, True, False)
    settings: jetstream.SubscriberSettings = {"max_in_flight": 8, "expires": 4.0, "batch": 3}
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, **settings)
    assert (sub._options.max_in_flight, sub._options.batch) == (8, 3)
    assert (sub._options.expires, sub._options.heartbeat) == (4.0, 2.0)
    typo = {"max_inflight": 3}
    with pytest.raises(TypeError, match=r"unknown subscriber setting\(s\): max_inflight"):
        jetstream.Subscriber(js, CODEC, stream=STREAM, **typo)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency \\(9\\) cannot exceed max_in_flight \\(8\\)"):
        jetstream.Subscriber(js, CODEC, stream=STREAM, max_in_flight=8, concurrency=9)


async def test_workers_start_on_demand_up_to_concurrency(js: JetStreamContext) -> None:
    """Four handlers at most run at once; a roomy concurrency spawns only what is used."""
    release = asyncio.Event()
    started: Inbox[Order] = Inbox()
    running = peak = 0

    async def slow(msg: Message[Order]) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await started(msg)
        await release.wait()
        running -= 1

    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(12))
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, max_in_flight=12, concurrency=4)
    subscription = await sub.start("orders.a", slow)
    await started.wait_for(4)  # times out unless four workers run
    release.set()
    await started.wait_for(12)
    await subscription.stop()
    assert (peak, subscription.handled) == (4, 12)

    roomy = jetstream.Subscriber(js, CODEC, stream=STREAM, max_in_flight=200, concurrency=200)
    release.clear()
    three: Inbox[Order] = Inbox()

    async def hold(msg: Message[Order]) -> None:
        await three(msg)
        await release.wait()

    await pub.publish_many(jetstream.Outgoing("orders.b", order(n)) for n in range(3))
    held = await roomy.start("orders.b", hold)
    await three.wait_for(3)
    prefix = f"goflux-jetstream-{held.consumer}-"
    workers = [t for t in asyncio.all_tasks() if t.get_name().removeprefix(prefix).isdigit()]
    assert len(workers) == 3
    release.set()
    await held.stop()
    assert held.handled == 3


async def test_stop_works_off_what_was_received_and_leaves_nothing_unacknowledged(
    js: JetStreamContext,
) -> None:
    await jetstream.ensure_consumer(
        js, stream=STREAM, name="shared", filter_subject="orders.>", ack_wait=60
    )
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(20))
    release = asyncio.Event()
    received_all = asyncio.Event()
    handled_by: dict[str, list[str]] = {"a": [], "b": []}

    async def slow(msg: Message[Order]) -> None:
        await release.wait()
        handled_by["a"].append(msg.payload.id)

    a = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="shared", max_in_flight=10)
    subscription = await a.start("orders.>", slow)
    while subscription.outstanding < 10:  # one runs, nine wait behind it
        await js._nc.flush()
    received_all.set()
    stopping = asyncio.create_task(subscription.stop(timeout=30))
    await settle_loop()
    assert not stopping.done(), "stop() must wait for the running handler"
    release.set()
    await stopping
    # What was received is worked off in order; nothing new is taken.
    assert handled_by["a"] == [f"o-{n}" for n in range(10)]
    # The acks are fire-and-forget: wait for the server's view (a lost ack times out,
    # long before the 60 s ack_wait could bring anything back).
    async with asyncio.timeout(10):
        while (await js.consumer_info(STREAM, "shared")).num_ack_pending:
            await js._nc.flush()

    b_inbox: Inbox[Order] = Inbox()
    b = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="shared")
    await b.start("orders.>", b_inbox)
    await b_inbox.wait_for(10)
    await b.close()
    assert [m.payload.id for m in b_inbox.messages] == [f"o-{n}" for n in range(10, 20)]
    assert all(m.delivery and m.delivery.num_delivered == 1 for m in b_inbox.messages)


async def test_stop_works_off_what_its_open_pull_requests_still_bring(
    js: JetStreamContext,
) -> None:
    """What the server sent before it read the drain's unsubscribe is handled, not nak'd.

    The deliveries are held between nats-py's parser and the subscription until the
    drain's PONG comes, and let through just before it: as they come when the server
    answers a pull request while the drain's UNSUB and PING are on their way. Nak'd,
    they would stay pending at the server with nobody to take them.
    """
    await jetstream.ensure_consumer(
        js, stream=STREAM, name="late", filter_subject="orders.>", ack_wait=60
    )
    nc = js._nc
    route, pong = nc._process_msg, nc._process_pong
    held: list[tuple[int, bytes, bytes, bytes, bytes]] = []
    arrived = asyncio.Event()
    stopping = False

    async def holding(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        if reply.startswith(b"$JS.ACK."):
            held.append((sid, subject, reply, data, headers))
            if len(held) == 10:
                arrived.set()
            return
        await route(sid, subject, reply, data, headers)

    async def late_pong() -> None:
        if stopping:
            while held:  # (the server wrote them before it read the UNSUB and PING)
                await route(*held.pop(0))
        await pong()

    inbox: Inbox[Order] = Inbox()
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="late", max_in_flight=10)
    nc._process_pong = late_pong
    try:
        subscription = await sub.start("orders.>", inbox)
        nc._process_msg = holding  # (goflux's route was installed by the start)
        # Stored after the start: the open pull request gets them, and they are held.
        await jetstream.Publisher(js, CODEC).publish_many(
            jetstream.Outgoing("orders.a", order(n)) for n in range(10)
        )
        async with asyncio.timeout(10):
            await arrived.wait()
        stopping = True
        await subscription.stop(timeout=30)
    finally:
        nc._process_msg, nc._process_pong = route, pong
    assert not held  # let through during the drain
    assert [m.payload.id for m in inbox.messages] == [f"o-{n}" for n in range(10)]
    async with asyncio.timeout(10):
        while (await js.consumer_info(STREAM, "late")).num_ack_pending:
            await nc.flush()
    info = await js.consumer_info(STREAM, "late")
    assert (info.num_redelivered, info.ack_floor.stream_seq) == (0, 10)


class LatePong:
    """Holds the deliveries of a pull inbox (installed after the start), then lets them
    through in front of the drain's PONG, as a link delivers what the server sent
    before it read the drain's UNSUB and PING, ``delay`` seconds late. ``before`` runs
    first (a fault).
    """

    def __init__(self, nc: Client, delay: float = 0.0) -> None:
        self.nc, self.delay = nc, delay
        self.before: Callable[[], Awaitable[None]] | None = None
        self.route, self.pong = nc._process_msg, nc._process_pong
        self.held: list[tuple[int, bytes, bytes, bytes, bytes]] = []
        self.stopping = False
        self.ponged = asyncio.Event()  # the drain's PONG was processed

    def install(self) -> None:
        self.route = self.nc._process_msg  # (goflux's route, installed by the start)
        self.nc._process_msg, self.nc._process_pong = self._holding, self._late_pong

    def uninstall(self) -> None:
        self.nc._process_msg, self.nc._process_pong = self.route, self.pong

    async def wait_held(self, count: int) -> None:
        async with asyncio.timeout(10):
            while len(self.held) < count:
                await self.nc.flush()

    async def _holding(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:
        if reply.startswith(b"$JS.ACK.") and not self.stopping:
            self.held.append((sid, subject, reply, data, headers))
            return
        await self.route(sid, subject, reply, data, headers)

    async def _late_pong(self) -> None:
        if self.stopping and not self.ponged.is_set():
            if self.delay:
                await asyncio.sleep(self.delay)  # (the link's delay: no readiness waited on)
            if self.before is not None:
                await self.before()
            while self.held:
                await self.route(*self.held.pop(0))
            await self.pong()
            self.ponged.set()
            return
        await self.pong()


async def test_a_drain_cut_short_leaves_the_connection_reading_when_its_pong_comes(
    js: JetStreamContext,
) -> None:
    # stop(0) waits at most 0.1 s for the pull inbox's drain; nats-py's own flush
    # inside it must not be cancelled then: its late PONG would stop the reader.
    nc = js._nc
    inbox: Inbox[Order] = Inbox()
    subscription = await jetstream.Subscriber(js, CODEC, stream=STREAM).start("orders.>", inbox)
    inbox_id = subscription._engine._sub._id
    link = LatePong(nc, delay=0.3)  # (past the 0.1 s the drain waits)
    link.install()
    try:
        link.stopping = True
        await subscription.stop(timeout=0)
        async with asyncio.timeout(10):
            await link.ponged.wait()
    finally:
        link.uninstall()
    await settle_loop()
    assert not nc._reading_task.done(), "the connection's reader stopped"
    await asyncio.wait_for(nc.flush(), 5)
    # The drain ended after its wait did: the inbox's route is forgotten then.
    assert inbox_id not in nc._goflux_direct_routes


async def test_what_arrives_after_a_drain_gave_up_on_its_inbox_is_handed_back(
    js: JetStreamContext,
) -> None:
    # The drain waits 0.5 s for its inbox, and the deliveries of an open request come
    # with the PONG 1 s late, while a pinned subscription gives its pin up: they are
    # nak'd on arrival, not left unsettled (outstanding) until ack_wait.
    await jetstream.ensure_consumer(
        js,
        stream=STREAM,
        name="pinned",
        ack_wait=60,
        priority_groups=["jobs"],
        priority_policy="pinned_client",
        priority_timeout=30.0,
    )
    inbox: Inbox[Order] = Inbox()
    sub = jetstream.Subscriber(
        js, CODEC, stream=STREAM, consumer="pinned", priority_group="jobs", max_in_flight=20
    )
    subscription = await sub.start("orders.>", inbox)
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish("orders.a", order(100))  # the pin comes with it
    await inbox.wait_for(1)
    link = LatePong(js._nc, delay=1.0)  # (past the drain's 0.5 s)
    link.install()
    try:
        await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(10))
        await link.wait_held(10)
        link.stopping = True
        await subscription.stop(timeout=0.5)
        async with asyncio.timeout(10):
            await link.ponged.wait()
    finally:
        link.uninstall()
    await settle_loop()
    assert (subscription.outstanding, len(subscription._ready)) == (0, 0)
    assert len(inbox.messages) == 1
    b_inbox: Inbox[Order] = Inbox()  # nak'd: taken at once by the next subscriber
    b = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="pinned", priority_group="jobs")
    await b.start("orders.>", b_inbox)
    await b_inbox.wait_for(10)
    await b.close()


async def test_no_handler_runs_after_a_drain_ended_by_a_failure(js: JetStreamContext) -> None:
    # The deliveries of an open request are taken while the drain unsubscribes, and
    # the subscription fails meanwhile (a 409, a closed connection): none is handled
    # once it has ended.
    await jetstream.ensure_consumer(
        js, stream=STREAM, name="failing", filter_subject="orders.>", ack_wait=60
    )
    after_end: list[str] = []
    subscription: jetstream.JetStreamSubscription[Order] | None = None

    async def handler(message: Message[Order]) -> None:
        assert subscription is not None
        if not subscription.running:
            after_end.append(message.payload.id)

    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="failing", max_in_flight=10)
    subscription = await sub.start("orders.>", handler)
    engine = subscription._engine

    async def fail() -> None:
        await engine._fail(SubscribeError("failed while draining"))

    link = LatePong(js._nc)
    link.install()

    async def fail_after_the_deliveries() -> None:
        while link.held:
            await link.route(*link.held.pop(0))
        await fail()

    link.before = fail_after_the_deliveries
    try:
        await jetstream.Publisher(js, CODEC).publish_many(
            jetstream.Outgoing("orders.a", order(n)) for n in range(10)
        )
        await link.wait_held(10)
        link.stopping = True
        await subscription.stop(timeout=5)
    finally:
        link.uninstall()
    await settle_loop()
    assert after_end == []
    assert not subscription.running


async def test_stop_hands_back_at_once_what_its_deadline_leaves(js: JetStreamContext) -> None:
    await jetstream.ensure_consumer(
        js, stream=STREAM, name="shared", filter_subject="orders.>", ack_wait=60
    )
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(10))

    async def stuck(msg: Message[Order]) -> None:
        await asyncio.Event().wait()  # cancelled at the deadline

    a = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="shared", max_in_flight=10)
    subscription = await a.start("orders.>", stuck)
    while subscription.outstanding < 10:
        await js._nc.flush()
    await subscription.stop(timeout=0.1)
    b_inbox: Inbox[Order] = Inbox()
    b = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="shared")
    await b.start("orders.>", b_inbox)
    async with asyncio.timeout(10):  # far below the 60 s ack_wait: handed back by nak
        await b_inbox.wait_for(10)
    await b.close()
    assert sorted(m.payload.id for m in b_inbox.messages) == sorted(f"o-{n}" for n in range(10))
    assert all(m.delivery and m.delivery.num_delivered == 2 for m in b_inbox.messages)


@pytest.mark.slow  # a server restart
async def test_consumption_resumes_by_itself_after_a_server_restart(
    nats_server: NatsServer,
) -> None:
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    client = await nats.connect(
        nats_server.url,
        reconnect_time_wait=0.05,
        max_reconnect_attempts=-1,
        reconnected_cb=on_reconnect,
    )
    js = client.jetstream()
    await jetstream.ensure_stream(js, name=STREAM, subjects=["orders.>"])
    await jetstream.ensure_consumer(js, stream=STREAM, name="durable", filter_subject="orders.>")
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(100))
    seen: Counter[str] = Counter()
    progress = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        seen[msg.payload.id] += 1
        progress.set()

    sub = jetstream.Subscriber(
        js,
        CODEC,
        stream=STREAM,
        consumer="durable",
        max_in_flight=10,
        idle_heartbeat=0.5,
        expires=2.0,
    )
    await sub.start("orders.>", handle)
    await progress.wait()
    nats_server.kill()
    await nats_server.restart()
    async with asyncio.timeout(20):
        await reconnected.wait()
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(100, 200))
    async with asyncio.timeout(30):
        while len(seen) < 200:
            progress.clear()
            await progress.wait()
    await sub.close()
    await client.close()
    assert set(seen) == {f"o-{n}" for n in range(200)}  # every message at least once


@pytest.mark.slow
async def test_long_handlers_are_kept_alive_past_ack_wait(js: JetStreamContext) -> None:
    calls: Counter[str] = Counter()
    done = asyncio.Event()

    async def long_running(msg: Message[Order]) -> None:
        calls[msg.payload.id] += 1
        await asyncio.sleep(2.5)  # outlives the 1 s ack_wait: simulated long work
        done.set()

    await jetstream.ensure_consumer(
        js, stream=STREAM, name="long", filter_subject="orders.>", ack_wait=1.0
    )
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="long")
    subscription = await sub.start("orders.>", long_running)
    await jetstream.Publisher(js, CODEC).publish("orders.a", order())
    async with asyncio.timeout(10):
        await done.wait()
    await settled_state(js, "long", (0, 0, 0))
    await sub.close()
    assert calls == {"o-1": 1}
    assert subscription.redelivered == 0


async def test_the_ordered_mode_replays_a_stream_in_order(js: JetStreamContext) -> None:
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing(f"orders.{n % 4}", order(n)) for n in range(300))
    inbox: Inbox[Order] = Inbox()
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, ordered=True, max_in_flight=50)
    subscription = await sub.start("orders.>", inbox)
    await inbox.wait_for(300)
    names = {c.name for c in await js.consumers_info(STREAM)}
    assert subscription.consumer in names
    info = await js.consumer_info(STREAM, subscription.consumer)
    assert info.config.ack_policy == "none"
    assert not info.config.durable_name
    await sub.close()
    assert [m.payload.id for m in inbox.messages] == [f"o-{n}" for n in range(300)]
    assert [m.delivery.stream_sequence for m in inbox.messages if m.delivery] == list(range(1, 301))
    assert subscription.consumer not in {c.name for c in await js.consumers_info(STREAM)}


@pytest.mark.slow  # a missed heartbeat
async def test_the_ordered_mode_resumes_after_its_consumer_disappears(js: JetStreamContext) -> None:
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(50))
    inbox: Inbox[Order] = Inbox()
    sub = jetstream.Subscriber(
        js,
        CODEC,
        stream=STREAM,
        ordered=True,
        max_in_flight=10,
        idle_heartbeat=0.5,
        expires=2.0,
    )
    subscription = await sub.start("orders.>", inbox)
    await inbox.wait_for(10)
    first = subscription.consumer
    await js.delete_consumer(STREAM, first)  # as if the server lost it
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(50, 80))
    await inbox.wait_for(80, timeout=20)
    await sub.close()
    assert subscription.consumer != first
    assert [m.payload.id for m in inbox.messages] == [f"o-{n}" for n in range(80)]


@pytest.mark.parametrize("fault", ["lost", "duplicated", "swapped"])
async def test_the_ordered_mode_gets_a_delivery_the_link_lost_or_garbled_again_in_order(
    js: JetStreamContext, fault: str
) -> None:
    """A delivery lost, duplicated or overtaken on the way is a gap: nothing is taken past it.

    The fault is put where a faulty link would put it, between nats-py's parser and the
    subscription; the replacement consumer starts again after the last message taken,
    and the handler sees every message once, in order.
    """
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(400))
    inbox: Inbox[Order] = Inbox()
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, ordered=True, max_in_flight=200)
    subscription = await sub.start("orders.>", inbox)
    first = subscription.consumer
    nc = js._nc
    route = nc._process_msg  # (goflux's route, installed when the subscription started)
    deliveries = 0
    held: list[tuple[int, bytes, bytes, bytes, bytes]] = []

    async def faulty(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        nonlocal deliveries
        if reply.startswith(b"$JS.ACK."):
            deliveries += 1
            if deliveries == 21:
                if fault == "lost":
                    return
                if fault == "duplicated":
                    await route(sid, subject, reply, data, headers)
                else:  # swapped with the next one
                    held.append((sid, subject, reply, data, headers))
                    return
            if deliveries == 22 and held:
                await route(sid, subject, reply, data, headers)
                await route(*held.pop())
                return
        await route(sid, subject, reply, data, headers)

    nc._process_msg = faulty
    try:
        await inbox.wait_for(400, timeout=20)
    finally:
        nc._process_msg = route
    await sub.close()
    assert deliveries > 22  # the fault happened
    assert subscription.consumer != first  # replaced after the gap
    assert [m.payload.id for m in inbox.messages] == [f"o-{n}" for n in range(400)]


@pytest.mark.slow  # the redelivery back-off
async def test_settlement_and_redelivery_metrics(js: JetStreamContext, otel: Otel) -> None:
    attempts: Counter[str] = Counter()
    done = asyncio.Event()

    async def handler(msg: Message[Order]) -> None:
        attempts[msg.payload.id] += 1
        if msg.payload.id == "o-1" and attempts["o-1"] == 1:
            raise RuntimeError("retry me")
        if msg.payload.id == "o-2":
            await msg.term("poison")
        if sum(attempts.values()) == 3:
            done.set()

    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, telemetry=otel.telemetry)
    await sub.start("orders.>", handler)
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish("orders.a", order(1))
    await pub.publish("orders.a", order(2))
    async with asyncio.timeout(10):
        await done.wait()
    await sub.close()
    metrics = otel.metrics()
    data = metrics["goflux.consumer.settlements"].data
    assert isinstance(data, Sum)
    outcomes = {
        str(dict(p.attributes or {})["goflux.settlement.outcome"]): p.value
        for p in data.data_points
    }
    assert outcomes == {"nak": 1, "ack": 1, "term": 1}
    redeliveries = metrics["goflux.consumer.redeliveries"].data
    assert isinstance(redeliveries, Sum)
    assert sum(p.value for p in redeliveries.data_points) == 1


# ----------------------------------------------------------- binding errors


async def test_binding_to_a_missing_or_mismatched_consumer_is_refused(js: JetStreamContext) -> None:
    with pytest.raises(SubscribeError, match=r"consumer not found.*ensure_consumer"):
        await jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="ghost").start(
            "orders.>", Inbox[Order]()
        )
    with pytest.raises(SubscribeError, match="stream 'NOPE' not found"):
        await jetstream.Subscriber(js, CODEC, stream="NOPE").start("orders.>", Inbox[Order]())
    await jetstream.ensure_consumer(js, stream=STREAM, name="eu", filter_subject="orders.eu.>")
    with pytest.raises(SubscribeError, match=r"delivers \['orders.eu.>'\], outside .*orders.us"):
        await jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="eu").start(
            "orders.us.*", Inbox[Order]()
        )
    ok = await jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="eu").start(
        "orders.>", Inbox[Order]()
    )
    await ok.stop()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 5, "max_in_flight": 2}, "cannot exceed"),
        ({"expires": 0.5}, "expires"),
        ({"idle_heartbeat": 20.0}, "idle_heartbeat"),
        ({"ordered": True, "manual_ack": True}, "ordered"),
        ({"consumer": "x", "consumer_config": {"ack_wait": 5}}, "bound one"),
    ],
)
async def test_invalid_subscriber_options(
    js: JetStreamContext, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        jetstream.Subscriber(js, CODEC, stream=STREAM, **options)  # type: ignore[arg-type]
