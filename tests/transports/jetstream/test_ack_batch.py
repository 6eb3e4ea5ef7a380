"""Auto-acks of one event-loop step written together, against a real nats-server.

A subscription queues each auto-ack in its :class:`AckBatch` and sends the step's
acks as one block right after the step: never held while a handler waits, never lost
while the connection is down, and a failed one is counted and logged.
"""

from __future__ import annotations

import asyncio
import logging

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux import JsonCodec, Message
from goflux._message import received
from goflux._otel.telemetry import Telemetry
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports.jetstream._ack_batch import AckBatch
from goflux.transports.jetstream._acker import JetStreamAcker, Ledger
from tests.conftest import STREAM
from tests.models import Order, order

CODEC = JsonCodec(Order)


async def ack_state(js: JetStreamContext, consumer: str) -> tuple[int, int]:
    """(num_ack_pending, ack floor's consumer sequence) as the server sees them."""
    info = await js.consumer_info(STREAM, consumer)
    return info.num_ack_pending or 0, info.ack_floor.consumer_seq or 0


async def wait_for_state(js: JetStreamContext, consumer: str, expected: tuple[int, int]) -> None:
    """Wait until the server reflects the acks sent (they are fire-and-forget)."""
    async with asyncio.timeout(10):
        while await ack_state(js, consumer) != expected:
            await js._nc.flush()


async def test_the_acks_before_a_waiting_handler_reach_the_server_while_it_waits(
    js: JetStreamContext,
) -> None:
    # Both orders arrive in one read; o-0's handler returns at once, o-1's waits. The
    # wait ends the loop step, so o-0's queued ack goes out then, not after o-1.
    release = asyncio.Event()
    waiting = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        if msg.payload.id == "o-1":
            waiting.set()
            await release.wait()

    await jetstream.ensure_consumer(js, stream=STREAM, name="steps", filter_subject="orders.>")
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(2))
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="steps", concurrency=1)
    subscription = await sub.start("orders.>", handle)
    async with asyncio.timeout(10):
        await waiting.wait()
    await wait_for_state(js, "steps", (1, 1))  # o-0 acked, o-1 still held
    assert subscription.outstanding == 1
    release.set()
    await wait_for_state(js, "steps", (0, 2))
    await sub.close()


async def pulled_replies(js: JetStreamContext, count: int, consumer: str) -> list[str]:
    """Store ``count`` orders, pull them unacked on a durable ``consumer``; their replies."""
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(count))
    pull = await js.pull_subscribe("orders.>", durable=consumer, stream=STREAM)
    msgs = await pull.fetch(count, timeout=5)
    assert len(msgs) == count
    return [m.reply for m in msgs]


class Room:
    """A pull engine's in-flight room, as the ledger gives it back."""

    def __init__(self) -> None:
        self.freed = 0

    def release(self, count: int) -> None:
        self.freed += count


def batch_on(nc: Client, replies: list[str]) -> tuple[AckBatch, Room, list[Message[bytes]]]:
    """An AckBatch on ``nc`` and, for each reply, an unsettled message with its acker."""
    room = Room()
    ledger = Ledger(Telemetry(), {}, room.release, destination="orders.>")
    batch = AckBatch(nc, ledger)
    loop = asyncio.get_running_loop()
    messages = []
    for reply in replies:
        acker = JetStreamAcker(nc, reply, ledger, loop.time())
        message = received("orders.a", b"{}", None, None, b"{}", acker, None)
        assert batch.ack(acker, message)
        messages.append(message)
    return batch, room, messages


async def test_acks_queued_while_the_connection_is_down_reach_the_server_after_it(
    nats_server: NatsServer,
) -> None:
    disconnected, reconnected = asyncio.Event(), asyncio.Event()

    async def on_disconnect() -> None:
        disconnected.set()

    async def on_reconnect() -> None:
        reconnected.set()

    nc = await nats.connect(
        nats_server.url,
        reconnect_time_wait=0.05,
        max_reconnect_attempts=-1,
        disconnected_cb=on_disconnect,
        reconnected_cb=on_reconnect,
    )
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name=STREAM, subjects=["orders.>"])
    replies = await pulled_replies(js, 3, "down")
    nats_server.kill()
    async with asyncio.timeout(10):
        await disconnected.wait()
    batch, room, messages = batch_on(nc, replies)
    assert [m.settled for m in messages] == ["ack"] * 3
    await batch.settled()  # buffered by nats-py until the reconnect
    assert room.freed == 3
    await nats_server.restart()
    async with asyncio.timeout(20):
        await reconnected.wait()
    await wait_for_state(js, "down", (0, 3))
    await nc.close()


async def test_an_ack_that_cannot_be_sent_is_logged_and_frees_its_room(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name=STREAM, subjects=["orders.>"])
    replies = await pulled_replies(js, 2, "closed")
    await nc.close()
    with caplog.at_level(logging.WARNING, logger="goflux.transports.jetstream"):
        batch, room, _ = batch_on(nc, replies)
        await batch.settled()
    assert room.freed == 2
    failed = [r for r in caplog.records if "could not ack message" in r.getMessage()]
    assert len(failed) == 2
    async with await nats.connect(nats_server.url) as other:
        info = await other.jetstream().consumer_info(STREAM, "closed")
    assert info.num_ack_pending == 2  # redelivered after ack_wait
