"""Streams and micro-batches left without ``async with`` hand their messages back.

A loop left by ``break``, an exception or cancellation, and a started stream whose
last reference is dropped, close the stream at once: on JetStream a second subscriber
on the same durable consumer gets every unsettled message right away (a nak), not
after ``ack_wait`` (and not never: the keep-alive would extend them forever).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux import MessageStream, StrCodec, Subscription, micro_batches
from goflux.transports import channel, jetstream
from goflux.transports import nats as gnats
from tests.conftest import STREAM
from tests.helpers import Inbox, drained, settle_loop

T = TypeVar("T")

ACK_WAIT = 2.0
TOTAL = 20

Leave = Callable[[jetstream.Subscriber[str]], Awaitable[None]]


async def _break(sub: jetstream.Subscriber[str]) -> None:
    async for message in sub.stream("orders.>"):
        await message.ack()
        break


async def _raise(sub: jetstream.Subscriber[str]) -> None:
    async def consume() -> None:
        async for message in sub.stream("orders.>"):
            await message.ack()
            raise RuntimeError("handler bug")

    with pytest.raises(RuntimeError, match="handler bug"):
        await consume()


async def _cancel(sub: jetstream.Subscriber[str]) -> None:
    acked = asyncio.Event()

    async def consume() -> None:
        async for message in sub.stream("orders.>"):
            if message.settled is None and not acked.is_set():
                await message.ack()
                acked.set()
            await asyncio.Event().wait()  # the loop body never finishes: cancelled

    task = asyncio.create_task(consume())
    await acked.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _break_keeping_the_stream(sub: jetstream.Subscriber[str]) -> None:
    stream = sub.stream("orders.>")
    async for message in stream:
        await message.ack()
        break
    subscription = stream.subscription  # the stream is still referenced here
    assert subscription is not None
    async with asyncio.timeout(ACK_WAIT + 1):
        await subscription.wait()  # ended: leaving the loop closed the stream


async def _drop(sub: jetstream.Subscriber[str]) -> None:
    stream = await sub.stream("orders.>").start()
    message = await anext(stream)
    await message.ack()
    del stream  # the last reference: never iterated by a loop, never closed


async def _break_batches(sub: jetstream.Subscriber[str]) -> None:
    async for batch in micro_batches(sub, "orders.>", max_messages=5, max_wait=5):
        await batch[0].ack()  # the other four of the batch are left unsettled
        break


async def _raise_in_batches(sub: jetstream.Subscriber[str]) -> None:
    async def sink() -> None:
        async for batch in micro_batches(sub, "orders.>", max_messages=5, max_wait=5):
            await batch[0].ack()
            raise RuntimeError("sink down")

    with pytest.raises(RuntimeError, match="sink down"):
        await sink()


async def _drop_batches(sub: jetstream.Subscriber[str]) -> None:
    batches = await micro_batches(sub, "orders.>", max_messages=5, max_wait=5).start()
    batch = await anext(batches)
    await batch[0].ack()
    del batches, batch


LEAVES: dict[str, Leave] = {
    "stream-break": _break,
    "stream-exception": _raise,
    "stream-cancelled": _cancel,
    "stream-break-kept": _break_keeping_the_stream,
    "stream-dropped": _drop,
    "batches-break": _break_batches,
    "batches-exception": _raise_in_batches,
    "batches-dropped": _drop_batches,
}


@pytest.mark.parametrize("leave", list(LEAVES.values()), ids=list(LEAVES))
async def test_a_loop_left_without_async_with_hands_the_rest_to_the_next_subscriber(
    js: JetStreamContext, leave: Leave
) -> None:
    await jetstream.ensure_consumer(
        js, stream=STREAM, name="hostage", filter_subject="orders.>", ack_wait=ACK_WAIT
    )
    pub = jetstream.Publisher(js, StrCodec())
    await pub.publish_many(jetstream.Outgoing("orders.new", f"o{i}") for i in range(TOTAL))
    first = jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer="hostage")
    await leave(first)  # o0 acked; whatever else it received is unsettled
    loop = asyncio.get_running_loop()
    left = loop.time()

    inbox: Inbox[str] = Inbox()
    second = jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer="hostage")
    async with await second.start("orders.>", inbox):
        # The brief's bound: within ack_wait plus a margin. A hand-back is a nak: the
        # messages come back at once, not when ack_wait expires (nor never, as they
        # did when the keep-alive extended them for a stream nobody read any more).
        messages = await inbox.wait_for(TOTAL - 1, timeout=ACK_WAIT + 1)
        back_after = loop.time() - left
        info = await drained(js, STREAM, "hostage")
    assert sorted(m.payload for m in messages) == sorted(f"o{i}" for i in range(1, TOTAL))
    redelivered = [m for m in messages if m.delivery and m.delivery.num_delivered > 1]
    assert redelivered  # the first subscriber had them: they were handed back
    assert back_after < ACK_WAIT / 2  # by a nak, not by ack_wait expiring
    assert (info.num_pending, info.num_ack_pending) == (0, 0)


async def test_a_loop_left_inside_async_with_keeps_the_stream_open() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    async with sub.stream("n") as stream:
        for i in range(4):
            await pub.publish("n", i)
        async for message in stream:
            assert message.payload == 0
            break
        await settle_loop()
        assert stream.subscription is not None
        assert stream.subscription.running  # the block's exit closes it, not the break
        rest = []
        async for message in stream:
            rest.append(message.payload)
            if len(rest) == 3:
                break
    assert rest == [1, 2, 3]
    assert bus.subscription_count == 0


async def test_a_loop_that_ran_to_the_end_closes_nothing_it_did_not_have_to() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    stream = await sub.stream("n").start()
    await pub.publish("n", 1)
    await stream.stop()
    assert [m.payload async for m in stream] == [1]
    await settle_loop()
    assert _goflux_tasks() == []
    assert stream.dropped == 0


def _goflux_tasks() -> list[str]:
    current = asyncio.current_task()
    return sorted(
        t.get_name() for t in asyncio.all_tasks() if t is not current and "goflux" in t.get_name()
    )


async def _leave_after_one(
    stream: MessageStream[T], publish: Callable[[], Awaitable[None]]
) -> Subscription:
    """Start ``stream``, publish, break out of a loop after one message.

    Returns the stream's subscription; the stream itself is referenced by nothing
    once this returns.
    """
    await stream.start()
    await publish()
    async for _ in stream:
        break
    subscription = stream.subscription
    assert subscription is not None
    return subscription


async def test_a_channel_stream_left_by_break_unsubscribes_and_leaves_no_task() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)

    async def publish() -> None:
        for i in range(3):
            await pub.publish("n", i)

    subscription = await _leave_after_one(sub.stream("n", buffer=4), publish)
    async with asyncio.timeout(5):
        await subscription.wait()  # the stream closed its subscription
    await settle_loop()
    assert bus.subscription_count == 0
    assert _goflux_tasks() == []


async def test_a_core_nats_stream_left_by_break_unsubscribes_and_leaves_no_task(
    nc: Client,
) -> None:
    sub = gnats.Subscriber(nc, StrCodec())
    pub = gnats.Publisher(nc, StrCodec())

    async def publish() -> None:
        for i in range(3):
            await pub.publish("core.x", f"m{i}")

    subscription = await _leave_after_one(sub.stream("core.>"), publish)
    async with asyncio.timeout(5):
        await subscription.wait()  # the stream closed its subscription
    await settle_loop()
    assert _goflux_tasks() == []
    with pytest.raises(nats.errors.NoRespondersError):  # no interest left at the server
        await nc.request("core.x", b"", timeout=2)
