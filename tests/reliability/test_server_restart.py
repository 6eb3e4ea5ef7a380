"""kill -9 and restart of a single server while publishing, and while consuming."""

from __future__ import annotations

import asyncio
from collections import Counter
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
EFFECTS_STREAM = "EFF"
CONSUMED = 1_000  # more than KILL_AT + IN_FLIGHT: the bound on duplicates means something
IN_FLIGHT = 256  # the subscriber's default max_in_flight
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
    in_flight_at_crash: list[int] = []
    deduplicated: list[int] = []  # acknowledged as duplicates: stored before, ack lost

    async def send(n: int) -> None:
        nonlocal recovered_at
        try:
            receipt = await publisher.publish("rel.orders", order(n), message_id=f"order-{n}")
        except PublishError:
            failed.append(n)
            return
        if receipt is not None and receipt.duplicate:
            deduplicated.append(n)
        if killed_at and not recovered_at:
            recovered_at = clock()
        acked.append(n)

    # Eight publishers at a time, so the crash catches several publishes in flight:
    # stored but unacknowledged ones come back from their retry as duplicates.
    for start in range(0, SENT, 8):
        if restarting is None and start >= KILL_AT:
            in_flight_at_crash.extend(range(start, start + 8))
            batch = [asyncio.create_task(send(n)) for n in in_flight_at_crash]
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
        duplicates_refused=len(deduplicated),
        recovery_s=round(recovered_at - killed_at, 2),
    )
    assert failed == []
    # Only a publish in flight at the crash can have been stored with its ack lost:
    # its retry is acknowledged as a duplicate. No other publish is.
    assert set(deduplicated) <= set(in_flight_at_crash)
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
    await jetstream.ensure_stream(js, name=EFFECTS_STREAM, subjects=["eff.>"])
    await jetstream.ensure_consumer(
        js, stream=RELIABILITY_STREAM, name="crashproof", filter_subject="rel.>", ack_wait=2
    )
    await jetstream.Publisher(js, CODEC).publish_many(
        jetstream.Outgoing("rel.orders", order(n), message_id=f"order-{n}") for n in range(CONSUMED)
    )
    # The handler's effect is a publish to another stream under the message's ID: the
    # server stores each ID once, however often the message is handled. Its retries
    # ride out the outage (a 2 s PubAck timeout, then backoff up to 0.5 s).
    effects = retry_publish(attempts=40, backoff=ExponentialBackoff(initial=0.05, max=0.5))(
        jetstream.Publisher(js, CODEC, timeout=2)
    )
    clock = Clock()
    deliveries: list[tuple[str, int]] = []  # (message ID, the server's delivery count)
    killed = asyncio.Event()
    killed_at = 0.0
    first_after_restart = 0.0

    async def handle(msg: Message[Order]) -> None:
        nonlocal killed_at, first_after_restart
        assert msg.id is not None
        assert msg.delivery is not None
        deliveries.append((msg.id, msg.delivery.num_delivered))
        if len(deliveries) == KILL_AT and not killed.is_set():
            server.kill()
            killed_at = clock()
            killed.set()
        await effects.publish("eff.orders", msg.payload, message_id=msg.id)
        if killed.is_set() and not first_after_restart:
            first_after_restart = clock()  # effects flow again

    async def restart_when_noticed() -> None:
        await killed.wait()
        await connection.disconnected.wait()
        await server.restart()

    restarting = asyncio.create_task(restart_when_noticed())
    sub = jetstream.Subscriber(
        js, CODEC, stream=RELIABILITY_STREAM, consumer="crashproof", max_in_flight=IN_FLIGHT
    )
    subscription = await sub.start("rel.>", handle)
    async with asyncio.timeout(40):
        await restarting
        # Every message acked, including those whose acks were lost in the crash:
        # they came back after ack_wait and were handled again.
        info = await drained(js, RELIABILITY_STREAM, "crashproof")
    await subscription.stop()
    ids = await stored_ids(js, EFFECTS_STREAM)
    handled = Counter(message_id for message_id, _ in deliveries)
    twice = {message_id for message_id, times in handled.items() if times > 1}
    record(
        sent=CONSUMED,
        handled=len(deliveries),
        distinct=len(handled),
        duplicates=len(deliveries) - len(handled),
        first_handled_twice=min(int(i.removeprefix("order-")) for i in twice) if twice else None,
        last_handled_twice=max(int(i.removeprefix("order-")) for i in twice) if twice else None,
        redelivered_by_server=sum(1 for _, count in deliveries if count > 1),
        effects_stored=len(ids),
        recovery_s=round(first_after_restart - killed_at, 2),
    )
    everything = {f"order-{n}" for n in range(CONSUMED)}
    assert set(handled) == everything  # at least once
    assert (info.num_pending, info.num_ack_pending) == (0, 0)
    # Only what the server had handed out before the crash came twice (their acks
    # were lost): the KILL_AT handled and at most IN_FLIGHT more the client held, the
    # first of the stream. Nothing first delivered after the restart came twice.
    assert twice <= {f"order-{n}" for n in range(KILL_AT + IN_FLIGHT)}
    # Exactly one effect per message, as the server stored it: as many effects as
    # messages, under every message's ID.
    assert len(ids) == CONSUMED
    assert set(ids) == everything
