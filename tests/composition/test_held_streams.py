"""A JetStream stream's subscription holds the messages it hands to the stream.

It runs no handler per message: each is handed to the stream's buffer and held
(in flight, kept alive, handed back at the drain deadline) until the stream's consumer
settles it. These tests check each of those duties against a real server, what a
held message costs, and that a subscriber outside goflux still holds messages by
running the stream's handler until they are settled.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from collections import Counter
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from goflux import (
    AlreadySettled,
    Message,
    MessageStream,
    StrCodec,
    SubscribeError,
    Telemetry,
    message_stream,
    process,
)
from goflux.transports import jetstream
from tests.conftest import STREAM, Otel
from tests.helpers import Inbox, drained, settle_loop

DEADLINE = 10.0  # seconds a test waits for a state it expects


async def publish_orders(
    js: JetStreamContext, count: int, telemetry: Telemetry | None = None
) -> None:
    pub = jetstream.Publisher(js, StrCodec(), telemetry=telemetry)
    await pub.publish_many(jetstream.Outgoing("orders.new", f"o{i}") for i in range(count))


async def orders_on(
    js: JetStreamContext, consumer: str, count: int, **options: Any
) -> jetstream.Subscriber[str]:
    """A subscriber of durable consumer ``consumer``, with ``count`` orders published."""
    await jetstream.ensure_consumer(js, stream=STREAM, name=consumer, filter_subject="orders.>")
    await publish_orders(js, count)
    return jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer=consumer, **options)


async def delivered(js: JetStreamContext, consumer: str, count: int) -> None:
    """Wait until the server has ``count`` messages of ``consumer`` out, and they arrived."""
    async with asyncio.timeout(DEADLINE):
        while (await js.consumer_info(STREAM, consumer)).num_ack_pending < count:
            await js._nc.flush()
    await js._nc.flush()  # what the server sent before this round trip has been read
    await settle_loop()  # and passed from the inbox to the subscription


def goflux_tasks() -> list[str]:
    current = asyncio.current_task()
    return [
        t.get_name() for t in asyncio.all_tasks() if t is not current and "goflux" in t.get_name()
    ]


async def test_held_messages_cost_no_task_each_and_little_memory(js: JetStreamContext) -> None:
    count = 400
    await jetstream.ensure_consumer(js, stream=STREAM, name="many", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer="many", max_in_flight=count)
    held: list[Message[str]] = []
    async with sub.stream("orders.>", buffer=count) as stream:
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            await publish_orders(js, count)  # published now: every one arrives while traced
            async with asyncio.timeout(DEADLINE):
                held.extend([await anext(stream) for _ in range(count)])
            per_message = (tracemalloc.get_traced_memory()[0] - before) / count
        finally:
            tracemalloc.stop()
        assert stream.unsettled == count
        # A worker hands messages over; nothing waits per message.
        assert len(goflux_tasks()) < 8, goflux_tasks()
        # About 900 bytes: the message, its acker, subject, reply subject and payload,
        # and what publishing them left behind (3,400 with a task per message).
        assert per_message < 1_500, per_message
        for message in held:
            await message.ack()
        assert stream.unsettled == 0
    info = await drained(js, STREAM, "many")
    assert info.num_redelivered == 0


@pytest.mark.slow  # waits out ack_wait
async def test_held_messages_get_in_progress_signals_past_ack_wait(
    nc: Client, js: JetStreamContext
) -> None:
    await jetstream.ensure_consumer(
        js, stream=STREAM, name="slow", filter_subject="orders.>", ack_wait=2.0
    )
    signals: Counter[str] = Counter()
    kept = asyncio.Event()

    async def on_ack(msg: Msg) -> None:
        if msg.data == b"+WPI":
            signals[msg.subject] += 1
            # Two signals each: the second comes after ack_wait has passed once.
            if len(signals) == 3 and min(signals.values()) >= 2:
                kept.set()

    watch = await nc.subscribe(f"$JS.ACK.{STREAM}.slow.>", cb=on_ack)
    await nc.flush()
    await publish_orders(js, 3)
    sub = jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer="slow", max_in_flight=8)
    async with sub.stream("orders.>", buffer=1) as stream:
        # One handed out, one buffered, one waiting for room in the buffer.
        first = await anext(stream)
        await delivered(js, "slow", 3)
        assert (stream.unsettled, stream.buffered) == (1, 1)
        async with asyncio.timeout(DEADLINE):
            await kept.wait()
        info = await js.consumer_info(STREAM, "slow")
        assert (info.num_ack_pending, info.num_redelivered) == (3, 0)
        await first.ack()
        for _ in range(2):
            await (await anext(stream)).ack()
    await watch.unsubscribe()
    assert (await drained(js, STREAM, "slow")).num_redelivered == 0


async def test_a_full_buffer_stops_intake_and_max_in_flight_bounds_what_is_out(
    js: JetStreamContext,
) -> None:
    sub = await orders_on(js, "bp", 20, max_in_flight=10)
    async with sub.stream("orders.>", buffer=2) as stream:
        out = [await anext(stream) for _ in range(3)]
        await delivered(js, "bp", 10)
        # 3 handed out, 2 buffered, the other 5 received wait for room.
        subscription = stream.subscription
        assert isinstance(subscription, jetstream.JetStreamSubscription)
        assert (stream.unsettled, stream.buffered, subscription.outstanding) == (3, 2, 10)
        assert (await js.consumer_info(STREAM, "bp")).num_ack_pending == 10
        payloads = [m.payload for m in out]
        for message in out:
            await message.ack()
        async with asyncio.timeout(DEADLINE):
            while len(payloads) < 20:
                message = await anext(stream)
                payloads.append(message.payload)
                await message.ack()
    assert payloads == [f"o{i}" for i in range(20)]  # one worker hands them over in order
    assert (await drained(js, STREAM, "bp")).num_redelivered == 0


async def test_a_drain_goes_on_through_what_was_received_until_all_is_settled(
    js: JetStreamContext,
) -> None:
    sub = await orders_on(js, "drain", 6, max_in_flight=8, drain_timeout=20)
    stream = await sub.stream("orders.>", buffer=1).start()
    first = await anext(stream)
    # One handed out, one buffered, four received and waiting for room in the buffer.
    await delivered(js, "drain", 6)
    stopping = asyncio.create_task(stream.stop())  # another task: waits for the drain
    await settle_loop()
    assert not stopping.done()  # six messages are held, none settled
    async with asyncio.timeout(5):  # far below the 20 s deadline: done once all are settled
        rest = []
        for _ in range(5):  # iteration goes on through what was received
            message = await anext(stream)
            await message.ack()
            rest.append(message.payload)
        await settle_loop()
        assert not stopping.done()  # the first is still held: the drain waits for it
        await first.ack()
        await stopping
        assert [m async for m in stream] == []  # the drain is over: so is the stream
    assert rest == ["o1", "o2", "o3", "o4", "o5"]
    assert (await drained(js, STREAM, "drain")).num_redelivered == 0


async def test_the_drain_deadline_hands_back_held_and_buffered_messages(
    js: JetStreamContext,
) -> None:
    sub = await orders_on(js, "late", 3)
    stream = await sub.stream("orders.>", buffer=4).start()
    first = await anext(stream)
    await delivered(js, "late", 3)
    async with asyncio.timeout(5):
        await asyncio.create_task(stream.stop(0.2))  # another task: waits for the drain
    assert first.settled == "nak"
    with pytest.raises(AlreadySettled):
        await first.ack()
    assert [m async for m in stream] == []  # the buffered two were handed back as well
    inbox: Inbox[str] = Inbox()
    again = jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer="late")
    async with await again.start("orders.>", inbox):
        messages = await inbox.wait_for(3, timeout=5)  # a nak: at once, not after ack_wait
    assert sorted(m.payload for m in messages) == ["o0", "o1", "o2"]
    assert all(m.delivery and m.delivery.num_delivered == 2 for m in messages)


async def test_a_failed_subscription_hands_back_what_it_held(js: JetStreamContext) -> None:
    sub = await orders_on(js, "gone", 2)
    stream = await sub.stream("orders.>", buffer=4).start()
    first = await anext(stream)
    await delivered(js, "gone", 2)
    assert stream.buffered == 1
    await js.delete_consumer(STREAM, "gone")
    async with asyncio.timeout(DEADLINE):
        with pytest.raises(SubscribeError, match="deleted"):
            await anext(stream)  # the buffered one was handed back: not handed out
    assert first.settled == "nak"
    assert stream.unsettled == 0
    await stream.close()


async def test_a_held_message_is_processed_in_the_context_of_its_consumer_span(
    js: JetStreamContext, otel: Otel
) -> None:
    await jetstream.ensure_stream(js, name="SHIPPED", subjects=["shipped.>"])
    await publish_orders(js, 2, telemetry=otel.telemetry)
    sub = jetstream.Subscriber(js, StrCodec(), stream=STREAM, telemetry=otel.telemetry)
    out = jetstream.Publisher(js, StrCodec(), telemetry=otel.telemetry)
    done = asyncio.Event()
    seen = 0

    async def ship(message: Message[str]) -> None:
        nonlocal seen
        await out.publish("shipped.x", message.payload)
        seen += 1
        if seen == 2:
            done.set()

    stream: MessageStream[str] = sub.stream("orders.>")
    async with stream:
        processing = asyncio.create_task(process(stream, ship))
        async with asyncio.timeout(DEADLINE):
            await done.wait()
        await stream.stop()
        stats = await processing
        subscription = stream.subscription
        assert isinstance(subscription, jetstream.JetStreamSubscription)
        assert (subscription.handled, stats.handled) == (2, 2)  # handed to the stream
    consumers = [s for s in otel.spans() if s.name == "process orders.>"]
    sends = [s for s in otel.spans() if s.name == "send shipped.x"]
    assert len(consumers) == len(sends) == 2
    # Each publish of the handler is a child of its message's consumer span.
    assert sorted(s.parent.span_id for s in sends if s.parent) == sorted(
        c.context.span_id for c in consumers if c.context
    )


async def test_a_subscriber_outside_goflux_keeps_messages_in_flight_until_settled(
    js: JetStreamContext,
) -> None:
    inner = await orders_on(js, "wrapped", 2, concurrency=2)
    running = 0

    class Wrapped:  # a Subscriber that wraps handlers: the stream's handler runs per message
        async def start(self, subject: str, handler):  # type: ignore[no-untyped-def]
            async def wrapper(message: Message[str]) -> None:
                nonlocal running
                running += 1
                try:
                    await handler(message)
                finally:
                    running -= 1

            return await inner.start(subject, wrapper)

        async def subscribe(self, subject: str, handler) -> None:  # type: ignore[no-untyped-def]
            await inner.subscribe(subject, handler)

        async def close(self) -> None:
            await inner.close()

    stream: MessageStream[str] = message_stream(Wrapped(), "orders.>")  # type: ignore[arg-type]
    async with stream:
        first = await anext(stream)
        second = await anext(stream)
        subscription = stream.subscription
        assert isinstance(subscription, jetstream.JetStreamSubscription)
        assert (running, stream.unsettled, subscription.outstanding) == (2, 2, 2)
        await first.ack()
        await settle_loop()
        assert (running, stream.unsettled, subscription.outstanding) == (1, 1, 1)
    # Closing handed the second back.
    assert second.settled == "nak"
    assert running == 0


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_a_stream_keeps_the_order_whatever_the_subscriber_s_concurrency(
    js: JetStreamContext, concurrency: int
) -> None:
    sub = await orders_on(js, "order", 200, max_in_flight=64, concurrency=concurrency)
    payloads: list[str] = []
    async with sub.stream("orders.>", buffer=4) as stream, asyncio.timeout(DEADLINE):
        async for message in stream:
            payloads.append(message.payload)
            await message.ack()
            if len(payloads) % 3 == 0:
                await settle_loop()  # a slow consumer: the buffer fills, workers wait for room
            if len(payloads) == 200:
                break
    assert payloads == [f"o{i}" for i in range(200)]
