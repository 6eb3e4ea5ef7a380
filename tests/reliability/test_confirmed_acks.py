"""Confirmed acks through crashes: how many messages are handled again, on vs off.

A consumer process is killed (SIGKILL) while it consumes at full speed; a second
consumer on the same durable then takes the rest. Every message the first one handled
whose ack the server had not applied comes again: "handled again". With confirmed
acks a message keeps its in-flight room until the server confirmed its ack, so at
most ``max_in_flight`` handled messages can be unconfirmed at the crash.
"""

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
from tests.reliability.conftest import RELIABILITY_STREAM, Connection

pytestmark = pytest.mark.timeout(90)

CODEC = JsonCodec(Order)
ROOT = Path(__file__).resolve().parents[2]
TOTAL = 3_000
KILL_AT = 1_000  # handled messages before the kill
IN_FLIGHT = 256  # the subscriber's default max_in_flight
ACK_WAIT = 2.0


async def _provision(js: JetStreamContext, consumer: str) -> None:
    await jetstream.ensure_stream(js, name=RELIABILITY_STREAM, subjects=["rel.>"])
    await jetstream.ensure_consumer(
        js,
        stream=RELIABILITY_STREAM,
        name=consumer,
        filter_subject="rel.>",
        ack_wait=ACK_WAIT,
    )
    await jetstream.Publisher(js, CODEC).publish_many(
        jetstream.Outgoing("rel.orders", order(n), message_id=f"order-{n}") for n in range(TOTAL)
    )


async def _run_and_kill(url: str, consumer: str, confirm: bool) -> set[str]:
    """Run the consumer process until it handled KILL_AT; kill it; what it handled."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.reliability.counting_consumer",
        url,
        RELIABILITY_STREAM,
        consumer,
        str(IN_FLIGHT),
        "1" if confirm else "0",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    handled: set[str] = set()
    assert child.stdout is not None
    try:
        async with asyncio.timeout(30):
            while len(handled) < KILL_AT:
                line = (await child.stdout.readline()).decode()
                assert line, "the consumer process ended by itself"
                if line.startswith("handled "):
                    handled.add(line.split()[1])
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # a crash while consuming: no drain, no nak
    rest = await child.stdout.read()  # what it reported before it died
    await child.wait()
    for line in rest.decode().splitlines():
        if line.startswith("handled ") and len(line.split()) == 2:
            handled.add(line.split()[1])
    return handled


async def _take_the_rest(js: JetStreamContext, consumer: str, before: set[str]) -> list[str]:
    """Consume until every message was handled by one of the two; what this one handled."""
    seen: list[str] = []
    done = asyncio.Event()
    missing = {f"order-{n}" for n in range(TOTAL)} - before

    async def handle(msg: Message[Order]) -> None:
        seen.append(msg.id or "")
        missing.discard(msg.id or "")
        if not missing:
            done.set()

    sub = jetstream.Subscriber(js, CODEC, stream=RELIABILITY_STREAM, consumer=consumer)
    subscription = await sub.start("rel.>", handle)
    async with asyncio.timeout(30):
        await done.wait()
        # The first process's unacked messages come back once their ack_wait expires:
        # wait until the server holds nothing for this consumer any more.
        await drained(js, RELIABILITY_STREAM, consumer)
    await subscription.stop()
    return seen


@pytest.mark.parametrize("confirm", [False, True], ids=["plain_acks", "confirmed_acks"])
async def test_a_killed_consumer_s_handled_messages_come_again_at_most_in_flight(
    server: NatsServer, connection: Connection, record: Callable[..., Any], confirm: bool
) -> None:
    js = (await connection.connect(server.url)).jetstream()
    consumer = "confirming" if confirm else "plain"
    await _provision(js, consumer)
    handled_first = await _run_and_kill(server.url, consumer, confirm)
    handled_second = await _take_the_rest(js, consumer, handled_first)
    again = handled_first & set(handled_second)
    record(
        confirm_acks=confirm,
        max_in_flight=IN_FLIGHT,
        handled_before_kill=len(handled_first),
        handled_again=len(again),
    )
    assert handled_first | set(handled_second) == {f"order-{n}" for n in range(TOTAL)}
    assert len(again) <= IN_FLIGHT


SERVER_SENT = 400
SERVER_KILL_AT = 150


@pytest.mark.parametrize("confirm", [False, True], ids=["plain_acks", "confirmed_acks"])
async def test_a_server_killed_under_a_consumer_makes_it_handle_again(
    server: NatsServer, connection: Connection, record: Callable[..., Any], confirm: bool
) -> None:
    nc = await connection.connect(server.url)
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name=RELIABILITY_STREAM, subjects=["rel.>"])
    await jetstream.ensure_consumer(
        js, stream=RELIABILITY_STREAM, name="restarted", filter_subject="rel.>", ack_wait=2
    )
    await jetstream.Publisher(js, CODEC).publish_many(
        jetstream.Outgoing("rel.orders", order(n), message_id=f"order-{n}")
        for n in range(SERVER_SENT)
    )
    deliveries: list[str] = []
    everything = asyncio.Event()
    started = asyncio.Event()
    killed = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        deliveries.append(msg.id or "")
        if len(deliveries) == SERVER_KILL_AT and not killed.is_set():
            await started.wait()  # not while start() still waits for the server
            server.kill()
            killed.set()
        if len(set(deliveries)) == SERVER_SENT:
            everything.set()

    async def restart_when_noticed() -> None:
        await killed.wait()
        await connection.disconnected.wait()
        await server.restart()

    restarting = asyncio.create_task(restart_when_noticed())
    sub = jetstream.Subscriber(
        js, CODEC, stream=RELIABILITY_STREAM, consumer="restarted", confirm_acks=confirm
    )
    subscription = await sub.start("rel.>", handle)
    started.set()
    async with asyncio.timeout(60):
        await everything.wait()
        await restarting
        info = await drained(js, RELIABILITY_STREAM, "restarted")
    await subscription.stop()
    duplicates = len(deliveries) - len(set(deliveries))
    record(
        confirm_acks=confirm,
        sent=SERVER_SENT,
        handled=len(deliveries),
        handled_twice=duplicates,
        unconfirmed=subscription.unconfirmed,
    )
    assert set(deliveries) == {f"order-{n}" for n in range(SERVER_SENT)}
    assert (info.num_pending, info.num_ack_pending) == (0, 0)
