"""Group: start together, fail fast, drain on SIGTERM, cancellation or stop()."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest
from nats.js import JetStreamContext

from goflux import Group, Handler, Message, StrCodec, SubscribeError, Subscription
from goflux.testing import NatsServer
from goflux.transports import channel, jetstream
from tests.conftest import STREAM
from tests.helpers import Inbox, drained, settle_loop

WORKER = Path(__file__).with_name("sigterm_worker.py")


async def test_start_returns_when_every_member_is_ready_and_stop_drains() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    first, second = Inbox[int](), Inbox[int]()
    processed: list[int] = []

    async def record(message: Message[int]) -> None:
        await asyncio.sleep(0)
        processed.append(message.payload)

    group = Group()
    group.subscribe(sub, "a", first)
    group.subscribe(sub, "b", second)
    group.process(sub.stream("c", buffer=4), record, concurrency=2)
    group.own(pub)
    async with group:
        for i in range(20):
            await pub.publish("a", i)
            await pub.publish("b", i)
            await pub.publish("c", i)
    # Leaving the group drained every member: everything published before was handled.
    assert first.payloads == list(range(20))
    assert second.payloads == list(range(20))
    assert sorted(processed) == list(range(20))
    with pytest.raises(Exception, match="closed"):
        await pub.publish("a", 99)  # owned resources were closed


async def test_the_first_failure_stops_the_rest_and_is_raised() -> None:
    bus: channel.Bus[int] = channel.Bus()
    sub = channel.Subscriber(bus)
    cancelled = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def broken() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("database gone")

    group = Group(signals=())
    group.subscribe(sub, "a", Inbox[int]())
    group.task(forever)
    group.task(broken, name="broken")
    with pytest.raises(RuntimeError, match="database gone"):
        await group.run()
    assert cancelled.is_set()
    assert bus.subscription_count == 0
    assert isinstance(group.failure, RuntimeError)


async def test_a_member_that_cannot_start_stops_the_others(js: JetStreamContext) -> None:
    good = jetstream.Subscriber(js, StrCodec(), stream=STREAM)
    bad = jetstream.Subscriber(js, StrCodec(), stream="MISSING")
    group = Group()
    group.subscribe(good, "orders.>", Inbox[str]())
    group.subscribe(bad, "orders.>", Inbox[str]())
    with pytest.raises(SubscribeError, match="not found"):
        await group.start()
    assert (await js.stream_info(STREAM)).state.consumer_count == 0  # ephemeral removed


async def test_cancelling_run_drains_and_reraises() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    started, release = asyncio.Event(), asyncio.Event()
    finished: list[int] = []

    async def slow(message: Message[int]) -> None:
        started.set()
        await release.wait()
        finished.append(message.payload)

    group = Group(signals=())
    group.subscribe(sub, "a", slow)
    ready = asyncio.Event()

    async def announce() -> None:
        ready.set()

    group.task(announce)
    running = asyncio.create_task(group.run())
    await ready.wait()
    assert bus.subscription_count == 1
    await pub.publish("a", 1)
    await started.wait()
    running.cancel()
    await asyncio.sleep(0)
    release.set()  # the drain lets the running handler finish
    with pytest.raises(asyncio.CancelledError):
        await running
    assert finished == [1]


async def test_wait_tasks_get_until_the_deadline() -> None:
    done = asyncio.Event()
    stopping_seen = asyncio.Event()

    async def flushes_on_stop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            done.set()

    async def finisher() -> None:
        await group.until_stopping()
        assert group.stopping
        stopping_seen.set()

    group = Group(drain_timeout=5)
    group.task(flushes_on_stop)
    group.task(finisher, on_stop="wait")
    await group.start()
    await group.stop()
    assert done.is_set()
    assert stopping_seen.is_set()
    with pytest.raises(ValueError, match="on_stop"):
        Group().task(finisher, on_stop="later")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="before it starts"):
        group.task(finisher)


@pytest.mark.slow  # a child process under load
async def test_sigterm_during_load_finishes_in_flight_work_and_loses_nothing(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    for name, pattern in (("subscribed", "orders.sub.>"), ("streamed", "orders.proc.>")):
        await jetstream.ensure_consumer(js, stream=STREAM, name=name, filter_subject=pattern)
    pub = jetstream.Publisher(js, StrCodec())
    sent = [f"orders.sub.{i}" for i in range(150)] + [f"orders.proc.{i}" for i in range(150)]
    await pub.publish_many(jetstream.Outgoing(s, s) for s in sent)
    worker = await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), nats_server.url, stdout=asyncio.subprocess.PIPE
    )
    assert worker.stdout is not None
    starts: Counter[str] = Counter()
    dones: Counter[str] = Counter()
    stopped = None
    signalled = False
    async with asyncio.timeout(40):  # below the test's 60 s
        async for raw in worker.stdout:
            kind, _, what = raw.decode().strip().partition(" ")
            if kind == "start":
                starts[what] += 1
            elif kind == "done":
                dones[what] += 1
            elif kind == "stopped":
                stopped = what
            if not signalled and len(dones) >= 40:
                worker.send_signal(signal.SIGTERM)  # under load: handlers are running
                signalled = True
        code = await worker.wait()
    assert code == 0
    assert stopped == "SIGTERM"
    assert starts == dones  # every handler that started finished
    assert 40 <= len(dones) < len(sent)  # stopped midway
    # What the worker did not finish is still there, in no one's hands, and is
    # delivered now; nothing it finished comes again.
    rest: Counter[str] = Counter()
    everything = asyncio.Event()

    async def collect(message: Message[str]) -> None:
        rest[message.payload] += 1
        if len(dones) + len(rest) >= len(sent):
            everything.set()

    subs = []
    for name, pattern in (("subscribed", "orders.sub.>"), ("streamed", "orders.proc.>")):
        sub = jetstream.Subscriber(js, StrCodec(), stream=STREAM, consumer=name)
        await sub.start(pattern, collect)
        subs.append(sub)
    async with asyncio.timeout(20):
        await everything.wait()
    for sub in subs:
        await sub.close()
    assert not set(rest) & set(dones)  # acked exactly once
    assert set(rest) | set(dones) == set(sent)  # nothing lost
    assert max(rest.values()) == 1
    # Acks are fire-and-forget: the server's view is the signal (a lost ack times out).
    async with asyncio.timeout(10):
        for name in ("subscribed", "streamed"):
            await drained(js, STREAM, name)


async def test_stopping_while_members_start_stops_them_once_started() -> None:
    bus: channel.Bus[int] = channel.Bus()
    inner = channel.Subscriber(bus)
    entered, release = asyncio.Event(), asyncio.Event()

    class SlowStart:
        async def start(self, subject: str, handler: Handler[int]) -> Subscription:
            entered.set()
            await release.wait()
            return await inner.start(subject, handler)

        async def subscribe(self, subject: str, handler: Handler[int]) -> None:
            await inner.subscribe(subject, handler)

        async def close(self) -> None:
            await inner.close()

    group = Group(signals=())
    group.subscribe(SlowStart(), "a", Inbox[int]())  # type: ignore[arg-type]
    starting = asyncio.create_task(group.start())
    await entered.wait()
    stopping = asyncio.create_task(group.stop())
    await settle_loop()
    release.set()
    async with asyncio.timeout(5):
        await starting
        await stopping
        await group.wait()
    assert bus.subscription_count == 0  # nothing left running
