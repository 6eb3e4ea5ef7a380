"""Auto-acks of one event-loop step written together, against a real nats-server.

A subscription writes each auto-ack of a loop step into one block in nats-py's buffer
(:class:`~goflux.transports.jetstream._ack_batch.AckBatch`) and counts them and frees
their room after the step: never held while a handler waits, never lost by a close or
while the connection is down, the room freed once; and a step never runs on past a
pull's worth of messages with their acks and the pull request held back.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from goflux import AckNotConfirmed, JsonCodec, Message, micro_batches
from goflux.testing import NatsServer
from goflux.transports import jetstream
from tests.conftest import STREAM
from tests.helpers import settle_loop
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


async def test_an_ack_is_in_nats_py_buffer_once_the_message_reads_acked(
    nats_server: NatsServer,
) -> None:
    # The user closes the connection right after the last handler returned: its
    # auto-ack was already in nats-py's buffer, which a close still sends.
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name=STREAM, subjects=["orders.>"])
    await jetstream.ensure_consumer(js, stream=STREAM, name="closing", filter_subject="orders.>")
    done = asyncio.Event()
    seen: list[Message[Order]] = []

    async def handle(msg: Message[Order]) -> None:
        seen.append(msg)
        done.set()

    await jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="closing").start(
        "orders.>", handle
    )
    await jetstream.Publisher(js, CODEC).publish("orders.a", order(1))
    await done.wait()
    assert seen[0].settled == "ack"
    await nc.close()
    async with await nats.connect(nats_server.url) as other:
        info = await other.jetstream().consumer_info(STREAM, "closing")
    assert (info.num_ack_pending, info.ack_floor.stream_seq) == (0, 1)


async def test_an_auto_ack_never_overtakes_what_its_handler_published(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    # Each handler publishes its result (core NATS, not awaited by the server) and
    # returns: the server must see each result before the ack of its message, or a
    # cut connection could leave a message acked whose effect was lost.
    await jetstream.Publisher(js, CODEC).publish_many(
        jetstream.Outgoing("orders.a", order(n)) for n in range(40)
    )
    await jetstream.ensure_consumer(js, stream=STREAM, name="effects", filter_subject="orders.>")
    seen: list[tuple[str, int]] = []  # in the order the server received them
    acks = asyncio.Event()

    async def monitor(msg: Msg) -> None:
        if msg.subject.startswith("$JS.ACK."):
            seen.append(("ack", int(msg.subject.split(".")[-4])))  # the stream sequence
            if sum(kind == "ack" for kind, _ in seen) == 40:
                acks.set()
        elif msg.subject.startswith("results."):
            seen.append(("result", int(msg.subject.split(".")[1])))

    async with await nats.connect(nats_server.url) as watcher:
        await watcher.subscribe(">", cb=monitor)  # one subscription: the server's order
        await watcher.flush()
        nc = js._nc

        async def handle(msg: Message[Order]) -> None:
            assert msg.delivery is not None
            await nc.publish(f"results.{msg.delivery.stream_sequence}", b"done")

        sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="effects")
        await sub.start("orders.>", handle)
        async with asyncio.timeout(10):
            await acks.wait()
        await sub.close()
    position = {event: index for index, event in enumerate(seen)}
    early = [n for n in range(1, 41) if position[("ack", n)] < position[("result", n)]]
    assert early == []


class Reconnecting:
    """A client that reconnects at once, with events for its disconnect and reconnect."""

    def __init__(self) -> None:
        self.disconnected = asyncio.Event()
        self.reconnected = asyncio.Event()

    async def _on_disconnect(self) -> None:
        self.disconnected.set()

    async def _on_reconnect(self) -> None:
        self.reconnected.set()

    async def connect(self, server: NatsServer, consumer: str) -> tuple[Client, JetStreamContext]:
        """Connect, with the ORDERS stream, a durable ``consumer`` and one order stored."""
        nc = await nats.connect(
            server.url,
            reconnect_time_wait=0.05,
            max_reconnect_attempts=-1,
            disconnected_cb=self._on_disconnect,
            reconnected_cb=self._on_reconnect,
        )
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name=STREAM, subjects=["orders.>"])
        await jetstream.ensure_consumer(js, stream=STREAM, name=consumer, filter_subject="orders.>")
        await jetstream.Publisher(js, CODEC).publish("orders.a", order(1))
        return nc, js


async def all_acked(js: JetStreamContext, consumer: str) -> None:
    """Wait until the server has no unacknowledged delivery of ``consumer``."""
    async with asyncio.timeout(10):
        while (await js.consumer_info(STREAM, consumer)).num_ack_pending:
            await js._nc.flush()


async def test_an_auto_ack_while_the_connection_is_down_reaches_the_server_after_it(
    nats_server: NatsServer,
) -> None:
    proceed, started = asyncio.Event(), asyncio.Event()
    client = Reconnecting()
    nc, js = await client.connect(nats_server, "down")

    async def handle(msg: Message[Order]) -> None:
        started.set()
        await proceed.wait()  # returns (and is auto-acked) while the server is down

    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="down")
    subscription = await sub.start("orders.>", handle)
    async with asyncio.timeout(10):
        await started.wait()
    nats_server.kill()
    async with asyncio.timeout(10):
        await client.disconnected.wait()
    proceed.set()
    await settle_loop()  # the handler returns; nothing here waits on the network
    assert subscription.outstanding == 0
    assert nc.pending_data_size > 0  # the ack, buffered by nats-py until the reconnect
    await nats_server.restart()
    async with asyncio.timeout(20):
        await client.reconnected.wait()
    await all_acked(js, "down")
    assert subscription.handled == 1
    await sub.close()
    await nc.close()


@pytest.mark.slow  # a server restart
async def test_an_auto_ack_after_a_given_up_confirmation_frees_the_room_once(
    nats_server: NatsServer,
) -> None:
    # The confirmation was given up (server down): its room came back then. The
    # handler returns once the connection is back; the auto-ack must not give the
    # room back a second time (or the subscription would hold one more than its bound).
    client = Reconnecting()
    nc, js = await client.connect(nats_server, "given-up")
    done = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        nats_server.kill()
        with pytest.raises(AckNotConfirmed):
            await msg.ack(confirm=True)
        assert msg.settled is None  # unsettled again: the auto-ack follows
        await nats_server.restart()
        async with asyncio.timeout(20):
            await client.reconnected.wait()
        done.set()

    sub = jetstream.Subscriber(
        js, CODEC, stream=STREAM, consumer="given-up", confirm_timeout=0.2, max_in_flight=4
    )
    subscription = await sub.start("orders.>", handle)
    async with asyncio.timeout(30):
        await done.wait()
    await all_acked(js, "given-up")
    assert subscription.outstanding == 0
    await sub.close()
    await nc.close()


@pytest.mark.slow  # 16 timed batches
async def test_a_stream_consumed_in_batches_is_not_paced_by_its_hand_off(
    js: JetStreamContext,
) -> None:
    # micro_batches as the composition guide shows it: the hand-off waits while a batch
    # is written, which is the stream consumer's back-pressure, not a handler's pace;
    # sized by it, the window fell below the batch and the batches shrank.
    # More than max_in_flight (512) stored: later batches depend on later pulls.
    total = 64 * 16
    await jetstream.Publisher(js, CODEC).publish_many(
        jetstream.Outgoing("orders.a", order(n)) for n in range(total)
    )
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM)
    sizes: list[int] = []
    async with micro_batches(sub, "orders.>", max_messages=64, max_wait=2.0) as batches:
        async for batch in batches:
            sizes.append(len(batch))
            await asyncio.sleep(0.1)  # the batch is written somewhere
            if sum(sizes) >= total:
                break
    assert sizes == [64] * 16


@pytest.mark.parametrize("ordered", [False, True], ids=["acked", "ordered"])
async def test_a_message_alone_in_its_step_gives_its_room_back_before_its_worker_waits(
    js: JetStreamContext, ordered: bool
) -> None:
    # Each message comes alone (the next is published once the last was handled), so
    # its worker has nothing left ready: it gives the room back (and counts the ack)
    # itself before it waits, in the handler's own step, with no callback scheduled.
    # The test task, woken by the handler, runs after that step: the room is free by
    # then (a callback would run after the test task). A room never given back would
    # stop the subscription at the second message (max_in_flight 1). (The first
    # message is timed, for the pull window's pace, and settled the general way.)
    handled: asyncio.Queue[str] = asyncio.Queue()

    async def handle(msg: Message[Order]) -> None:
        handled.put_nowait(msg.payload.id)

    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, max_in_flight=1, ordered=ordered)
    subscription = await sub.start("orders.>", handle)
    pub = jetstream.Publisher(js, CODEC)
    for n in range(20):
        await pub.publish("orders.a", order(n))
        async with asyncio.timeout(10):
            assert await handled.get() == f"o-{n}"
        if n:
            assert subscription.outstanding == 0
    if not ordered:
        await wait_for_state(js, subscription.consumer, (0, 20))
    await sub.close()
    assert subscription.handled == 20


class ConsumerWatch:
    """The server's view of one consumer, asked for from a thread on its own connection.

    The test's event loop stands still while a handler's step runs (and while the test
    holds it up), so the server is asked from a thread of its own, over and over.
    """

    def __init__(self, url: str, consumer: str) -> None:
        self.acked = 0  # the ack floor's consumer sequence
        self.delivered = 0  # the last consumer sequence delivered
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(url, consumer), daemon=True)
        self._thread.start()

    def _run(self, url: str, consumer: str) -> None:
        try:
            asyncio.run(self._poll(url, consumer))
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop()
            self._error = exc
            with self._changed:
                self._changed.notify_all()

    async def _poll(self, url: str, consumer: str) -> None:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            while not self._stop.is_set():
                info = await js.consumer_info(STREAM, consumer)
                with self._changed:
                    self.acked = info.ack_floor.consumer_seq or 0
                    self.delivered = info.delivered.consumer_seq or 0
                    self._changed.notify_all()
                await asyncio.sleep(0.002)  # the poll's pace (nothing waits on it)
        finally:
            await nc.close()

    def wait_delivered(self, count: int, timeout: float = 10.0) -> None:
        """Block (the calling thread: the test's loop) until ``count`` were delivered.

        Raises:
            TimeoutError: Not within ``timeout`` seconds, or the watch failed.
        """
        with self._changed:
            if not self._changed.wait_for(
                lambda: self.delivered >= count or self._error is not None, timeout
            ):
                raise TimeoutError(f"{self.delivered} of {count} delivered")
        if self._error is not None:
            raise TimeoutError("the consumer watch failed") from self._error

    def stop(self) -> None:
        """End the thread; raise what it failed with, if anything."""
        self._stop.set()
        self._thread.join(10)
        if self._error is not None:
            raise self._error


def busy(seconds: float) -> None:
    """A handler's work that never waits on the event loop (a blocking call, in its step).

    It lets go of the GIL (a sleep), so the test's watch thread keeps up meanwhile.
    """
    time.sleep(seconds)


@pytest.mark.parametrize("mode", ["auto-ack", "manual-ack", "ordered"])
async def test_a_long_step_sends_its_acks_and_next_pull_before_it_ends(
    js: JetStreamContext, nats_server: NatsServer, mode: str
) -> None:
    # The loop is held up (after 100 messages) until the server has sent all the
    # subscription asked for: those then arrive in one read, a backlog of a few hundred
    # small messages that a worker whose handler never waits handles in one step. After
    # each pull's worth of them (the window's threshold) it lets the loop run once, so
    # their acks and the next pull request reach the server while the rest are handled;
    # held to the end of the step, the server would sit idle meanwhile. The first acks,
    # and the pull request their room allows (in the same write), reach the server
    # before the worker lets the loop run a second time. (Auto-acked, the handler runs
    # inline in the worker's loop; acked by hand, through _process.)
    ordered = mode == "ordered"
    pub = jetstream.Publisher(js, CODEC)
    stored = 3000
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(stored))
    if not ordered:
        await jetstream.ensure_consumer(js, stream=STREAM, name="long", filter_subject="orders.>")
    loop = asyncio.get_running_loop()
    handled = 0
    armed = False  # the subscription and its watch are there: hold the loop up next
    held_up: list[BaseException] = []  # why the hold-up failed, if it did
    # At the hold-up: messages handled, the last of the backlog, the window's threshold.
    held_up_after = backlog_end = threshold = 0
    # The messages being handled when the server was first seen to have a pull's worth
    # of the backlog's acks, and to have delivered beyond it.
    acks_seen: int | None = None
    more_seen: int | None = None
    done = asyncio.Event()

    def hold_up() -> None:
        nonlocal held_up_after, backlog_end, threshold
        # (White-box: what the engine asked for and has not received yet, once every
        # pull request it counts is written. The engine's task to send one runs first;
        # what waits in nats-py's buffer is written here, as nats-py's writer would.)
        engine = subscription._engine
        if engine._pull_scheduled:
            loop.call_soon(hold_up)
            return
        nc, transport = js._nc, js._nc._transport
        if nc._pending and transport is not None:
            transport.writelines(nc._pending)
            nc._pending, nc._pending_data_size = [], 0
        held_up_after = handled
        backlog_end = min(stored, handled + len(subscription._ready) + engine._requested)
        threshold = engine.window.threshold
        try:
            watch.wait_delivered(backlog_end)
        except BaseException as exc:  # noqa: BLE001 - a loop callback's: failed below
            held_up.append(exc)

    async def handle(msg: Message[Order]) -> None:
        nonlocal handled, armed, acks_seen, more_seen
        handled += 1
        if armed and handled >= 100:
            armed = False
            loop.call_soon(hold_up)
        elif held_up_after < handled <= backlog_end:
            busy(0.002)
            if acks_seen is None and watch.acked >= held_up_after + threshold:
                acks_seen = handled
            if more_seen is None and watch.delivered > backlog_end:
                more_seen = handled
        if mode == "manual-ack":
            await msg.ack()
        if handled == stored:
            done.set()

    settings: dict[str, Any] = {"ordered": True} if ordered else {"consumer": "long"}
    sub = jetstream.Subscriber(
        js, CODEC, stream=STREAM, manual_ack=mode == "manual-ack", **settings
    )
    subscription = await sub.start("orders.>", handle)
    watch = ConsumerWatch(nats_server.url, subscription.consumer)
    armed = True
    try:
        async with asyncio.timeout(30):
            await done.wait()
    finally:
        watch.stop()
        await sub.close()
    assert not held_up, f"the hold-up failed: {held_up[0]!r}"
    seen = (
        f"held up after {held_up_after}, backlog to {backlog_end}, threshold {threshold}; "
        f"acks seen at {acks_seen}, more delivered at {more_seen}"
    )
    # The hold-up, scheduled at message 100, runs once the worker lets the loop run: a
    # step that ran on through all that had come would leave no backlog behind it.
    assert backlog_end - held_up_after > 2 * threshold, seen
    second_cut = held_up_after + 2 * threshold
    assert more_seen is not None, f"no pull request went out during the step ({seen})"
    assert more_seen <= second_cut, f"the pull request went out late ({seen})"
    if not ordered:
        assert acks_seen is not None, f"no ack went out during the step ({seen})"
        assert acks_seen <= second_cut, seen
