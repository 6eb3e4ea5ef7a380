"""Channel transport behaviour beyond the conformance suite."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import pytest

from goflux import JsonCodec, Message, SubscribeError
from goflux.transports import channel
from tests.helpers import Inbox, settle_loop
from tests.models import Order, order


class Gate:
    """A handler that blocks until released, reporting each message it starts."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: asyncio.Queue[int] = asyncio.Queue()
        self.done: list[int] = []

    async def __call__(self, msg: Message[int]) -> None:
        self.started.put_nowait(msg.payload)
        await self.release.wait()
        self.done.append(msg.payload)


@dataclass
class Backlog:
    """A buffer=1 subscription whose handler is busy with 1, with 2 in the inbox and a
    publisher of 3 waiting for room."""

    bus: channel.Bus[int]
    gate: Gate
    subscription: channel.ChannelSubscription[int]
    publisher: channel.Publisher[int]
    waiting: asyncio.Task[None]


async def backlog() -> Backlog:
    bus: channel.Bus[int] = channel.Bus(buffer=1)
    gate = Gate()
    subscription = await channel.Subscriber(bus).start("n", gate)
    pub = channel.Publisher(bus)
    await pub.publish("n", 1)
    assert await gate.started.get() == 1
    await pub.publish("n", 2)
    waiting = asyncio.create_task(pub.publish("n", 3))
    await settle_loop()
    assert not waiting.done(), "publish must wait while the subscriber's inbox is full"
    return Backlog(bus, gate, subscription, pub, waiting)


async def test_a_full_inbox_makes_the_publisher_wait() -> None:
    b = await backlog()
    assert b.subscription.pending == 2  # one in the inbox, one held for the waiting publisher
    b.gate.release.set()
    await b.waiting
    await b.subscription.stop()
    assert b.gate.done == [1, 2, 3]


async def test_a_drain_handles_messages_whose_publishers_were_waiting() -> None:
    b = await backlog()
    stopping = asyncio.create_task(b.subscription.stop(timeout=10))
    await settle_loop()
    assert not b.waiting.done()
    await b.publisher.publish("n", 4)  # after stop(): not for this subscription any more
    b.gate.release.set()
    await stopping
    await b.waiting
    assert b.gate.done == [1, 2, 3]
    assert b.subscription.dropped == 0


async def test_a_drain_deadline_releases_waiting_publishers_and_counts_their_messages() -> None:
    b = await backlog()
    await b.subscription.stop(timeout=0.01)
    await b.waiting  # released, not left hanging
    assert b.subscription.dropped == 2
    assert b.gate.done == []


async def test_drain_timeout_cancels_the_handler_and_counts_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus: channel.Bus[int] = channel.Bus()
    gate = Gate()
    subscription = await channel.Subscriber(bus).start("n", gate)
    pub = channel.Publisher(bus)
    for n in range(3):
        await pub.publish("n", n)
    await gate.started.get()
    with caplog.at_level(logging.WARNING, logger="goflux.transports.channel"):
        await subscription.stop(timeout=0.01)
    assert not subscription.running
    assert subscription.dropped == 2
    assert subscription.failed == 1  # the handler the deadline cancelled
    assert gate.done == []
    assert "drain of 'n' timed out" in caplog.text
    assert "ended with 2 messages unhandled" in caplog.text


async def test_a_handler_can_stop_its_own_subscription() -> None:
    bus: channel.Bus[int] = channel.Bus()
    holder: list[channel.ChannelSubscription[int]] = []
    seen: list[int] = []

    async def handler(msg: Message[int]) -> None:
        seen.append(msg.payload)
        await holder[0].stop()  # must not wait for itself

    holder.append(await channel.Subscriber(bus).start("n", handler))
    pub = channel.Publisher(bus)
    await pub.publish("n", 1)
    await holder[0].wait()
    await pub.publish("n", 2)
    assert seen == [1]
    assert bus.subscription_count == 0


async def test_handler_errors_are_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    bus: channel.Bus[int] = channel.Bus()

    async def handler(msg: Message[int]) -> None:
        if msg.payload == 1:
            raise RuntimeError("boom")

    subscription = await channel.Subscriber(bus).start("n", handler)
    with caplog.at_level(logging.ERROR, logger="goflux.transports.channel"):
        for n in range(3):
            await channel.Publisher(bus).publish("n", n)
        await subscription.stop()
    assert (subscription.handled, subscription.failed) == (2, 1)
    assert "handler failed for message on 'n'" in caplog.text
    assert "RuntimeError: boom" in caplog.text


async def test_undecodable_messages_are_skipped_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class RawOut:
        def encode(self, value: bytes) -> bytes:
            return value

        def decode(self, data: bytes) -> Order:
            return JsonCodec(Order).decode(data)

    bus: channel.Bus[bytes] = channel.Bus(codec=RawOut())  # type: ignore[arg-type]
    inbox: Inbox[object] = Inbox()
    subscription = await channel.Subscriber(bus).start("o", inbox)
    pub = channel.Publisher(bus)
    with caplog.at_level(logging.ERROR, logger="goflux.transports.channel"):
        await pub.publish("o", b"{oops")
        await pub.publish("o", JsonCodec(Order).encode(order(5)))
        await inbox.wait_for(1)
        await subscription.stop()
    assert inbox.payloads == [order(5)]
    assert subscription.undecodable == 1
    assert "undecodable message on 'o'" in caplog.text


async def test_without_codec_the_object_itself_travels_and_headers_are_per_subscriber() -> None:
    bus: channel.Bus[dict[str, int]] = channel.Bus()
    value = {"a": 1}
    first: Inbox[dict[str, int]] = Inbox()
    second: Inbox[dict[str, int]] = Inbox()

    async def mutating(msg: Message[dict[str, int]]) -> None:
        msg.headers["X-Seen"] = "first"
        await first(msg)

    sub = channel.Subscriber(bus)
    await sub.start("x", mutating)
    await sub.start("x", second)
    await channel.Publisher(bus).publish("x", value, headers={"X-Seen": "no"})
    await first.wait_for(1)
    await second.wait_for(1)
    await sub.close()
    assert first.payloads[0] is value
    assert second.messages[0].headers["x-seen"] == "no"
    assert bus.subscription_count == 0


async def test_with_codec_each_subscriber_decodes_its_own_copy() -> None:
    bus = channel.Bus(codec=JsonCodec(Order))
    first: Inbox[Order] = Inbox()
    second: Inbox[Order] = Inbox()
    sub = channel.Subscriber(bus)
    await sub.start("o", first)
    await sub.start("o", second)
    await channel.Publisher(bus).publish("o", order())
    await first.wait_for(1)
    await second.wait_for(1)
    await sub.close()
    assert first.payloads[0] == second.payloads[0] == order()
    assert first.payloads[0] is not second.payloads[0]
    assert first.messages[0].data == JsonCodec(Order).encode(order())


async def test_queue_groups_are_per_name_across_patterns() -> None:
    bus: channel.Bus[int] = channel.Bus()
    a: Inbox[int] = Inbox()
    b: Inbox[int] = Inbox()
    plain: Inbox[int] = Inbox()
    await channel.Subscriber(bus, queue="q").start("jobs.*", a)
    await channel.Subscriber(bus, queue="q").start("jobs.>", b)
    await channel.Subscriber(bus).start("jobs.>", plain)
    pub = channel.Publisher(bus)
    for n in range(10):
        await pub.publish("jobs.x", n)
    await plain.wait_for(10)
    await settle_loop()
    assert sorted(a.payloads + b.payloads) == list(range(10))
    assert len(a.payloads) == len(b.payloads) == 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"buffer": 0}, "buffer must be >= 1"),
        ({"drain_timeout": -1}, "drain_timeout"),
        ({"queue": ""}, "queue group"),
        ({"queue": "a b"}, "queue group"),
    ],
)
def test_invalid_subscriber_options(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        channel.Subscriber(channel.Bus(), **kwargs)  # type: ignore[arg-type]


def test_invalid_bus_buffer() -> None:
    with pytest.raises(ValueError, match="buffer must be >= 1"):
        channel.Bus(buffer=0)


async def test_subscribe_returns_when_the_subscriber_closes() -> None:
    bus: channel.Bus[int] = channel.Bus()
    sub = channel.Subscriber(bus)
    inbox: Inbox[int] = Inbox()
    running = asyncio.create_task(sub.subscribe("n", inbox))
    await asyncio.sleep(0)  # one loop turn: subscribe() registers before its first await
    assert bus.subscription_count == 1
    await channel.Publisher(bus).publish("n", 1)
    await inbox.wait_for(1)
    await sub.close()
    async with asyncio.timeout(10):
        await running
    assert inbox.payloads == [1]


async def test_a_handler_cancelling_itself_is_a_failure_not_the_end() -> None:
    bus: channel.Bus[int] = channel.Bus()
    inbox: Inbox[int] = Inbox()

    async def handler(msg: Message[int]) -> None:
        if msg.payload == 1:
            future = asyncio.get_running_loop().create_future()
            future.cancel()
            await future  # raises CancelledError out of the handler
        await inbox(msg)

    subscription = await channel.Subscriber(bus).start("n", handler)
    pub = channel.Publisher(bus)
    await pub.publish("n", 1)
    await pub.publish("n", 2)
    await inbox.wait_for(1)
    assert subscription.running
    assert subscription.failed == 1
    await subscription.stop()
    assert inbox.payloads == [2]


async def test_a_killed_delivery_loop_leaves_the_bus_and_reports_it() -> None:
    b = await backlog()
    assert b.subscription._task is not None
    b.subscription._task.cancel()  # something outside kills the loop
    with pytest.raises(SubscribeError, match="cancelled"):
        await b.subscription.wait()
    await b.waiting  # released
    assert b.bus.subscription_count == 0
    assert b.subscription.dropped == 2
    async with asyncio.timeout(5):
        await b.publisher.publish("n", 4)  # nobody subscribed: returns at once


async def test_cancelling_the_caller_of_close_keeps_the_drain_deadline() -> None:
    bus: channel.Bus[int] = channel.Bus()
    gate = Gate()
    sub = channel.Subscriber(bus, drain_timeout=0.05)
    subscription = await sub.start("n", gate)
    await channel.Publisher(bus).publish("n", 1)
    await gate.started.get()
    closing = asyncio.create_task(sub.close())
    await settle_loop()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    await subscription.wait()  # the deadline still cancels the stuck handler
    assert not subscription.running
    await sub.close()  # idempotent


async def test_queue_group_members_on_different_patterns_all_get_work() -> None:
    bus: channel.Bus[str] = channel.Bus()
    inboxes = {name: Inbox[str]() for name in "ABC"}
    workers = channel.Subscriber(bus, queue="workers")
    await workers.start("orders.x", inboxes["A"])
    await workers.start("orders.x", inboxes["B"])
    await workers.start("orders.y", inboxes["C"])
    pub = channel.Publisher(bus)
    for n in range(100):
        await pub.publish("orders.x", f"x{n}")
        await pub.publish("orders.y", f"y{n}")
    await workers.close()
    counts = {name: len(inbox.messages) for name, inbox in inboxes.items()}
    assert counts == {"A": 50, "B": 50, "C": 100}


async def test_a_target_stopping_while_a_publish_waits_still_handles_the_message() -> None:
    bus: channel.Bus[int] = channel.Bus(buffer=1)
    slow = Gate()
    members: Inbox[int] = Inbox()
    await channel.Subscriber(bus).start("n", slow)
    group = channel.Subscriber(bus, queue="g")
    await group.start("n", members)
    await group.start("n", members)
    pub = channel.Publisher(bus)
    await pub.publish("n", 1)
    await slow.started.get()
    await pub.publish("n", 2)  # fills the slow subscriber's inbox
    third = asyncio.create_task(pub.publish("n", 3))  # waits on the slow subscriber
    await settle_loop()
    assert not third.done()
    await group.close()  # the member chosen for 3 stops while the publish still waits
    slow.release.set()
    await third
    assert sorted(members.payloads) == [1, 2, 3]


async def test_a_handler_swallowing_the_deadline_cancel_does_not_extend_the_drain() -> None:
    bus: channel.Bus[int] = channel.Bus()
    calls: list[int] = []

    async def stubborn(msg: Message[int]) -> None:
        calls.append(msg.payload)
        with contextlib.suppress(asyncio.CancelledError):  # swallows the cancel
            await asyncio.Event().wait()

    subscription = await channel.Subscriber(bus).start("n", stubborn)
    pub = channel.Publisher(bus)
    for n in range(5):
        await pub.publish("n", n)
    await subscription.stop(timeout=0.05)
    assert calls == [0]
    assert (subscription.failed, subscription.dropped) == (0, 4)
    assert not subscription.running


async def test_a_cancelled_publisher_does_not_withdraw_its_message() -> None:
    b = await backlog()
    b.waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await b.waiting
    b.gate.release.set()
    await b.subscription.stop()
    assert b.gate.done == [1, 2, 3]


async def test_a_late_queue_member_shares_the_work_at_once() -> None:
    bus: channel.Bus[int] = channel.Bus()
    old: Inbox[int] = Inbox()
    new: Inbox[int] = Inbox()
    workers = channel.Subscriber(bus, queue="w")
    await workers.start("n", old)
    pub = channel.Publisher(bus)
    for n in range(100):
        await pub.publish("n", n)
    await workers.start("n", new)
    for n in range(100):
        await pub.publish("n", n)
    await workers.close()
    assert (len(old.messages), len(new.messages)) == (150, 50)
