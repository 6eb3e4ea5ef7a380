"""Message streams and process(): back-pressure, settlement, bounded concurrency."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections import Counter

import pytest
from nats.js import JetStreamContext

from goflux import (
    AlreadySettled,
    InvalidSubject,
    Message,
    MessageStream,
    NonRetryable,
    StrCodec,
    SubscribeError,
    message_stream,
    process,
)
from goflux.transports import channel, jetstream
from tests.conftest import STREAM
from tests.helpers import settle_loop


async def consumer_info(js: JetStreamContext, name: str) -> tuple[int, int, int]:
    info = await js.consumer_info(STREAM, name)
    return info.num_ack_pending, info.num_redelivered, info.num_pending


async def publish_orders(js: JetStreamContext, count: int) -> None:
    pub = jetstream.Publisher(js, StrCodec())
    await pub.publish_many(jetstream.Outgoing("orders.new", f"o{i}") for i in range(count))


# ---------------------------------------------------------------- channel


async def test_stream_yields_messages_in_order_and_applies_back_pressure() -> None:
    bus: channel.Bus[int] = channel.Bus(buffer=1)
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    async with sub.stream("n", buffer=2) as numbers:
        # Publisher blocks once the stream's buffer (2), the handler (1) and the route's
        # inbox (1) are full: it is pushed back on, nothing is dropped.
        publishing = asyncio.create_task(_publish_range(pub, 20))
        await settle_loop()
        assert not publishing.done()
        assert numbers.buffered == 2
        got = [(await anext(numbers)).payload for _ in range(20)]
        await publishing
    assert got == list(range(20))


async def _publish_range(pub: channel.Publisher[int], count: int) -> None:
    for i in range(count):
        await pub.publish("n", i)


async def test_stream_stop_ends_iteration_after_what_was_received() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    stream = sub.stream("n", buffer=100)
    await stream.start()
    for i in range(5):
        await pub.publish("n", i)
    await stream.stop()
    assert [m.payload async for m in stream] == [0, 1, 2, 3, 4]
    assert stream.subscription is not None
    assert not stream.subscription.running


async def test_stream_close_counts_unconsumed_messages_on_a_transport_without_acks() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    async with sub.stream("n", buffer=10) as stream:
        for i in range(3):
            await pub.publish("n", i)
        await settle_loop()
        assert stream.buffered == 3
    assert stream.dropped == 3
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


async def test_closing_the_subscriber_ends_its_streams() -> None:
    bus: channel.Bus[int] = channel.Bus()
    sub = channel.Subscriber(bus)
    stream = await sub.stream("n").start()
    ending = asyncio.create_task(anext(stream))
    await sub.close()
    with pytest.raises(StopAsyncIteration):
        await ending


async def test_stream_of_a_subscriber_outside_goflux_uses_its_start() -> None:
    bus: channel.Bus[int] = channel.Bus()
    inner = channel.Subscriber(bus)

    class Wrapped:  # implements the Subscriber protocol without goflux's mixin
        async def start(self, subject: str, handler):  # type: ignore[no-untyped-def]
            return await inner.start(subject, handler)

        async def subscribe(self, subject: str, handler) -> None:  # type: ignore[no-untyped-def]
            await inner.subscribe(subject, handler)

        async def close(self) -> None:
            await inner.close()

    stream: MessageStream[int] = message_stream(Wrapped(), "n")  # type: ignore[arg-type]
    async with stream:
        await channel.Publisher(bus).publish("n", 7)
        assert (await anext(stream)).payload == 7


async def test_stream_refuses_bad_options() -> None:
    sub = channel.Subscriber(channel.Bus[int]())
    with pytest.raises(ValueError, match="buffer"):
        sub.stream("n", buffer=0)
    with pytest.raises(InvalidSubject, match="empty token"):
        sub.stream("a..b")


async def test_process_bounds_concurrency_and_isolates_failures() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    running = peak = 0
    seen: list[int] = []

    async def handle(message: Message[int]) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await asyncio.sleep(0.001 * (message.payload % 3))
            if message.payload % 10 == 0:
                raise RuntimeError(f"bad {message.payload}")
            seen.append(message.payload)
        finally:
            running -= 1

    stream = sub.stream("n", buffer=8)
    await stream.start()
    processing = asyncio.create_task(process(stream, handle, concurrency=4))
    for i in range(100):
        await pub.publish("n", i)
    await stream.stop()
    stats = await processing
    assert peak == 4
    assert (stats.handled, stats.failed) == (90, 10)
    assert sorted(seen) == [i for i in range(100) if i % 10]


@pytest.mark.slow  # 12,000 messages
async def test_process_memory_stays_bounded_on_an_endless_stream() -> None:
    bus: channel.Bus[bytes] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    handled = 0
    samples: dict[int, int] = {}

    async def handle(message: Message[bytes]) -> None:
        nonlocal handled
        handled += 1
        if handled in (2_000, 12_000):
            samples[handled] = tracemalloc.get_traced_memory()[0]

    stream = sub.stream("n", buffer=16)
    await stream.start()
    tracemalloc.start()
    try:
        processing = asyncio.create_task(process(stream, handle, concurrency=4))
        payload = b"x" * 256
        for _ in range(12_000):
            await pub.publish("n", payload)
        await stream.stop()
        await processing
    finally:
        tracemalloc.stop()
    # 10,000 more messages (2.5 MB of payload alone) went through: memory did not grow.
    assert samples[12_000] - samples[2_000] < 200_000


async def test_process_cancellation_cancels_running_handlers() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    started = asyncio.Event()
    cancelled: list[int] = []

    async def handle(message: Message[int]) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(message.payload)
            raise

    async with sub.stream("n") as stream:
        processing = asyncio.create_task(process(stream, handle, concurrency=2))
        await pub.publish("n", 1)
        await started.wait()
        processing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await processing
    assert cancelled == [1]


async def test_process_refuses_zero_concurrency() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        await process(channel.Subscriber(channel.Bus[int]()).stream("n"), _noop, concurrency=0)


async def _noop(message: Message[object]) -> None:
    pass


# -------------------------------------------------------------- JetStream


async def test_jetstream_process_runs_at_most_4_handlers_and_acks_each_message_once(
    js: JetStreamContext,
) -> None:
    await jetstream.ensure_consumer(js, stream=STREAM, name="proc", filter_subject="orders.>")
    await publish_orders(js, 200)
    sub = jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer="proc")
    running = peak = 0
    handled: Counter[str] = Counter()
    all_done = asyncio.Event()

    async def handle(message: Message[str]) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.002)
        running -= 1
        handled[message.payload] += 1
        if len(handled) == 200:
            all_done.set()

    acks: list[str] = []
    async with sub.stream("orders.>", buffer=16) as stream:
        processing = asyncio.create_task(process(stream, handle, concurrency=4))
        async with asyncio.timeout(20):
            await all_done.wait()
        await stream.stop()
        stats = await processing
        acks = [k for k, v in handled.items() if v == 1]
    assert peak == 4
    assert stats.handled == 200
    assert stats.failed == 0
    assert len(acks) == 200
    # Acks are fire-and-forget: the server applies them a moment after they arrive.
    # Each consumer_info is a round trip behind them, so this polls at the server's pace.
    async with asyncio.timeout(10):
        while (state := await consumer_info(js, "proc"))[0] and state[1] == 0:
            pass
    ack_pending, redelivered, pending = state
    assert (ack_pending, redelivered, pending) == (0, 0, 0)
    info = await js.consumer_info(STREAM, "proc")
    assert info.ack_floor.stream_seq == 200  # every message acked


@pytest.mark.slow  # back-off timers
async def test_process_redelivers_a_failing_message_later_each_time_and_drops_a_permanent_one(
    js: JetStreamContext,
) -> None:
    await jetstream.ensure_consumer(js, stream=STREAM, name="fails", filter_subject="orders.>")
    await publish_orders(js, 2)
    sub = jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer="fails")
    times: dict[str, list[float]] = {"o0": [], "o1": []}
    third = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def handle(message: Message[str]) -> None:
        times[message.payload].append(loop.time())
        if message.payload == "o1":
            raise NonRetryable("never")
        if len(times["o0"]) == 3:
            third.set()
        raise RuntimeError("again")

    async with sub.stream("orders.>") as stream:
        processing = asyncio.create_task(process(stream, handle))
        async with asyncio.timeout(20):
            await third.wait()
        await stream.stop()
        stats = await processing
    o0 = times["o0"]
    assert o0[1] - o0[0] >= 0.4, o0  # about 0.5 s
    assert o0[2] - o0[1] >= 0.85, o0  # then about 1 s
    assert len(times["o1"]) == 1  # terminated, never redelivered
    assert stats.failed >= 4


async def test_jetstream_stream_keeps_the_acker_and_holds_messages_until_settled(
    js: JetStreamContext,
) -> None:
    await jetstream.ensure_consumer(js, stream=STREAM, name="held", filter_subject="orders.>")
    await publish_orders(js, 3)
    sub = jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer="held", max_in_flight=8)
    async with sub.stream("orders.>", buffer=4) as stream:
        first, second, third = [await anext(stream) for _ in range(3)]
        assert first.acknowledgeable
        assert first.delivery is not None
        subscription = stream.subscription
        assert subscription is not None
        assert subscription.outstanding == 3  # type: ignore[attr-defined]
        await first.ack()
        await second.nak(delay=30)
        assert subscription.outstanding == 1  # type: ignore[attr-defined]
        assert stream.unsettled == 1
    # Leaving the stream handed the third back at once: it is unsettled no more.
    assert third.settled == "nak"
    with pytest.raises(AlreadySettled):
        await third.ack()
    redelivered = jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer="held")
    async with redelivered.stream("orders.>") as again:
        message = await anext(again)
        assert message.payload == "o2"
        assert message.delivery is not None
        assert message.delivery.num_delivered == 2
        await message.ack()


async def test_messages_meeting_a_closed_stream_are_handed_back_not_counted_handled(
    js: JetStreamContext,
) -> None:
    """Handlers waiting for room when the stream closes buffer nothing: the
    subscription hands their messages back, and ``handled`` counts only the buffered."""
    await jetstream.ensure_consumer(js, stream=STREAM, name="full", filter_subject="orders.>")
    await publish_orders(js, 10)
    sub = jetstream.Subscriber(
        js, StrCodec(), stream=STREAM, consumer="full", max_in_flight=10, concurrency=10
    )
    stream = await sub.stream("orders.>", buffer=1).start()
    first = await anext(stream)  # its room goes to the next: 2 buffered in all
    subscription = stream.subscription
    assert subscription is not None
    async with asyncio.timeout(10):
        while subscription.outstanding < 10:  # type: ignore[attr-defined]
            await settle_loop(5)
    await settle_loop()  # the 8 others wait for room in the stream
    await stream.close()
    assert first.settled == "nak"
    assert subscription.handled == 2  # type: ignore[attr-defined]
    again = jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer="full")
    async with again.stream("orders.>") as redelivered:  # every one was handed back
        for _ in range(10):
            message = await anext(redelivered)
            assert message.delivery is not None
            assert message.delivery.num_delivered == 2
            await message.ack()


async def test_jetstream_stream_failure_of_the_consumer_is_raised(js: JetStreamContext) -> None:
    sub = jetstream.Subscriber(js, StrCodec(), stream="NOPE")
    with pytest.raises(SubscribeError, match="not found"):
        async with sub.stream("orders.>"):
            pass


async def test_close_during_a_graceful_stop_hands_back_at_once(js: JetStreamContext) -> None:
    await jetstream.ensure_consumer(js, stream=STREAM, name="late", filter_subject="orders.>")
    await publish_orders(js, 3)
    sub = jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer="late", drain_timeout=20)
    stream = await sub.stream("orders.>").start()
    held = [await anext(stream) for _ in range(3)]
    stopping = asyncio.create_task(stream.stop())  # another task: waits for the drain
    await settle_loop()
    async with asyncio.timeout(3):  # not the 20 s drain deadline
        await stream.close()
        await stopping
    assert [m.settled for m in held] == ["nak", "nak", "nak"]


async def test_stop_from_one_of_two_consumers_does_not_wait_for_itself(
    js: JetStreamContext,
) -> None:
    await publish_orders(js, 2)
    sub = jetstream.Subscriber(js, StrCodec(), stream=STREAM, drain_timeout=20)
    async with sub.stream("orders.>") as stream:
        first = await anext(stream)
        other = asyncio.create_task(anext(stream))
        second = await other
        async with asyncio.timeout(3):
            await stream.stop()  # this task holds `first`: it must not wait for it
        await first.ack()
        await second.ack()
        assert [m async for m in stream] == []


async def test_a_stream_stopped_before_it_starts_never_subscribes() -> None:
    bus: channel.Bus[int] = channel.Bus()
    stream = channel.Subscriber(bus).stream("n")
    await stream.stop()
    assert [m async for m in stream] == []
    assert bus.subscription_count == 0
