"""Orders for the payments example, published and watched through the server."""

from __future__ import annotations

import re

from nats.js import JetStreamContext
from nats.js.api import ConsumerInfo

from examples.payments_service import Order
from goflux import JsonCodec
from goflux.transports import jetstream

SERVICE = "examples.payments_service:service"


async def publish_orders(js: JetStreamContext, count: int) -> list[str]:
    """Store ``count`` orders in ORDERS (subject orders.created); their ids."""
    await jetstream.ensure_stream(js, name="ORDERS", subjects=["orders.>"])
    publisher = jetstream.Publisher(js, JsonCodec(Order))
    ids = [f"o-{n}" for n in range(count)]
    for start in range(0, count, 5_000):
        await publisher.publish_many(
            jetstream.Outgoing(
                "orders.created", Order(id=i, customer="c", amount=1.0), message_id=i
            )
            for i in ids[start : start + 5_000]
        )
    return ids


async def acked_at_least(js: JetStreamContext, count: int) -> ConsumerInfo:
    """Wait until the consumer ``payments`` has acknowledged ``count`` (server's view)."""
    while True:
        info = await js.consumer_info("ORDERS", "payments")
        if info.ack_floor is not None and (info.ack_floor.stream_seq or 0) >= count:
            return info
        await js._nc.flush()


def started_pid(output: str, worker: int, nth: int = 1) -> int:
    """The pid of the ``nth`` start of ``worker`` in a supervisor's log."""
    pids = re.findall(rf"worker {worker} started \(pid (\d+)\)", output)
    return int(pids[nth - 1])


def charged_per_worker(output: str) -> dict[str, int]:
    """What each worker process reported charging when it stopped, summed per worker."""
    totals: dict[str, int] = {}
    for worker, count in re.findall(r"worker (\d+) \(pid \d+\) charged (\d+) orders", output):
        totals[worker] = totals.get(worker, 0) + int(count)
    return totals
