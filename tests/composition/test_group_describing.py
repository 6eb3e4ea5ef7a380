"""What a Group knows of its service without starting it: endpoints, on_start, describe."""

from __future__ import annotations

import asyncio

import pytest

from goflux import Endpoint, Group, InvalidHeader, StrCodec, bind_publisher, bind_topic
from goflux.transports import channel
from tests.helpers import Inbox


def bus() -> channel.Bus[str]:
    return channel.Bus(codec=StrCodec())


async def handle(message: object) -> None:
    """Handle it.

    Details that stay out.
    """


def test_endpoints_list_receives_then_sends_in_order() -> None:
    orders = bus()
    subscriber = channel.Subscriber(orders)
    publisher = channel.Publisher(orders)
    group = Group()
    group.subscribe(subscriber, "orders.*", handle, headers={"Tenant": "whose"})
    group.process(subscriber.stream("audit.>"), handle, description="Keep an audit trail.")
    group.task(asyncio.Event().wait)  # tasks speak no subject
    bound = group.own(bind_publisher(publisher, "orders.placed"))
    topic = group.own(bind_topic(publisher, subscriber, "orders.topic"))
    group.sends(publisher, "orders.x", "orders.*", headers=["Reason"])
    group.sends(bound)  # declared again: listed once, as declared
    assert [(e.action, e.subject, e.member) for e in group.endpoints] == [
        ("receive", "orders.*", "subscription to 'orders.*'"),
        ("receive", "audit.>", "process of 'audit.>'"),
        ("send", "orders.x", "publisher to 'orders.x'"),
        ("send", "orders.*", "publisher to 'orders.*'"),
        ("send", "orders.placed", "publisher to 'orders.placed'"),
        ("send", "orders.topic", "publisher to 'orders.topic'"),
    ]
    first, second, declared, *_ = group.endpoints
    assert first == Endpoint(
        "receive",
        "orders.*",
        subscriber,
        "subscription to 'orders.*'",
        headers={"Tenant": "whose"},
        description="Handle it.",
    )
    assert second.description == "Keep an audit trail."
    assert declared.headers == {"Reason": ""}
    assert group.endpoints[-1].via is topic
    assert group.owned == (bound, topic)


def test_declarations_are_checked() -> None:
    group = Group()
    publisher = channel.Publisher(bus())
    with pytest.raises(InvalidHeader):
        group.sends(publisher, "a.b", headers={"bad header": ""})
    with pytest.raises(InvalidHeader):
        group.subscribe(channel.Subscriber(bus()), "a.b", handle, headers=["x:y"])
    with pytest.raises(ValueError, match="needs the subjects"):
        group.sends(publisher)


async def test_on_start_runs_before_members_in_order() -> None:
    orders = bus()
    seen: list[str] = []
    inbox = Inbox[str]()
    group = Group()

    async def first() -> None:
        seen.append("first")

    async def second() -> None:
        # members start only after every start-up function: nothing subscribed yet
        seen.append(f"second, {len(group.readiness().checks)} checks, {group.state}")

    group.on_start(first)
    group.on_start(second)
    group.subscribe(channel.Subscriber(orders), "orders", inbox)
    async with group:
        await channel.Publisher(orders).publish("orders", "o-1")
        assert [m.payload for m in await inbox.wait_for(1)] == ["o-1"]
    assert seen == ["first", "second, 1 checks, starting"]
    with pytest.raises(RuntimeError, match="before it starts"):
        group.on_start(first)


async def test_a_failing_on_start_starts_no_member() -> None:
    orders = bus()
    subscriber = channel.Subscriber(orders)
    started: list[str] = []
    real_start = subscriber.start

    async def recorded_start(subject: str, handler: object) -> object:
        started.append(subject)
        return await real_start(subject, handler)  # type: ignore[arg-type]

    subscriber.start = recorded_start  # type: ignore[method-assign]
    group = Group()

    async def provision() -> None:
        raise ConnectionError("stream ORDERS cannot be created")

    group.on_start(provision)
    group.subscribe(subscriber, "orders", Inbox[str]())
    with pytest.raises(ConnectionError, match="ORDERS"):
        await group.start()
    assert group.state == "failed"
    assert started == []
    assert orders.subscription_count == 0


def test_describe_keeps_what_was_set() -> None:
    group = Group()
    group.describe(title="payments")
    group.describe(version="1.0.0")
    assert (group.about.title, group.about.version, group.about.description) == (
        "payments",
        "1.0.0",
        None,
    )


async def test_a_stop_cancels_the_start_up_functions_and_starts_no_member() -> None:
    orders = bus()
    entered = asyncio.Event()
    ran: list[str] = []
    group = Group()

    async def stuck() -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ran.append("stuck cancelled")
            raise

    async def later() -> None:
        ran.append("later")

    group.on_start(stuck)
    group.on_start(later)
    group.subscribe(channel.Subscriber(orders), "orders", Inbox[str]())
    starting = asyncio.create_task(group.start())
    await entered.wait()
    assert group.state == "starting"
    await group.stop()
    await starting  # returns: stopped while starting up is no failure
    assert ran == ["stuck cancelled"]
    assert group.state == "stopped"
    assert orders.subscription_count == 0


async def test_cancelling_start_cancels_the_start_up_functions() -> None:
    entered = asyncio.Event()
    group = Group()

    async def stuck() -> None:
        entered.set()
        await asyncio.Event().wait()

    group.on_start(stuck)
    starting = asyncio.create_task(group.start())
    await entered.wait()
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
