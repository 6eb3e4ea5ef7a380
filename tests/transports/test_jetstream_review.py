"""JetStream defects found in the review of the subscription split, each on a real server."""

from __future__ import annotations

import asyncio
import time

import pytest
from nats.js import JetStreamContext

from goflux import JsonCodec, Message, SubscribeError
from goflux.transports import jetstream
from tests.conftest import STREAM, Otel
from tests.models import Order, order

CODEC = JsonCodec(Order)


async def noop(_: Message[Order]) -> None:
    pass


async def test_deleting_an_ephemeral_consumer_fails_the_subscription(
    js: JetStreamContext,
) -> None:
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, expires=5.0)
    subscription = await sub.start("orders.>", noop)
    await asyncio.sleep(0.2)  # a pull request is open at the server
    await js.delete_consumer(STREAM, subscription.consumer)
    with pytest.raises(SubscribeError, match="deleted"):
        await asyncio.wait_for(subscription.wait(), 5)
    assert not subscription.running
    await sub.close()


@pytest.mark.parametrize("ordered", [False, True])
async def test_deleting_the_stream_fails_an_ephemeral_or_ordered_subscription(
    js: JetStreamContext, ordered: bool
) -> None:
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, expires=5.0, ordered=ordered)
    subscription = await sub.start("orders.>", noop)
    await asyncio.sleep(0.2)
    await js.delete_stream(STREAM)
    with pytest.raises(SubscribeError):
        await asyncio.wait_for(subscription.wait(), 5)
    await sub.close()


@pytest.mark.slow
async def test_a_draining_subscription_keeps_its_running_handler_alive(
    js: JetStreamContext,
) -> None:
    await jetstream.ensure_consumer(
        js, stream=STREAM, name="slow", filter_subject="orders.>", ack_wait=1.0
    )
    await jetstream.Publisher(js, CODEC).publish("orders.a", order(1))
    started = asyncio.Event()
    deliveries: list[tuple[str, int]] = []

    async def slow(msg: Message[Order]) -> None:
        deliveries.append(("first", msg.delivery.num_delivered))
        started.set()
        await asyncio.sleep(2.5)  # beyond ack_wait, inside the drain timeout

    async def other(msg: Message[Order]) -> None:
        deliveries.append(("second", msg.delivery.num_delivered))

    first = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="slow", drain_timeout=10)
    second = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="slow")
    draining = await first.start("orders.>", slow)
    await started.wait()
    await second.start("orders.>", other)
    begun = time.monotonic()
    await draining.stop()
    assert time.monotonic() - begun > 2  # the drain waited for the handler
    await asyncio.sleep(0.5)
    await second.close()
    assert deliveries == [("first", 1)]  # not redelivered while the handler ran


async def test_ordered_spans_name_the_consumer_that_delivered(
    js: JetStreamContext, otel: Otel
) -> None:
    delivered: asyncio.Queue[str] = asyncio.Queue()

    async def handler(msg: Message[Order]) -> None:
        await delivered.put(msg.delivery.consumer)

    publisher = jetstream.Publisher(js, CODEC)
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, ordered=True, telemetry=otel.telemetry)
    subscription = await sub.start("orders.>", handler)
    await publisher.publish("orders.a", order(1))
    first = await asyncio.wait_for(delivered.get(), 5)
    await js.delete_consumer(STREAM, first)
    async with asyncio.timeout(5):
        while subscription.consumer == first:  # noqa: ASYNC110 - nothing to wait on
            await asyncio.sleep(0.05)
    await publisher.publish("orders.a", order(2))
    second = await asyncio.wait_for(delivered.get(), 5)
    await sub.close()
    assert first != second
    names = [s.attributes["messaging.consumer.group.name"] for s in otel.spans()]  # type: ignore[index]
    assert names == [first, second]
