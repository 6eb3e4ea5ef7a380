"""``goflux run --workers 2`` over a durable consumer: exactly once, crashes, drains.

Real processes: a nats-server, the supervisor and its workers (examples/payments_service.py,
which records in a ledger per process what each handler began and finished).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.js import JetStreamContext

from goflux.testing import NatsServer
from tests.helpers import drained
from tests.service.ledgers import done_counts, read_ledgers
from tests.service.orders import (
    SERVICE,
    acked_at_least,
    charged_per_worker,
    publish_orders,
    started_pid,
)
from tests.service.runner import GofluxRun

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ORDERS = 20_000
MAX_IN_FLIGHT = 256  # the example's subscriber: at most this many unsettled per worker


@pytest.fixture
async def js(nats_server: NatsServer) -> AsyncIterator[JetStreamContext]:
    nc = await nats.connect(nats_server.url)
    yield nc.jetstream()
    await nc.close()


def workers(nats_server: NatsServer, ledger: Path, *args: str, **env: str) -> GofluxRun:
    settings = {"NATS_URL": nats_server.url, "PAYMENTS_LEDGER": str(ledger), **env}
    return GofluxRun(SERVICE, "--workers", "2", *args, env=settings)


async def until_ready(run: GofluxRun) -> None:
    for worker in (1, 2):
        await asyncio.to_thread(run.wait_for, rf"worker {worker} \(pid \d+\) is ready")


async def test_two_workers_charge_every_order_exactly_once(
    nats_server: NatsServer, js: JetStreamContext, tmp_path: Path
) -> None:
    with workers(nats_server, tmp_path) as run:
        await until_ready(run)
        # Published once both pull: published before, they would be the first ready
        # worker's alone on a loaded machine, where the other takes seconds to start.
        ids = await publish_orders(js, ORDERS)
        async with asyncio.timeout(60):
            await drained(js, "ORDERS", "payments")
        run.signal(signal.SIGTERM)
        assert await asyncio.to_thread(run.wait) == 0, run.output

    ledgers = read_ledgers(tmp_path)
    counts = done_counts(ledgers)
    assert set(counts) == set(ids)
    assert set(counts.values()) == {1}, "an order was charged twice"
    per_worker = Counter(ledger.worker for ledger in ledgers.values() for _ in ledger.done)
    printed = charged_per_worker(run.output)
    print(f"charged per worker: {printed}")
    assert printed == dict(per_worker)
    assert set(printed) == {"1", "2"}
    assert min(printed.values()) > 0, "both workers must have done work"
    assert sum(printed.values()) == ORDERS


async def test_a_killed_worker_is_restarted_and_its_messages_redelivered(
    nats_server: NatsServer, js: JetStreamContext, tmp_path: Path
) -> None:
    ids = await publish_orders(js, ORDERS)
    slow = {"PAYMENTS_ACK_WAIT": "1", "PAYMENTS_WORK_MS": "1", "PAYMENTS_CONCURRENCY": "8"}
    with workers(nats_server, tmp_path, **slow) as run:
        await until_ready(run)
        await acked_at_least(js, ORDERS // 4)
        killed = started_pid(run.output, 1)
        os.kill(killed, signal.SIGKILL)
        await asyncio.to_thread(run.wait_for, rf"worker 1 \(pid {killed}\) was killed by SIGKILL")
        await asyncio.to_thread(run.wait_for, r"restarting worker 1 in")
        async with asyncio.timeout(60):
            await drained(js, "ORDERS", "payments")
        assert started_pid(run.output, 1, nth=2) != killed  # restarted
        run.signal(signal.SIGTERM)
        assert await asyncio.to_thread(run.wait) == 0, run.output

    ledgers = read_ledgers(tmp_path)
    counts = done_counts(ledgers)
    assert set(counts) == set(ids), "an order was lost"
    assert max(counts.values()) <= 2
    victim = ledgers[killed]
    charged_by_victim = {order for order, _ in victim.done}
    twice = {order for order, n in counts.items() if n == 2}
    # A duplicate is an order the killed worker charged but had not acked yet: it was
    # in flight there, came back after ack_wait and was charged again as a redelivery.
    assert twice <= charged_by_victim
    survivors = [ledger for pid, ledger in ledgers.items() if pid != killed]
    redelivered = {
        order for ledger in survivors for order, delivered in ledger.done if delivered > 1
    }
    assert twice <= redelivered
    assert victim.unfinished <= redelivered, "a handler cut off by the kill was not redelivered"
    assert redelivered, "the kill caught nothing in flight"
    # Everything redelivered was in flight in the killed worker: at most its window.
    assert len(redelivered) <= MAX_IN_FLIGHT
    print(
        f"killed worker 1 (pid {killed}) after {len(victim.done)} charges; redelivered and "
        f"charged elsewhere: {len(redelivered)} (of them charged twice: {len(twice)}, cut "
        f"off mid-handler: {len(victim.unfinished)}); per worker: {charged_per_worker(run.output)}"
    )


async def test_sigterm_drains_every_worker_and_leaves_nothing_ack_pending(
    nats_server: NatsServer, js: JetStreamContext, tmp_path: Path
) -> None:
    await publish_orders(js, ORDERS)
    slow = {"PAYMENTS_WORK_MS": "5", "PAYMENTS_CONCURRENCY": "16"}
    drain_timeout = 10.0
    with workers(nats_server, tmp_path, "--drain-timeout", str(drain_timeout), **slow) as run:
        await until_ready(run)
        await acked_at_least(js, 2_000)
        asked = time.monotonic()
        run.signal(signal.SIGTERM)
        code = await asyncio.to_thread(run.wait)
        took = time.monotonic() - asked
    assert code == 0, run.output
    assert took < drain_timeout, f"took {took:.1f}s"
    assert run.count(r"drained; exiting") == 2
    ledgers = read_ledgers(tmp_path)
    assert all(not ledger.unfinished for ledger in ledgers.values()), "a handler was cut off"
    counts = done_counts(ledgers)
    assert set(counts.values()) == {1}
    assert 0 < len(counts) < ORDERS, "stopped mid-run"
    # The workers' last acks are fire-and-forget: wait for the server's view of them
    # (nothing comes back before the 30 s ack_wait, so a nak'd or lost one times out).
    info = await js.consumer_info("ORDERS", "payments")
    try:
        async with asyncio.timeout(10):
            while info.num_ack_pending:
                await js._nc.flush()
                info = await js.consumer_info("ORDERS", "payments")
    except TimeoutError:  # (seen once in 2 CI runs under load: say what was left)
        pytest.fail(
            f"{info.num_ack_pending} ack pending 10 s after the drain (redelivered "
            f"{info.num_redelivered}, ack floor {info.ack_floor.stream_seq}, delivered "
            f"{info.delivered.stream_seq}, {len(counts)} charged); the workers said:\n"
            + "\n".join(run.lines[-40:])
        )
    assert (info.ack_floor.stream_seq or 0) <= len(counts)
    per_worker = charged_per_worker(run.output)
    print(f"drained in {took:.2f}s after {len(counts)} charges; per worker {per_worker}")
