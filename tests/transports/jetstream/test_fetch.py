"""One-shot reads (``fetch``, ``next``) from a durable consumer, on a real server."""

from __future__ import annotations

import asyncio
import json

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux import BytesCodec, JsonCodec, RequestTimeout, SubscribeError
from goflux.middleware import DeadLetter
from goflux.transports import jetstream
from tests.conftest import STREAM, Otel
from tests.helpers import drained, pull_waiting
from tests.models import Order, order

CODEC = JsonCodec(Order)


async def publish(js: JetStreamContext, count: int, *, start: int = 0) -> None:
    publisher = jetstream.Publisher(js, CODEC)
    for n in range(start, start + count):
        await publisher.publish("orders.created", order(n), message_id=f"m-{n}")


async def durable(js: JetStreamContext, **config: object) -> jetstream.Subscriber[Order]:
    await jetstream.ensure_consumer(js, stream=STREAM, name="batch", ack_wait=30, **config)
    return jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="batch")


async def pending(js: JetStreamContext) -> tuple[int, int]:
    info = await js.consumer_info(STREAM, "batch")
    return info.num_pending or 0, info.num_ack_pending or 0


@pytest.mark.slow  # waits out a 0.5 s pull
async def test_fetch_10_then_the_other_15(js: JetStreamContext) -> None:
    await publish(js, 25)
    sub = await durable(js)
    first = await sub.fetch(10)
    assert [m.payload for m in first] == [order(n) for n in range(10)]
    assert all(isinstance(m.payload, Order) for m in first)
    assert [m.id for m in first] == [f"m-{n}" for n in range(10)]
    assert first[3].delivery is not None
    assert first[3].delivery.stream_sequence == 4
    for message in first:
        await message.ack()
    rest = await sub.fetch(100, expires=0.5)
    assert [m.payload for m in rest] == [order(n) for n in range(10, 25)]
    for message in rest:
        await message.ack()
    assert await sub.fetch(5, no_wait=True) == []


@pytest.mark.slow  # a 0.5 s timeout
async def test_next_on_an_empty_consumer_times_out_at_its_timeout(js: JetStreamContext) -> None:
    sub = await durable(js)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(RequestTimeout, match=r"within 0\.5s") as caught:
        await sub.next(timeout=0.5)
    waited = loop.time() - started
    assert 0.4 <= waited < 2.0
    assert caught.value.timeout == 0.5


async def test_next_returns_a_message_published_while_it_waits(js: JetStreamContext) -> None:
    sub = await durable(js)
    waiting = asyncio.ensure_future(sub.next(timeout=10))
    await pull_waiting(js, STREAM, "batch")
    await publish(js, 1, start=7)
    message = await waiting
    assert message.payload == order(7)
    await message.ack()


@pytest.mark.slow  # waits out a 0.5 s pull
async def test_unsettled_fetched_messages_are_redelivered_and_settled_ones_not(
    js: JetStreamContext,
) -> None:
    await publish(js, 4)
    sub = await durable(js)
    a, b, c, d = await sub.fetch(4)
    await a.ack()
    await b.nak()
    await c.term()
    await d.in_progress()
    again = await sub.fetch(4, expires=0.5)
    assert [m.payload for m in again] == [order(1)]  # the nak'd one; d is still held
    assert again[0].delivery is not None
    assert again[0].delivery.num_delivered == 2
    await again[0].ack()
    await d.ack(confirm=True)  # confirmed: the server applied it
    assert await pending(js) == (0, 0)


async def test_no_wait_returns_what_is_there_at_once(js: JetStreamContext) -> None:
    await publish(js, 3)
    sub = await durable(js)
    loop = asyncio.get_running_loop()
    started = loop.time()
    got = await sub.fetch(10, no_wait=True, expires=30)
    assert len(got) == 3
    assert loop.time() - started < 5


async def test_max_bytes_stops_before_a_message_that_would_exceed_it(
    js: JetStreamContext,
) -> None:
    await publish(js, 10)
    sub = await durable(js)
    size = len(CODEC.encode(order(1)))
    got = await sub.fetch(10, max_bytes=size * 3 + size // 2, expires=2)
    assert 1 <= len(got) < 10


async def test_an_undecodable_message_is_terminated_dead_lettered_and_not_returned(
    nc: Client, js: JetStreamContext
) -> None:
    await jetstream.ensure_stream(js, name="DLQ", subjects=["dlq.>"])
    await publish(js, 1)
    await nc.publish("orders.created", b"not json")
    await nc.flush()
    await publish(js, 1, start=1)
    await jetstream.ensure_consumer(js, stream=STREAM, name="batch")
    letters = DeadLetter(jetstream.Publisher(js, BytesCodec()), "dlq.orders")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="batch", dead_letter=letters)
    got = await sub.fetch(3, expires=1)
    assert [m.payload for m in got] == [order(0), order(1)]
    for message in got:
        await message.ack()
    assert (await js.stream_info("DLQ")).state.messages == 1
    # The undecodable one was terminated: acks and terms are applied off the server's
    # own queue, so its view is waited for (a message left unsettled never drains).
    async with asyncio.timeout(10):
        await drained(js, STREAM, "batch")


async def test_fetched_messages_get_receive_spans_linked_to_the_producer(
    js: JetStreamContext, otel: Otel
) -> None:
    await jetstream.Publisher(js, CODEC, telemetry=otel.telemetry).publish(
        "orders.created", order(1)
    )
    await jetstream.ensure_consumer(js, stream=STREAM, name="batch")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="batch", telemetry=otel.telemetry)
    (message,) = await sub.fetch(1)
    producer = otel.span("send orders.created").context
    receive = otel.span("receive orders.created")
    assert [link.context.span_id for link in receive.links] == [producer.span_id]
    assert receive.attributes is not None
    assert receive.attributes["messaging.operation.type"] == "receive"
    assert receive.attributes["messaging.consumer.group.name"] == "batch"
    await message.ack()


async def test_fetch_needs_a_durable_consumer(js: JetStreamContext) -> None:
    ephemeral = jetstream.Subscriber(js, CODEC, stream=STREAM)
    with pytest.raises(SubscribeError, match="durable consumer"):
        await ephemeral.fetch(1)
    ordered = jetstream.Subscriber(js, CODEC, stream=STREAM, ordered=True)
    with pytest.raises(SubscribeError, match="durable consumer"):
        await ordered.next()
    missing = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="nope")
    with pytest.raises(SubscribeError, match="not found"):
        await missing.fetch(1)


async def test_bad_arguments_are_refused(js: JetStreamContext) -> None:
    sub = await durable(js)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_messages"):
            await sub.fetch(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expires"):
        await sub.fetch(1, expires=0)
    with pytest.raises(ValueError, match="max_bytes"):
        await sub.fetch(1, max_bytes=0)
    with pytest.raises(ValueError, match="expires"):
        await sub.next(timeout=float("nan"))


async def test_a_batch_over_the_consumers_max_batch_is_refused_not_waited_out(
    nc: Client, js: JetStreamContext
) -> None:
    config = {"durable_name": "capped", "ack_policy": "explicit", "max_batch": 5}
    reply = await nc.request(
        f"$JS.API.CONSUMER.CREATE.{STREAM}.capped",
        json.dumps({"stream_name": STREAM, "config": config}).encode(),
    )
    assert "error" not in json.loads(reply.data)
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="capped")
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(SubscribeError, match="MaxRequestBatch"):
        await sub.fetch(10, expires=30)
    assert loop.time() - started < 5


async def test_a_deleted_consumer_fails_the_fetch(js: JetStreamContext) -> None:
    sub = await durable(js)
    waiting = asyncio.ensure_future(sub.fetch(1, expires=30))
    await pull_waiting(js, STREAM, "batch")
    await js.delete_consumer(STREAM, "batch")
    with pytest.raises(SubscribeError, match="Consumer Deleted"):
        await asyncio.wait_for(waiting, 10)


async def test_a_closed_subscriber_refuses_reads(js: JetStreamContext) -> None:
    sub = await durable(js)
    await publish(js, 1)
    (message,) = await sub.fetch(1)
    await message.ack(confirm=True)
    await sub.close()
    with pytest.raises(SubscribeError, match="closed"):
        await sub.fetch(1)


@pytest.mark.slow  # waits out a 0.5 s pull
async def test_fetch_in_a_pinned_priority_group_reads_only_for_the_pinned_client(
    js: JetStreamContext,
) -> None:
    await jetstream.ensure_consumer(
        js,
        stream=STREAM,
        name="pinned",
        priority_groups=["jobs"],
        priority_policy="pinned_client",
        priority_timeout=30,
    )
    await publish(js, 6)

    def reader() -> jetstream.Subscriber[Order]:
        return jetstream.Subscriber(
            js, CODEC, stream=STREAM, consumer="pinned", priority_group="jobs"
        )

    a, b = reader(), reader()
    first = await a.fetch(2)
    assert [m.payload for m in first] == [order(0), order(1)]
    assert await b.fetch(2, expires=0.5) == []  # a holds the pin
    second = await a.fetch(2)
    assert [m.payload for m in second] == [order(2), order(3)]
    for message in [*first, *second]:
        await message.ack()
    ungrouped = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="pinned")
    with pytest.raises(SubscribeError, match="priority"):
        await ungrouped.fetch(1)


async def test_a_max_bytes_below_the_next_message_says_so_instead_of_looking_empty(
    js: JetStreamContext,
) -> None:
    await publish(js, 1)
    sub = await durable(js)
    with pytest.raises(SubscribeError, match="larger than max_bytes"):
        await sub.fetch(5, max_bytes=3, expires=2)
    assert await pending(js) == (1, 0)  # still there for a fetch that can take it


@pytest.mark.parametrize("expires", [1e-10, float("inf"), 1e12])
async def test_an_expiry_the_server_would_misread_is_refused(
    js: JetStreamContext, expires: float
) -> None:
    sub = await durable(js)
    with pytest.raises(ValueError, match="expires"):
        await sub.fetch(1, expires=expires)
