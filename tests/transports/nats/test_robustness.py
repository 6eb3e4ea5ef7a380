"""Core NATS edge cases found in review, each reproduced against a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time

import pytest
from nats.aio.client import Client

from goflux import BytesCodec, Message, RemoteError, RequestError
from goflux.testing import NatsServer
from goflux.transports import _natspy
from goflux.transports import nats as gnats
from tests.conftest import Otel
from tests.helpers import Inbox, stopped

RAW = BytesCodec()


async def echo(payload: bytes) -> bytes:
    return payload


async def flood_then_stop(
    nc: Client, subscription: gnats.NatsSubscription[bytes], started: asyncio.Event
) -> None:
    """Send 10 messages past a stuck handler, stop at a short deadline, check the books."""
    for _ in range(10):
        await nc.publish("load", b"x")
    await nc.flush()
    await started.wait()
    await subscription.stop(timeout=0.2)
    assert subscription.handled + subscription.failed + subscription.dropped == 10


async def test_a_responder_stopped_without_drain_time_leaves_its_queue_group(nc: Client) -> None:
    async with gnats.Responder(nc, RAW, RAW, queue="q") as staying:
        await staying.start("svc", echo)
        leaving = gnats.Responder(nc, RAW, RAW, queue="q", drain_timeout=0)
        await leaving.start("svc", echo)
        await leaving.close()
        requester = gnats.Requester(nc, RAW, RAW, timeout=2)
        replies = await asyncio.gather(*(requester.request("svc", b"%d" % n) for n in range(20)))
    assert replies == [b"%d" % n for n in range(20)]  # none left to a departed member


async def test_stop_returns_at_once_when_the_connection_closes_under_it(nc: Client) -> None:
    started = asyncio.Event()

    async def stuck(msg: Message[bytes]) -> None:
        started.set()
        await asyncio.Event().wait()

    subscription = await gnats.Subscriber(nc, RAW, drain_timeout=5).start("x", stuck)
    for _ in range(5):
        await nc.publish("x", b"1")
    await started.wait()
    stopping = asyncio.create_task(subscription.stop())
    await asyncio.sleep(0)
    await nc.close()
    began = time.perf_counter()
    await stopping
    assert time.perf_counter() - began < 2.0  # not the 5 s drain deadline


@pytest.mark.parametrize("concurrency", [1, 2])
async def test_every_message_is_handled_failed_or_dropped_once(
    nc: Client, concurrency: int
) -> None:
    started = asyncio.Event()

    async def stuck(msg: Message[bytes]) -> None:
        started.set()
        await asyncio.Event().wait()

    subscription = await gnats.Subscriber(
        nc, RAW, pending_messages=3, concurrency=concurrency
    ).start("load", stuck)
    await flood_then_stop(nc, subscription, started)
    assert subscription.failed == concurrency  # the handlers the deadline cancelled


async def test_a_handler_swallowing_the_deadline_cancel_is_not_counted_twice(nc: Client) -> None:
    started = asyncio.Event()

    async def stubborn(msg: Message[bytes]) -> None:
        started.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()

    subscription = await gnats.Subscriber(nc, RAW).start("load", stubborn)
    await flood_then_stop(nc, subscription, started)


async def test_requests_caught_by_a_responder_s_drain_deadline_get_an_error_reply(
    nc: Client,
) -> None:
    started = asyncio.Event()

    async def stuck(payload: bytes) -> bytes:
        started.set()
        await asyncio.Event().wait()
        return payload

    responder = gnats.Responder(nc, RAW, RAW)
    serving = await responder.start("svc", stuck)
    requester = gnats.Requester(nc, RAW, RAW, timeout=10)
    calls = [asyncio.create_task(requester.request("svc", b"%d" % n)) for n in range(3)]
    await started.wait()
    await nc.flush()
    began = time.perf_counter()
    await serving.stop(timeout=0.2)
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert time.perf_counter() - began < 2.0  # answered, not left to time out
    assert all(isinstance(r, RemoteError) and r.code == 503 for r in results), results
    assert serving.failed == 3


class _Said(logging.Handler):
    """Sets ``event`` when a log record's message contains ``words``."""

    def __init__(self, words: str, event: asyncio.Event) -> None:
        super().__init__()
        self.words = words
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.event.set()


async def test_a_request_arriving_after_the_drain_deadline_is_answered_and_ends_the_drain(
    nats_server: NatsServer, nc: Client
) -> None:
    # The server delivers what it read before the drain's UNSUB, and a slow one may send
    # it after the deadline cancelled nats-py's callback task. Left in nats-py's queue,
    # it went unanswered and held the drain (and the stop) for 5 s, as nats-py's drain
    # waits until its queue is empty.
    serving = await gnats.Responder(nc, RAW, RAW).start("svc", echo)
    requester = gnats.Requester(nc, RAW, RAW, timeout=10)
    assert await requester.request("svc", b"early") == b"early"  # the reply inbox exists
    expired = asyncio.Event()
    said = _Said("timed out", expired)
    logger = logging.getLogger("goflux.transports.nats")
    logger.addHandler(said)
    assert nats_server.pid is not None
    os.kill(nats_server.pid, signal.SIGSTOP)  # nothing is delivered until SIGCONT
    try:
        await stopped(nats_server.pid)
        late = asyncio.create_task(requester.request("svc", b"late"))
        await _natspy._written(nc, 5)  # the request is out, before the drain's UNSUB
        stopping = asyncio.create_task(serving.stop(0))
        await expired.wait()  # the deadline passed: nats-py's callback task is cancelled
    finally:
        os.kill(nats_server.pid, signal.SIGCONT)
        logger.removeHandler(said)
    with pytest.raises(RemoteError) as info:
        await late
    assert info.value.code == 503
    await stopping
    assert serving.failed == 1
    assert serving.dropped == 0


async def test_failed_requests_carry_their_real_error_type(nc: Client, otel: Otel) -> None:
    async def failing(payload: bytes) -> bytes:
        raise ValueError("no")

    async with gnats.Responder(nc, RAW, RAW, telemetry=otel.telemetry) as responder:
        await responder.start("svc", failing)
        with pytest.raises(RemoteError):
            await gnats.Requester(nc, RAW, RAW).request("svc", b"x")
    attrs = dict(otel.span("process svc").attributes or {})
    assert attrs["error.type"] == "ValueError"


async def test_a_request_in_flight_when_the_connection_closes_is_a_request_error(
    nc: Client,
) -> None:
    async def never(payload: bytes) -> bytes:
        await asyncio.Event().wait()
        return payload

    responder = gnats.Responder(nc, RAW, RAW)
    await responder.start("svc", never)
    call = asyncio.create_task(gnats.Requester(nc, RAW, RAW, timeout=0.5).request("svc", b"x"))
    await nc.flush()
    await nc.close()
    with pytest.raises(RequestError, match="connection closed") as info:
        await call
    assert not isinstance(info.value, TimeoutError)


async def test_stop_from_a_task_a_handler_spawned_does_not_deadlock(nc: Client) -> None:
    inbox: Inbox[bytes] = Inbox()
    holder: list[gnats.NatsSubscription[bytes]] = []

    async def stopping(msg: Message[bytes]) -> None:
        await inbox(msg)
        if msg.payload == b"0":
            await asyncio.wait_for(holder[0].stop(), 10)  # runs in a task of its own

    holder.append(await gnats.Subscriber(nc, RAW, drain_timeout=5).start("x", stopping))
    for n in range(20):
        await nc.publish("x", b"%d" % n)
    await nc.flush()
    began = time.perf_counter()
    await holder[0].wait()
    assert time.perf_counter() - began < 2.0
    assert holder[0].failed == 0
    assert len(inbox.messages) == 20  # all that was delivered before the stop
