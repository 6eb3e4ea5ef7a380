"""Consumer faults: a crashed process, a drained one, a slow one, a handler past ack_wait."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from nats.js import JetStreamContext

from goflux import JsonCodec, Message
from goflux.testing import NatsServer
from goflux.transports import jetstream
from tests.helpers import drained
from tests.models import Order, order
from tests.reliability.conftest import RELIABILITY_STREAM, Clock, Connection

pytestmark = pytest.mark.timeout(60)

CODEC = JsonCodec(Order)
ROOT = Path(__file__).resolve().parents[2]
ACK_WAIT = 3.0
IN_FLIGHT = 10
TOTAL = 30


async def setup(js: JetStreamContext, consumer: str, count: int, ack_wait: float) -> None:
    await jetstream.ensure_stream(js, name=RELIABILITY_STREAM, subjects=["rel.>"])
    await jetstream.ensure_consumer(
        js, stream=RELIABILITY_STREAM, name=consumer, filter_subject="rel.>", ack_wait=ack_wait
    )
    await jetstream.Publisher(js, CODEC).publish_many(
        jetstream.Outgoing("rel.orders", order(n), message_id=f"order-{n}") for n in range(count)
    )


async def take_the_rest(
    js: JetStreamContext, consumer: str, count: int, clock: Clock
) -> tuple[list[Message[Order]], dict[str, float]]:
    """Consume until ``count`` distinct messages; return them and when each came back.

    The second item maps each redelivered message's ID to the time it arrived, read
    from ``clock``.
    """
    seen: list[Message[Order]] = []
    redelivered_at: dict[str, float] = {}
    done = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        seen.append(msg)
        delivery = msg.delivery
        if delivery is not None and delivery.num_delivered > 1:
            redelivered_at.setdefault(msg.id or "", clock())
        if len({m.id for m in seen}) == count:
            done.set()

    sub = jetstream.Subscriber(js, CODEC, stream=RELIABILITY_STREAM, consumer=consumer)
    subscription = await sub.start("rel.>", handle)
    async with asyncio.timeout(30):
        await done.wait()
    await subscription.stop()
    return seen, redelivered_at


async def test_a_crashed_consumer_s_messages_come_back_after_ack_wait(
    server: NatsServer, connection: Connection, record: Callable[..., Any]
) -> None:
    js = (await connection.connect(server.url)).jetstream()
    await setup(js, "crashy", TOTAL, ACK_WAIT)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.reliability.holding_consumer",
        server.url,
        RELIABILITY_STREAM,
        "crashy",
        str(IN_FLIGHT),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        async with asyncio.timeout(30):
            line = await child.stdout.readline()
        held = Clock()  # ack_wait began a little earlier, at delivery
        assert line.decode().strip() == f"holding {IN_FLIGHT}"
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # a crash: no drain, no nak
        await child.wait()
    info = await js.consumer_info(RELIABILITY_STREAM, "crashy")
    assert info.num_ack_pending == IN_FLIGHT

    seen, redelivered_at = await take_the_rest(js, "crashy", TOTAL, held)
    redelivered = sorted(m.id or "" for m in seen if m.delivery and m.delivery.num_delivered > 1)
    back_after = min(redelivered_at.values(), default=0.0)
    record(
        in_flight_at_crash=IN_FLIGHT,
        redelivered=len(redelivered),
        handled=len(seen),
        first_redelivery_s=round(back_after, 2),
        ack_wait_s=ACK_WAIT,
    )
    assert len(seen) == TOTAL  # the others were never delivered before: no duplicates
    assert len(redelivered) == IN_FLIGHT
    assert redelivered == sorted(f"order-{n}" for n in range(IN_FLIGHT))
    assert back_after >= ACK_WAIT / 2  # they waited for ack_wait to expire


async def test_a_drained_consumer_hands_its_messages_back_at_once(
    server: NatsServer, connection: Connection, record: Callable[..., Any]
) -> None:
    js = (await connection.connect(server.url)).jetstream()
    await setup(js, "drained", TOTAL, ACK_WAIT)
    holding = asyncio.Event()
    running = 0

    async def hold(msg: Message[Order]) -> None:
        nonlocal running
        running += 1
        if running == IN_FLIGHT // 2:
            holding.set()
        await asyncio.Event().wait()  # never finishes: cancelled at the drain deadline

    # Half the in-flight messages run, half wait in the queue.
    first = jetstream.Subscriber(
        js,
        CODEC,
        stream=RELIABILITY_STREAM,
        consumer="drained",
        max_in_flight=IN_FLIGHT,
        concurrency=IN_FLIGHT // 2,
    )
    subscription = await first.start("rel.>", hold)
    async with asyncio.timeout(10):
        await holding.wait()
    clock = Clock()
    await subscription.stop(timeout=0.2)
    drained_in = clock()
    seen, redelivered_at = await take_the_rest(js, "drained", TOTAL, clock)
    redelivered = sorted(m.id or "" for m in seen if m.delivery and m.delivery.num_delivered > 1)
    record(
        in_flight_at_drain=IN_FLIGHT,
        redelivered=len(redelivered),
        handled=len(seen),
        drain_s=round(drained_in, 2),
        first_redelivery_s=round(min(redelivered_at.values(), default=0.0), 2),
        last_redelivery_s=round(max(redelivered_at.values(), default=0.0), 2),
        ack_wait_s=ACK_WAIT,
    )
    assert len(seen) == TOTAL
    # The 5 running and the 5 queued, each once, the first ten of the stream.
    assert redelivered == sorted(f"order-{n}" for n in range(IN_FLIGHT))
    # Every one handed back by a nak, none by ack_wait expiry: the last came back
    # well before ack_wait (the queued ones are nak'd first, the running ones at the
    # 0.2 s deadline).
    assert max(redelivered_at.values()) < ACK_WAIT / 2


def resident_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


async def test_a_slow_consumer_stays_within_its_bound(
    server: NatsServer, connection: Connection, record: Callable[..., Any]
) -> None:
    count, bound = 3_000, 32
    nc = await connection.connect(server.url)
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name=RELIABILITY_STREAM, subjects=["rel.>"])
    await jetstream.ensure_consumer(
        js, stream=RELIABILITY_STREAM, name="slow", filter_subject="rel.>", ack_wait=30
    )
    # 10 KB each: 30 MB in all, so buffering beyond the bound would show in RSS.
    padding = ["x" * 1_000] * 10
    await jetstream.Publisher(js, CODEC).publish_many(
        jetstream.Outgoing(
            "rel.orders",
            Order(id=f"o-{n}", customerId="c", amount=1.0, lines=padding),
            message_id=f"order-{n}",
        )
        for n in range(count)
    )
    most_outstanding = most_ack_pending = 0
    rss: list[int] = []
    handled: list[str] = []
    done = asyncio.Event()
    holder: list[jetstream.JetStreamSubscription[Order]] = []  # set once start() returns

    def outstanding() -> int:
        return holder[0].outstanding if holder else 0  # handlers may run before that

    async def slow(msg: Message[Order]) -> None:
        nonlocal most_outstanding, most_ack_pending
        most_outstanding = max(most_outstanding, outstanding())
        await asyncio.sleep(0.001)  # the handler's own (slow) work
        handled.append(msg.id or "")
        most_outstanding = max(most_outstanding, outstanding())
        if len(handled) % 500 == 0:
            info = await js.consumer_info(RELIABILITY_STREAM, "slow")
            most_ack_pending = max(most_ack_pending, info.num_ack_pending)
            rss.append(resident_kib())
        if len(handled) == count:
            done.set()

    sub = jetstream.Subscriber(
        js, CODEC, stream=RELIABILITY_STREAM, consumer="slow", max_in_flight=bound
    )
    holder.append(await sub.start("rel.>", slow))
    async with asyncio.timeout(40):
        await done.wait()
    await holder[0].stop()
    growth = rss[-1] - rss[0]
    record(
        messages=count,
        bound=bound,
        most_outstanding=most_outstanding,
        most_ack_pending_on_server=most_ack_pending,
        rss_growth_kib=growth,
        connection_errors=len(connection.errors),
        reconnects=nc.stats["reconnects"],
    )
    assert sorted(handled) == sorted(f"order-{n}" for n in range(count))
    assert most_outstanding <= bound
    assert most_ack_pending <= bound
    assert growth < 4 * 1024  # flat: a few MiB of allocator noise at most
    assert connection.errors == []  # no slow-consumer error, no disconnect
    assert nc.stats["reconnects"] == 0


@pytest.mark.parametrize("keep_alive", [False, True], ids=["no_in_progress", "in_progress"])
async def test_a_handler_longer_than_ack_wait(
    server: NatsServer, connection: Connection, record: Callable[..., Any], keep_alive: bool
) -> None:
    js = (await connection.connect(server.url)).jetstream()
    await setup(js, "long", 1, 2.0)  # keep-alive signals every 0.5 s: 1 s of margin
    deliveries: list[int] = []
    finished = asyncio.Event()

    async def long(msg: Message[Order]) -> None:
        assert msg.delivery is not None
        deliveries.append(msg.delivery.num_delivered)
        await asyncio.sleep(5.0)  # the handler's own work, 2.5 x ack_wait
        finished.set()

    sub = jetstream.Subscriber(
        js,
        CODEC,
        stream=RELIABILITY_STREAM,
        consumer="long",
        concurrency=2,
        max_in_flight=2,
        keep_alive=keep_alive,
    )
    subscription = await sub.start("rel.>", long)
    async with asyncio.timeout(20):
        await finished.wait()
        await subscription.stop()
        # The ack is sent, not yet applied: the server's view is the signal.
        info = await drained(js, RELIABILITY_STREAM, "long")
    record(ack_wait_s=2.0, handler_s=5.0, deliveries=deliveries, duplicates=len(deliveries) - 1)
    assert (info.num_pending, info.num_ack_pending) == (0, 0)
    if keep_alive:
        assert deliveries == [1]  # in_progress kept the first delivery alive
    else:
        assert deliveries[:2] == [1, 2]  # redelivered while the first still ran: a duplicate
