"""Micro-batches bounded by size and time, settled as a whole."""

from __future__ import annotations

import asyncio

import pytest
from nats.js import JetStreamContext

from goflux import StrCodec, micro_batches
from goflux.transports import channel, jetstream
from tests.conftest import STREAM
from tests.helpers import drained


async def test_batches_are_bounded_by_size_and_a_partial_batch_flushes_after_max_wait() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    loop = asyncio.get_running_loop()
    async with micro_batches(sub, "n", max_messages=4, max_wait=0.2) as batches:
        for i in range(10):
            await pub.publish("n", i)
        sizes = []
        for _ in range(3):
            started = loop.time()
            batch = await anext(batches)
            sizes.append(([m.payload for m in batch], loop.time() - started))
    assert [payloads for payloads, _ in sizes] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert sizes[0][1] < 0.15  # full: no waiting
    assert sizes[2][1] >= 0.19  # partial: flushed by time


async def test_the_last_partial_batch_comes_when_the_stream_stops() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    batches = micro_batches(sub, "n", max_messages=100, max_wait=60)
    await batches.start()
    for i in range(3):
        await pub.publish("n", i)
    await batches.stop()
    got = [[m.payload for m in batch] async for batch in batches]
    assert got == [[0, 1, 2]]
    await batches.close()


async def test_batch_options_are_checked() -> None:
    sub = channel.Subscriber(channel.Bus[int]())
    with pytest.raises(ValueError, match="max_messages"):
        micro_batches(sub, "n", max_messages=0, max_wait=1)
    with pytest.raises(ValueError, match="max_wait"):
        micro_batches(sub, "n", max_messages=1, max_wait=0)
    with pytest.raises(ValueError, match="max_wait"):
        micro_batches(sub, "n", max_messages=1, max_wait=float("nan"))


async def test_a_failed_batch_is_redelivered_whole_and_a_good_one_acked(
    js: JetStreamContext,
) -> None:
    await jetstream.ensure_consumer(js, stream=STREAM, name="batcher", filter_subject="orders.>")
    pub = jetstream.Publisher(js, StrCodec())
    for i in range(6):
        await pub.publish("orders.new", f"o{i}")
    sub = jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer="batcher")

    async def failing_sink() -> None:
        async with micro_batches(sub, "orders.>", max_messages=3, max_wait=5) as batches:
            async for batch in batches:
                assert [m.payload for m in batch] == ["o0", "o1", "o2"]
                raise RuntimeError("sink down")

    with pytest.raises(RuntimeError, match="sink down"):
        await failing_sink()
    seen: list[tuple[str, int]] = []
    async with micro_batches(sub, "orders.>", max_messages=3, max_wait=5) as batches:
        async for batch in batches:
            for message in batch:
                assert message.delivery is not None
                seen.append((message.payload, message.delivery.num_delivered))
            if len(seen) == 6:
                break
    # The failed batch came again (its second delivery); so did the messages the first
    # subscription had received but not batched yet, handed back when it closed.
    assert sorted(seen) == [(f"o{i}", 2) for i in range(6)]
    # Acks are applied by the consumer off a queue of the server's own: the server's
    # view, looked at until it has them all, is the signal (a loaded CI box lagged).
    async with asyncio.timeout(10):
        info = await drained(js, STREAM, "batcher")
    assert info.ack_floor.stream_seq == 6  # the batch left by `break` was acked too
