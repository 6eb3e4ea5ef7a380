"""goflux.consumer.lag and goflux.consumer.pending: levels read when a reader collects.

A handler holds the only worker; the messages published meanwhile wait in the
subscription's buffer, and the lag gauge reports them on the subscription's subject.
Released, the lag drops to 0; stopped, the subscription is gone from the gauge (and
from the registry behind it: nothing leaks). Waits are on real signals: the gauge
itself, read after a round trip to the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from opentelemetry.sdk.metrics.export import NumberDataPoint

from goflux import Message, Publisher, StrCodec
from goflux.transports import channel, jetstream
from goflux.transports import nats as gnats
from goflux.transports._natspy import flush
from tests.conftest import STREAM, Otel
from tests.helpers import num_pending_is

pytestmark = pytest.mark.timeout(60)

WAITING = 5


def level(otel: Otel, name: str, subject: str) -> int | None:
    """The gauge ``name``'s value for ``subject`` at a collection (None: not reported)."""
    metric = otel.metrics().get(name)
    if metric is None:
        return None
    found = [
        int(point.value)
        for point in metric.data.data_points
        if isinstance(point, NumberDataPoint)
        and (point.attributes or {}).get("messaging.destination.name") == subject
    ]
    assert len(found) <= 1
    return found[0] if found else None


class Busy:
    """A handler whose first message holds the worker until released."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.handled = 0
        self.all_handled = asyncio.Event()
        self.expected = 1 + WAITING

    async def __call__(self, msg: Message[str]) -> None:
        self.started.set()
        await self.release.wait()
        self.handled += 1
        if self.handled == self.expected:
            self.all_handled.set()


async def until(
    check: Callable[[], bool], round_trip: Callable[[], Awaitable[None]], expected: str
) -> None:
    """Wait until ``check()`` holds, making a round trip to the server between looks.

    A round trip is never cancelled (nats-py's flush cannot take it, and on Python 3.11
    its ``wait_for`` may swallow the cancellation of an ``asyncio.timeout``): the
    deadline is checked between round trips, each bounded by its own timeout.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while not check():
        assert loop.time() < deadline, expected
        await round_trip()


def flushed(nc: Client) -> Callable[[], Awaitable[None]]:
    """A round trip to the server on ``nc`` (goflux's flush: shielded, bounded)."""
    return lambda: flush(nc)


async def test_channel_lag_counts_the_waiting_messages_and_leaves_with_the_subscription(
    otel: Otel,
) -> None:
    bus = channel.Bus(codec=StrCodec())
    busy = Busy()
    lag = otel.telemetry.counters.lag
    async with channel.Publisher(bus, telemetry=otel.telemetry) as pub:
        sub = channel.Subscriber(bus, telemetry=otel.telemetry)
        subscription = await sub.start("orders.created", busy)
        assert len(lag) == 1
        await pub.publish("orders.created", "first")
        await busy.started.wait()
        for n in range(WAITING):
            await pub.publish("orders.created", f"o-{n}")
        # A channel publish puts the message in the inbox before it returns: exact.
        assert level(otel, "goflux.consumer.lag", "orders.created") == WAITING
        busy.release.set()
        await busy.all_handled.wait()
        assert level(otel, "goflux.consumer.lag", "orders.created") == 0
        await subscription.stop()
    assert level(otel, "goflux.consumer.lag", "orders.created") is None
    assert len(lag) == 0
    # Start and stop again and again: the registry stays empty.
    for _ in range(3):
        again = await channel.Subscriber(bus, telemetry=otel.telemetry).start("a.b", busy)
        await again.stop(timeout=0)
    assert len(lag) == 0


async def lag_rises_and_falls(otel: Otel, nc: Client, busy: Busy, pub: Publisher[str]) -> None:
    """Hold the worker with one order, publish WAITING more: the lag reaches them, then 0."""
    await pub.publish("orders.created", "first")
    await busy.started.wait()
    for n in range(WAITING):
        await pub.publish("orders.created", f"o-{n}")
    await until(
        lambda: (level(otel, "goflux.consumer.lag", "orders.created") or 0) >= WAITING,
        flushed(nc),
        f"goflux.consumer.lag of at least {WAITING}",
    )
    busy.release.set()
    await busy.all_handled.wait()
    assert level(otel, "goflux.consumer.lag", "orders.created") == 0


async def test_core_nats_lag(nc: Client, otel: Otel) -> None:
    busy = Busy()
    sub = gnats.Subscriber(nc, StrCodec(), telemetry=otel.telemetry)
    subscription = await sub.start("orders.created", busy)
    pub = gnats.Publisher(nc, StrCodec(), telemetry=otel.telemetry)
    await lag_rises_and_falls(otel, nc, busy, pub)
    await subscription.stop()
    assert level(otel, "goflux.consumer.lag", "orders.created") is None
    assert len(otel.telemetry.counters.lag) == 0


async def test_jetstream_lag_and_pending(nc: Client, js: JetStreamContext, otel: Otel) -> None:
    publisher = jetstream.Publisher(js, StrCodec(), telemetry=otel.telemetry)
    # Stored before the subscription starts; at most two in flight: the first held
    # by the worker, the second waiting, four pending at the server.
    for n in range(1 + WAITING):
        await publisher.publish("orders.created", f"o-{n}")
    busy = Busy()
    subscriber = jetstream.Subscriber(
        js, StrCodec(), stream=STREAM, max_in_flight=2, telemetry=otel.telemetry
    )
    subscription = await subscriber.start("orders.created", busy)
    await busy.started.wait()
    await until(
        lambda: level(otel, "goflux.consumer.lag", "orders.created") == 1,
        flushed(nc),
        "goflux.consumer.lag of 1",
    )
    assert level(otel, "goflux.consumer.pending", "orders.created") == WAITING - 1
    [point] = otel.metrics()["goflux.consumer.pending"].data.data_points
    assert point.attributes == {
        "messaging.system": "nats-jetstream",
        "messaging.destination.name": "orders.created",
        "messaging.consumer.group.name": subscription.consumer,
    }
    busy.release.set()
    await busy.all_handled.wait()
    assert level(otel, "goflux.consumer.lag", "orders.created") == 0
    assert level(otel, "goflux.consumer.pending", "orders.created") == 0
    await subscription.stop()
    assert level(otel, "goflux.consumer.lag", "orders.created") is None
    assert level(otel, "goflux.consumer.pending", "orders.created") is None
    counters = otel.telemetry.counters
    assert (len(counters.lag), len(counters.pending)) == (0, 0)


async def test_jetstream_lag_reaches_the_waiting_count(
    nc: Client, js: JetStreamContext, otel: Otel
) -> None:
    busy = Busy()
    subscriber = jetstream.Subscriber(js, StrCodec(), stream=STREAM, telemetry=otel.telemetry)
    subscription = await subscriber.start("orders.created", busy)
    publisher = jetstream.Publisher(js, StrCodec(), telemetry=otel.telemetry)
    await lag_rises_and_falls(otel, nc, busy, publisher)
    await subscription.stop()
    assert len(otel.telemetry.counters.lag) == 0


async def test_core_nats_lag_counts_a_message_waiting_for_a_busy_slot(
    nc: Client, otel: Otel
) -> None:
    # Three handlers run at once; every slot is busy, so each message published meanwhile
    # waits: four in nats-py's pending queue, one taken from it and waiting for a slot.
    concurrency = 3
    busy = Busy()
    started = 0
    all_busy = asyncio.Event()

    async def handler(msg: Message[str]) -> None:
        nonlocal started
        started += 1
        if started == concurrency:
            all_busy.set()
        await busy.release.wait()

    sub = gnats.Subscriber(nc, StrCodec(), concurrency=concurrency, telemetry=otel.telemetry)
    subscription = await sub.start("orders.created", handler)
    pub = gnats.Publisher(nc, StrCodec())
    for n in range(concurrency):
        await pub.publish("orders.created", f"b-{n}")
    await all_busy.wait()
    for n in range(WAITING):
        await pub.publish("orders.created", f"o-{n}")
    await until(
        lambda: level(otel, "goflux.consumer.lag", "orders.created") == WAITING,
        flushed(nc),
        f"goflux.consumer.lag of {WAITING}",
    )
    busy.release.set()
    await subscription.stop()
    assert len(otel.telemetry.counters.lag) == 0


async def _stream_lag(
    otel: Otel,
    subscriber: gnats.Subscriber[str] | jetstream.Subscriber[str] | channel.Subscriber[str],
    publish: Callable[[str], Awaitable[None]],
    round_trip: Callable[[], Awaitable[None]],
) -> None:
    """Messages buffered in a stream nobody takes from count as lag, until it closes."""
    lag = otel.telemetry.counters.lag
    async with subscriber.stream("orders.created", buffer=100) as stream:
        await publish("first")  # taken: the stream works
        async for message in stream:
            await message.ack()
            break
        for n in range(WAITING):
            await publish(f"o-{n}")
        await until(lambda: stream.buffered == WAITING, round_trip, f"{WAITING} messages buffered")
        assert level(otel, "goflux.consumer.lag", "orders.created") == WAITING
        async for message in stream:
            await message.ack()
            if stream.buffered == 0:
                break
        assert level(otel, "goflux.consumer.lag", "orders.created") == 0
    assert level(otel, "goflux.consumer.lag", "orders.created") is None
    assert len(lag) == 0


async def test_a_message_streams_buffer_counts_as_lag_on_jetstream(
    nc: Client, js: JetStreamContext, otel: Otel
) -> None:
    publisher = jetstream.Publisher(js, StrCodec())

    async def publish(text: str) -> None:
        await publisher.publish("orders.created", text)

    subscriber = jetstream.Subscriber(js, StrCodec(), stream=STREAM, telemetry=otel.telemetry)
    await _stream_lag(otel, subscriber, publish, flushed(nc))


async def test_a_message_streams_buffer_counts_as_lag_on_core_nats(nc: Client, otel: Otel) -> None:
    publisher = gnats.Publisher(nc, StrCodec())

    async def publish(text: str) -> None:
        await publisher.publish("orders.created", text)

    subscriber = gnats.Subscriber(nc, StrCodec(), telemetry=otel.telemetry)
    await _stream_lag(otel, subscriber, publish, flushed(nc))


async def test_a_message_streams_buffer_counts_as_lag_on_the_channel(otel: Otel) -> None:
    bus = channel.Bus(codec=StrCodec())
    publisher = channel.Publisher(bus)

    async def publish(text: str) -> None:
        await publisher.publish("orders.created", text)

    async def round_trip() -> None:
        await asyncio.sleep(0)  # the subscription's task moves the message to the stream

    subscriber = channel.Subscriber(bus, telemetry=otel.telemetry)
    await _stream_lag(otel, subscriber, publish, round_trip)


@pytest.mark.slow  # refresh intervals
async def test_jetstream_pending_follows_the_servers_backlog_while_nothing_is_delivered(
    nc: Client, js: JetStreamContext, otel: Otel
) -> None:
    # At most two in flight, both held by a stuck handler: nothing more is delivered,
    # so no ack subject brings a new pending count; the gauge asks the server instead.
    busy = Busy()
    subscriber = jetstream.Subscriber(
        js, StrCodec(), stream=STREAM, max_in_flight=2, telemetry=otel.telemetry
    )
    subscription = await subscriber.start("orders.created", busy)
    # A fresh subscription gets a series before anything is delivered: the first
    # collection has it ask the server (within PENDING_REFRESH).
    await until(
        lambda: level(otel, "goflux.consumer.pending", "orders.created") == 0,
        flushed(nc),
        "goflux.consumer.pending of 0 before the first delivery",
    )
    publisher = jetstream.Publisher(js, StrCodec())
    for n in range(1 + WAITING):
        await publisher.publish("orders.created", f"o-{n}")
    await busy.started.wait()
    for n in range(20):  # the backlog grows while the handler is stuck
        await publisher.publish("orders.created", f"later-{n}")
    server = 0

    async def ask_the_server() -> None:
        nonlocal server
        server = (await js.consumer_info(STREAM, subscription.consumer)).num_pending

    # The server counts them off a queue of its own, after the PubAcks.
    server = await num_pending_is(js, STREAM, subscription.consumer, 1 + WAITING + 20 - 2)
    await until(
        lambda: level(otel, "goflux.consumer.pending", "orders.created") == server,
        ask_the_server,
        "goflux.consumer.pending equal to the server's num_pending",
    )
    busy.release.set()
    await subscription.stop()
    assert level(otel, "goflux.consumer.pending", "orders.created") is None
