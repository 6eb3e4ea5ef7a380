"""kill -9 and restart of a single server while publishing, and while consuming."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from goflux import JsonCodec, Message, PublishError
from goflux.middleware import ExponentialBackoff, retry_publish
from goflux.testing import NatsServer
from goflux.transports import jetstream
from tests.helpers import drained
from tests.models import Order, order
from tests.reliability.conftest import (
    RELIABILITY_STREAM,
    Clock,
    Connection,
    stored_ids,
)

pytestmark = pytest.mark.timeout(60)

CODEC = JsonCodec(Order)
SENT = 400
KILL_AT = 150


async def test_publishing_through_a_crash_stores_every_acked_message_once(
    server: NatsServer, connection: Connection, record: Callable[..., Any]
) -> None:
    nc = await connection.connect(server.url)
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name=RELIABILITY_STREAM, subjects=["rel.>"])
    publisher = retry_publish(attempts=20, backoff=ExponentialBackoff(initial=0.05, max=0.5))(
        jetstream.Publisher(js, CODEC)
    )
    clock = Clock()
    acked: list[int] = []
    failed: list[int] = []
    killed_at = recovered_at = 0.0

    async def restart_when_noticed() -> None:
        await connection.disconnected.wait()  # the client saw the crash
        await server.restart()

    restarting: asyncio.Task[None] | None = None
    deduplicated = 0

    async def send(n: int) -> None:
        nonlocal deduplicated, recovered_at
        try:
            receipt = await publisher.publish("rel.orders", order(n), message_id=f"order-{n}")
        except PublishError:
            failed.append(n)
            return
        deduplicated += bool(receipt is not None and receipt.duplicate)
        if killed_at and not recovered_at:
            recovered_at = clock()
        acked.append(n)

    # Eight publishers at a time, so the crash catches several publishes in flight:
    # stored but unacknowledged ones come back from their retry as duplicates.
    for start in range(0, SENT, 8):
        if restarting is None and start >= KILL_AT:
            batch = [asyncio.create_task(send(n)) for n in range(start, start + 8)]
            await asyncio.sleep(0)  # they start: their publishes are under way
            server.kill()  # when the server dies
            killed_at = clock()
            restarting = asyncio.create_task(restart_when_noticed())
            await asyncio.gather(*batch)
        else:
            await asyncio.gather(*(send(n) for n in range(start, min(start + 8, SENT))))
    assert restarting is not None
    await restarting
    # The guarantee rests on de-duplication by message ID: sending acknowledged
    # messages again (as after lost acks) stores nothing new.
    again = [
        await publisher.publish("rel.orders", order(n), message_id=f"order-{n}")
        for n in range(KILL_AT - 8, KILL_AT + 8)
    ]

    ids = await stored_ids(js, RELIABILITY_STREAM)
    record(
        sent=SENT,
        acknowledged=len(acked),
        failed=len(failed),
        stored=len(ids),
        duplicates_stored=len(ids) - len(set(ids)),
        duplicates_refused=deduplicated,
        recovery_s=round(recovered_at - killed_at, 2),
    )
    assert failed == []
    assert sorted(acked) == list(range(SENT))
    assert set(ids) == {f"order-{n}" for n in range(SENT)}
    assert len(ids) == len(set(ids)) == SENT  # every acknowledged message, each once
    assert all(receipt is not None and receipt.duplicate for receipt in again)


async def test_consuming_through_a_crash_handles_every_message(
    server: NatsServer, connection: Connection, record: Callable[..., Any]
) -> None:
    nc = await connection.connect(server.url)
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name=RELIABILITY_STREAM, subjects=["rel.>"])
    await jetstream.ensure_consumer(
        js, stream=RELIABILITY_STREAM, name="crashproof", filter_subject="rel.>", ack_wait=2
    )
    await jetstream.Publisher(js, CODEC).publish_many(
        jetstream.Outgoing("rel.orders", order(n), message_id=f"order-{n}") for n in range(SENT)
    )
    clock = Clock()
    deliveries: list[str] = []
    effects: list[str] = []  # an idempotent handler: applies each message ID once
    seen: set[str] = set()
    everything = asyncio.Event()
    killed = asyncio.Event()
    killed_at = 0.0
    first_after_restart = 0.0

    async def handle(msg: Message[Order]) -> None:
        nonlocal killed_at, first_after_restart
        assert msg.id is not None
        deliveries.append(msg.id)
        if msg.id not in seen:
            seen.add(msg.id)
            effects.append(msg.id)
        if len(deliveries) == KILL_AT and not killed.is_set():
            server.kill()
            killed_at = clock()
            killed.set()
        elif killed.is_set() and not first_after_restart and connection.reconnected.is_set():
            first_after_restart = clock()
        if len(effects) == SENT:
            everything.set()

    async def restart_when_noticed() -> None:
        await killed.wait()
        await connection.disconnected.wait()
        await server.restart()

    restarting = asyncio.create_task(restart_when_noticed())
    sub = jetstream.Subscriber(js, CODEC, stream=RELIABILITY_STREAM, consumer="crashproof")
    subscription = await sub.start("rel.>", handle)
    async with asyncio.timeout(40):
        await everything.wait()
        await restarting
        # Acks lost in the crash come back after ack_wait: handled again, then acked.
        info = await drained(js, RELIABILITY_STREAM, "crashproof")
    await subscription.stop()
    record(
        sent=SENT,
        handled=len(deliveries),
        distinct=len(set(deliveries)),
        duplicates=len(deliveries) - len(set(deliveries)),
        effects=len(effects),
        recovery_s=round(first_after_restart - killed_at, 2),
    )
    assert set(deliveries) == {f"order-{n}" for n in range(SENT)}  # at least once
    assert sorted(effects) == sorted(f"order-{n}" for n in range(SENT))  # exactly once
    assert (info.num_pending, info.num_ack_pending) == (0, 0)
