"""Group.readiness(): what health probes read, through a group's life and a server outage."""

from __future__ import annotations

import asyncio

import nats
import pytest

from goflux import Group, Message, Readiness, StrCodec
from goflux.testing import NatsServer
from goflux.transports import channel, jetstream
from tests.conftest import STREAM
from tests.helpers import Inbox


def by_name(readiness: Readiness) -> dict[str, tuple[bool, str]]:
    return {check.name: (check.ok, check.detail) for check in readiness.checks}


async def test_readiness_follows_the_state_of_the_group() -> None:
    bus: channel.Bus[str] = channel.Bus(codec=StrCodec())
    gate, entered = asyncio.Event(), asyncio.Event()

    async def slow_start(subject: str, handler: object) -> object:
        entered.set()
        await gate.wait()
        return await channel.Subscriber(bus).start(subject, handler)  # type: ignore[arg-type]

    subscriber = channel.Subscriber(bus)
    subscriber.start = slow_start  # type: ignore[method-assign]  # a start that waits
    group = Group()
    group.subscribe(subscriber, "orders", Inbox[str]())
    group.task(asyncio.Event().wait, name="ticker")

    new = group.readiness()
    assert (new.state, new.ready) == ("new", False)
    assert by_name(new)["subscription to 'orders'"] == (False, "not started")

    starting = asyncio.create_task(group.start())
    await entered.wait()
    assert group.readiness().state == "starting"
    assert group.readiness().ready is False
    gate.set()
    await starting
    running = group.readiness()
    assert (running.state, running.ready) == ("running", True)
    assert by_name(running) == {
        "subscription to 'orders'": (True, "running"),
        "ticker": (True, "running"),
    }
    assert running.as_dict()["ready"] is True

    stopping = asyncio.create_task(group.stop())
    await asyncio.sleep(0)
    assert group.readiness().state == "stopping"
    assert group.readiness().ready is False
    await stopping
    assert group.readiness().state == "stopped"
    assert group.readiness().ready is False


async def test_a_failed_member_makes_the_group_unready_with_the_reason() -> None:
    async def broken() -> None:
        raise RuntimeError("the tax table is corrupt")

    group = Group()
    group.task(broken, name="tax update")
    await group.start()
    with pytest.raises(RuntimeError):
        await group.wait()
    readiness = group.readiness()
    assert readiness.state == "failed"
    assert readiness.ready is False
    assert readiness.failure == "RuntimeError: the tax table is corrupt"
    assert readiness.as_dict()["failure"] == "RuntimeError: the tax table is corrupt"


async def test_an_owned_connection_and_a_subscription_report_a_server_outage(
    nats_server: NatsServer,
) -> None:
    disconnected, reconnected = asyncio.Event(), asyncio.Event()

    async def on_disconnect() -> None:
        disconnected.set()

    async def on_reconnect() -> None:
        reconnected.set()

    group = Group(drain_timeout=2)
    nc = group.own(
        await nats.connect(
            nats_server.url,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.05,
            disconnected_cb=on_disconnect,
            reconnected_cb=on_reconnect,
        )
    )
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name=STREAM, subjects=["orders.>"])
    subscriber = group.own(jetstream.Subscriber(js, StrCodec(), stream=STREAM))

    async def handle(msg: Message[str]) -> None:
        return None

    group.subscribe(subscriber, "orders.>", handle)
    async with group:
        connection = f"connection to nats://127.0.0.1:{nats_server.port}"
        assert by_name(group.readiness())[connection] == (True, "connected")
        assert group.readiness().ready is True

        nats_server.kill()
        await disconnected.wait()
        down = by_name(group.readiness())
        assert down[connection] == (False, "reconnecting")
        assert down["subscription to 'orders.>'"] == (False, "disconnected (reconnecting)")
        assert group.readiness().ready is False

        await nats_server.restart()
        await reconnected.wait()
        assert group.readiness().ready is True
    assert nc.is_closed  # owned: closed after the drain
    assert by_name(group.readiness())[connection] == (False, "closed")


async def test_own_returns_the_resource_and_refuses_what_cannot_close() -> None:
    group = Group()
    publisher = channel.Publisher(channel.Bus[str]())
    assert group.own(publisher) is publisher
    with pytest.raises(TypeError, match="async close"):
        group.own(42)  # type: ignore[type-var]
