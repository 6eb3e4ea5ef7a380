"""Behaviour every transport must show (run once per harness)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from goflux import (
    AlreadySettled,
    EncodeError,
    InvalidHeader,
    InvalidSubject,
    JsonCodec,
    Message,
    PublishError,
    SubscribeError,
)
from tests.codecs.cases import CASES
from tests.conformance.harness import Harness
from tests.conftest import Otel
from tests.helpers import Inbox, settle_loop
from tests.models import Customer, Order, order

CODEC = JsonCodec(Order)


async def test_round_trip_is_typed(harness: Harness) -> None:
    inbox: Inbox[Order] = Inbox()
    async with harness.subscriber(CODEC) as sub, harness.publisher(CODEC) as pub:
        await sub.start("orders.created", inbox)
        await pub.publish("orders.created", order(1))
        [msg] = await inbox.wait_for(1)
    assert isinstance(msg.payload, Order)
    assert msg.payload == order(1)
    assert msg.subject == "orders.created"
    assert msg.id is None
    assert msg.data is None or CODEC.decode(msg.data) == order(1)


async def test_every_codec_carries_its_bytes_unchanged(harness: Harness) -> None:
    # One server for every codec: the cases run one after the other on it.
    for case in CASES:
        inbox: Inbox[object] = Inbox()
        subject = f"orders.codec.{case.id}"
        async with harness.subscriber(case.codec) as sub, harness.publisher(case.codec) as pub:
            await sub.start(subject, inbox)
            await pub.publish(subject, case.value)
            [msg] = await inbox.wait_for(1)
        assert msg.payload == case.value, case
        assert msg.data is None or msg.data == case.codec.encode(case.value), case


async def test_handler_started_with_start_receives_a_message_published_right_after(
    harness: Harness,
) -> None:
    inbox: Inbox[Order] = Inbox()
    async with harness.subscriber(CODEC) as sub, harness.publisher(CODEC) as pub:
        subscription = await sub.start("orders.ready", inbox)
        assert subscription.running
        await pub.publish("orders.ready", order(7))  # no sleep, no retry in between
        [msg] = await inbox.wait_for(1)
    assert msg.payload == order(7)


async def test_user_headers_arrive_case_insensitive(header_harness: Harness) -> None:
    harness = header_harness
    inbox: Inbox[Order] = Inbox()
    async with harness.subscriber(CODEC) as sub, harness.publisher(CODEC) as pub:
        await sub.start("orders.h", inbox)
        await pub.publish("orders.h", order(), headers={"X-Tenant": "acme", "Trace-Me": "yes"})
        [msg] = await inbox.wait_for(1)
    assert msg.headers["x-tenant"] == "acme"
    assert msg.headers["TRACE-ME"] == "yes"
    assert set(msg.headers) == {"X-Tenant", "Trace-Me"}  # transport headers stay out


async def test_multi_valued_headers_arrive_in_order(multi_header_harness: Harness) -> None:
    inbox: Inbox[Order] = Inbox()
    harness = multi_header_harness
    async with harness.subscriber(CODEC) as sub, harness.publisher(CODEC) as pub:
        await sub.start("orders.h", inbox)
        await pub.publish("orders.h", order(), headers=[("Tag", "a"), ("tag", "b")])
        [msg] = await inbox.wait_for(1)
    assert msg.headers.get_all("TAG") == ["a", "b"]


async def test_message_id_is_carried(id_harness: Harness) -> None:
    harness = id_harness
    inbox: Inbox[Order] = Inbox()
    async with harness.subscriber(CODEC) as sub, harness.publisher(CODEC) as pub:
        await sub.start("orders.id", inbox)
        await pub.publish("orders.id", order(), message_id="order-1-created")
        [msg] = await inbox.wait_for(1)
    assert msg.id == "order-1-created"


async def test_wildcards_expose_the_concrete_subject(decoupled_harness: Harness) -> None:
    harness = decoupled_harness
    star: Inbox[Order] = Inbox()
    tail: Inbox[Order] = Inbox()
    async with harness.subscriber(CODEC) as sub, harness.publisher(CODEC) as pub:
        await sub.start("orders.*", star)
        await sub.start("orders.>", tail)
        await pub.publish("orders.eu", order(1))
        await pub.publish("orders.eu.de", order(2))
        await pub.publish("invoices.eu", order(3))
        await tail.wait_for(2)
        await star.wait_for(1)
        # Barrier: a later message on orders.* proves orders.eu.de was not delivered there.
        await pub.publish("orders.barrier", order(4))
        await star.wait_for(2)
    assert [m.subject for m in star.messages] == ["orders.eu", "orders.barrier"]
    assert [m.subject for m in tail.messages[:2]] == ["orders.eu", "orders.eu.de"]


async def test_each_subscriber_sees_messages_in_publish_order(
    every_message_harness: Harness,
) -> None:
    harness = every_message_harness
    inbox: Inbox[Order] = Inbox()
    async with harness.subscriber(CODEC) as sub, harness.publisher(CODEC) as pub:
        await sub.start("orders.seq", inbox)
        for n in range(300):
            await pub.publish("orders.seq", order(n))
        await inbox.wait_for(300)
    assert [p.id for p in inbox.payloads] == [f"o-{n}" for n in range(300)]


async def test_fan_out_to_every_plain_subscriber(decoupled_harness: Harness) -> None:
    harness = decoupled_harness
    first: Inbox[Order] = Inbox()
    second: Inbox[Order] = Inbox()
    async with (
        harness.subscriber(CODEC) as sub_a,
        harness.subscriber(CODEC) as sub_b,
        harness.publisher(CODEC) as pub,
    ):
        await sub_a.start("orders.fan", first)
        await sub_b.start("orders.fan", second)
        for n in range(10):
            await pub.publish("orders.fan", order(n))
        await first.wait_for(10)
        await second.wait_for(10)
    assert first.payloads == second.payloads


async def test_a_failing_handler_does_not_stop_the_subscription(decoupled_harness: Harness) -> None:
    harness = decoupled_harness
    seen: Inbox[Order] = Inbox()

    async def flaky(msg: Message[Order]) -> None:
        await seen(msg)
        if msg.payload.id == "o-1":
            raise RuntimeError("boom")

    async with harness.subscriber(CODEC) as sub, harness.publisher(CODEC) as pub:
        await sub.start("orders.flaky", flaky)
        await pub.publish("orders.flaky", order(1))
        await pub.publish("orders.flaky", order(2))
        async with asyncio.timeout(10):
            while "o-2" not in [p.id for p in seen.payloads]:
                await seen.wait_for(len(seen.messages) + 1)
    # Transports with acknowledgement redeliver o-1 (nak) until something settles it.
    assert seen.payloads[0].id == "o-1"


async def test_stop_drains_in_flight_handlers_and_then_delivers_nothing(
    decoupled_harness: Harness,
) -> None:
    harness = decoupled_harness
    started = asyncio.Event()
    release = asyncio.Event()
    finished: list[str] = []
    control: Inbox[Order] = Inbox()

    async def slow(msg: Message[Order]) -> None:
        started.set()
        await release.wait()
        finished.append(msg.payload.id)

    async with harness.subscriber(CODEC) as sub, harness.publisher(CODEC) as pub:
        subscription = await sub.start("orders.drain", slow)
        await sub.start("orders.control", control)
        await pub.publish("orders.drain", order(1))
        await started.wait()
        stopping = asyncio.create_task(subscription.stop(timeout=10))
        await settle_loop()
        assert not stopping.done(), "stop() returned while a handler was still running"
        release.set()
        await stopping
        assert finished == ["o-1"]
        assert not subscription.running
        await pub.publish("orders.drain", order(2))
        await pub.publish("orders.control", order(3))
        await control.wait_for(1)
    assert finished == ["o-1"]


async def test_settling_twice_raises(harness: Harness) -> None:
    outcomes: list[str] = []
    done = asyncio.Event()

    async def handler(msg: Message[Order]) -> None:
        await msg.ack()
        try:
            await msg.ack()
        except AlreadySettled as exc:
            outcomes.append(exc.outcome)
        done.set()

    async with harness.subscriber(CODEC) as sub, harness.publisher(CODEC) as pub:
        await sub.start("orders.settle", handler)
        await pub.publish("orders.settle", order())
        async with asyncio.timeout(10):
            await done.wait()
    assert outcomes == ["ack"]


async def test_bad_input_is_refused_with_clear_errors(harness: Harness) -> None:
    async with harness.subscriber(CODEC) as sub, harness.publisher(CODEC) as pub:
        with pytest.raises(InvalidSubject, match="wildcards"):
            await pub.publish("orders.*", order())
        with pytest.raises(InvalidSubject, match="empty token"):
            await pub.publish("orders..x", order())
        with pytest.raises(InvalidSubject, match="'>' must be the last token"):
            await sub.start("orders.>.x", Inbox[Order]())
        with pytest.raises(EncodeError, match="cannot encode Customer as Order"):
            await pub.publish("orders.x", Customer(id="c", name="n"))  # type: ignore[arg-type]
        with pytest.raises(InvalidHeader):
            await pub.publish("orders.x", order(), headers={"X-Evil": "a\r\nInjected: 1"})
        with pytest.raises(InvalidHeader):
            await pub.publish("orders.x", order(), message_id="")


async def test_closed_publisher_and_subscriber_refuse_work(harness: Harness) -> None:
    pub = harness.publisher(CODEC)
    sub = harness.subscriber(CODEC)
    await pub.close()
    await sub.close()
    with pytest.raises(PublishError, match="closed"):
        await pub.publish("orders.x", order())
    with pytest.raises(SubscribeError, match="closed"):
        await sub.start("orders.x", Inbox[Order]())


async def test_subscribe_runs_until_cancelled(decoupled_harness: Harness) -> None:
    harness = decoupled_harness
    inbox: Inbox[Order] = Inbox()
    async with harness.subscriber(CODEC) as sub, harness.publisher(CODEC) as pub:
        control: Inbox[Order] = Inbox()
        await sub.start("orders.ctl", control)
        running = asyncio.create_task(sub.subscribe("orders.run", inbox))
        # subscribe() gives no readiness signal; the first delivery is the signal.
        async with asyncio.timeout(10):
            while not inbox.messages:
                await pub.publish("orders.run", order(1))
                await asyncio.sleep(0)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        delivered = len(inbox.messages)
        await pub.publish("orders.run", order(2))
        await pub.publish("orders.ctl", order(3))
        await control.wait_for(1)
    assert len(inbox.messages) == delivered
    assert all(p == order(1) for p in inbox.payloads)


async def test_producer_and_consumer_spans_are_linked_not_parented(
    span_harness: Harness, otel: Otel
) -> None:
    harness = span_harness
    seen_in_handler: list[trace.SpanContext] = []
    handled = asyncio.Event()

    async def handler(msg: Message[Order]) -> None:
        seen_in_handler.append(trace.get_current_span().get_span_context())
        handled.set()

    sub = harness.subscriber(CODEC, telemetry=otel.telemetry)
    pub = harness.publisher(CODEC, telemetry=otel.telemetry)
    subscription = await sub.start("orders.traced", handler)
    await pub.publish("orders.traced", order(), message_id="m-1")
    async with asyncio.timeout(10):
        await handled.wait()
    await subscription.stop()  # the drain guarantees the consumer span has ended
    await sub.close()
    await pub.close()

    producer = otel.span("send orders.traced")
    consumer = otel.span("process orders.traced")
    assert producer.kind is SpanKind.PRODUCER
    assert consumer.kind is SpanKind.CONSUMER
    assert consumer.parent is None, "the consumer span must not be a child of the producer"
    assert producer.context is not None
    assert [(link.context.trace_id, link.context.span_id) for link in consumer.links] == [
        (producer.context.trace_id, producer.context.span_id)
    ]
    assert consumer.links[0].context.is_remote
    assert consumer.context.trace_id != producer.context.trace_id
    assert seen_in_handler == [consumer.context]
    for span, operation in ((producer, "send"), (consumer, "process")):
        attrs = dict(span.attributes or {})
        assert attrs["messaging.operation.name"] == operation
        assert attrs["messaging.operation.type"] == operation
        assert attrs["messaging.destination.name"] == "orders.traced"
        assert attrs["messaging.message.id"] == "m-1"
        assert attrs["messaging.system"]
        assert "error.type" not in attrs


async def test_queue_group_members_split_the_messages(queue_harness: Harness) -> None:
    got: Counter[str] = Counter()
    per_member: list[Inbox[Order]] = [Inbox(), Inbox()]
    total = asyncio.Event()

    def member(inbox: Inbox[Order]):  # type: ignore[no-untyped-def]
        async def handler(msg: Message[Order]) -> None:
            await inbox(msg)
            got[msg.payload.id] += 1
            if sum(got.values()) == 1000:
                total.set()

        return handler

    async with (
        queue_harness.subscriber(CODEC, queue="workers") as a,
        queue_harness.subscriber(CODEC, queue="workers") as b,
        queue_harness.publisher(CODEC) as pub,
    ):
        await a.start("orders.work", member(per_member[0]))
        await b.start("orders.work", member(per_member[1]))
        for n in range(1000):
            await pub.publish("orders.work", order(n))
        async with asyncio.timeout(20):
            await total.wait()
    assert len(got) == 1000, "a message was lost"
    assert set(got.values()) == {1}, "a message was delivered twice"
    assert all(inbox.messages for inbox in per_member), "one member received nothing"


# ------------------------------------------------- at-least-once (transports with acks)


async def test_a_nak_brings_the_message_back_with_its_delivery_count(ack_harness: Harness) -> None:
    deliveries: list[tuple[str, int]] = []
    done = asyncio.Event()

    async def handler(msg: Message[Order]) -> None:
        assert msg.delivery is not None
        deliveries.append((msg.payload.id, msg.delivery.num_delivered))
        if msg.delivery.num_delivered == 1:
            await msg.nak()
        else:
            done.set()  # auto-ack on return

    async with ack_harness.subscriber(CODEC) as sub, ack_harness.publisher(CODEC) as pub:
        await sub.start("orders.nak", handler)
        await pub.publish("orders.nak", order(1))
        async with asyncio.timeout(10):
            await done.wait()
    assert deliveries == [("o-1", 1), ("o-1", 2)]


async def test_manual_ack_leaves_settlement_to_the_handler(ack_harness: Harness) -> None:
    outcomes: list[tuple[str, str | None]] = []
    done = asyncio.Event()

    async def handler(msg: Message[Order]) -> None:
        if msg.payload.id == "o-1":
            await msg.term("refused")
        else:
            await msg.ack()
        outcomes.append((msg.payload.id, msg.settled))
        if len(outcomes) == 2:
            done.set()

    async with (
        ack_harness.subscriber(CODEC, manual_ack=True) as sub,
        ack_harness.publisher(CODEC) as pub,
    ):
        await sub.start("orders.manual", handler)
        await pub.publish("orders.manual", order(1))
        await pub.publish("orders.manual", order(2))
        async with asyncio.timeout(10):
            await done.wait()
    assert outcomes == [("o-1", "term"), ("o-2", "ack")]
