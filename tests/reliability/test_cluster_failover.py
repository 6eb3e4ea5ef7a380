"""An R3 stream on a 3-node cluster: kill the stream leader while publishing and consuming."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from goflux import JsonCodec, Message, PublishError
from goflux.middleware import ExponentialBackoff, retry_publish
from goflux.testing._cluster import NatsCluster
from goflux.transports import jetstream
from tests.helpers import drained
from tests.models import Order, order
from tests.reliability.conftest import (
    RELIABILITY_STREAM,
    Clock,
    Connection,
    stored_ids,
)

pytestmark = pytest.mark.timeout(90)

CODEC = JsonCodec(Order)
SENT = 300
KILL_AT = 100


async def test_killing_the_stream_leader_loses_no_acknowledged_message(
    connection: Connection, record: Callable[..., Any]
) -> None:
    async with NatsCluster(3) as cluster:
        nc = await connection.connect(cluster.urls)
        js = nc.jetstream()
        admin = nc.jetstream(timeout=NatsCluster.PROVISION_TIMEOUT)  # see its docstring
        await jetstream.ensure_stream(
            admin, name=RELIABILITY_STREAM, subjects=["rel.>"], num_replicas=3
        )
        await cluster.wait_for_stream(nc, RELIABILITY_STREAM)  # whole before a consumer
        await jetstream.ensure_consumer(
            admin, stream=RELIABILITY_STREAM, name="failover", filter_subject="rel.>", ack_wait=2
        )
        publisher = retry_publish(attempts=30, backoff=ExponentialBackoff(initial=0.05, max=0.5))(
            jetstream.Publisher(js, CODEC, timeout=2)
        )
        handled: list[str] = []
        everything = asyncio.Event()

        async def handle(msg: Message[Order]) -> None:
            assert msg.id is not None
            handled.append(msg.id)
            if len(set(handled)) == SENT:
                everything.set()

        sub = jetstream.Subscriber(js, CODEC, stream=RELIABILITY_STREAM, consumer="failover")
        subscription = await sub.start("rel.>", handle)
        clock = Clock()
        acked: list[int] = []
        killed_at = resumed_at = 0.0
        leader = -1
        for n in range(SENT):
            if n == KILL_AT:
                # A healthy R3 stream loses its leader: every message so far is acked
                # and every replica of the stream and the consumer has caught up, so the
                # failover is the only fault (no ack is in flight for it to lose).
                await drained(js, RELIABILITY_STREAM, "failover")
                await cluster.wait_for_stream(nc, RELIABILITY_STREAM, consumers=["failover"])
                leader = await cluster.stream_leader(nc, RELIABILITY_STREAM)
                cluster.kill(leader)
                killed_at = clock()
            try:
                await publisher.publish("rel.orders", order(n), message_id=f"order-{n}")
            except PublishError:
                continue
            if n == KILL_AT:
                resumed_at = clock()
            acked.append(n)

        async with asyncio.timeout(40):
            await everything.wait()
            await drained(js, RELIABILITY_STREAM, "failover")  # lost acks come back too
        await subscription.stop()
        new_leader = await cluster.stream_leader(nc, RELIABILITY_STREAM)
        ids = await stored_ids(js, RELIABILITY_STREAM)
        record(
            sent=SENT,
            acknowledged=len(acked),
            stored=len(ids),
            duplicates_stored=len(ids) - len(set(ids)),
            handled=len(handled),
            handled_distinct=len(set(handled)),
            publish_gap_s=round(resumed_at - killed_at, 2),
        )
        assert new_leader != leader
        assert acked == list(range(SENT))
        assert ids == [f"order-{n}" for n in range(SENT)]
        # Each handled once: acks committed before the kill survive on the replicas,
        # and the new leaders redeliver nothing.
        assert sorted(handled) == sorted(ids)
