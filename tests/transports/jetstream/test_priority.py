"""JetStream priority groups (ADR-42) on a real server: pinned client, overflow, refusals."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import nats
import pytest
from nats.js import JetStreamContext

from goflux import JsonCodec, Message, SubscribeError
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports.jetstream._config import consumer_info_raw
from tests.conftest import STREAM
from tests.helpers import Inbox
from tests.models import Order, order

CODEC = JsonCodec(Order)
GROUP = "jobs"
# Long on purpose: a takeover that happens within WAIT was not the server's timeout.
PIN_TIMEOUT = 30.0
WAIT = 10.0


class Tally:
    """Handlers that count the messages each subscriber got, and a wait for a total."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._changed = asyncio.Event()

    def handler(self, who: str) -> Any:
        self.counts[who] = 0

        async def handle(msg: Message[Order]) -> None:
            self.counts[who] += 1
            self._changed.set()

        return handle

    async def wait_total(self, total: int) -> dict[str, int]:
        async with asyncio.timeout(WAIT):
            while sum(self.counts.values()) < total:
                self._changed.clear()
                await self._changed.wait()
        return dict(self.counts)


async def publish(js: JetStreamContext, numbers: Iterable[int]) -> None:
    await jetstream.Publisher(js, CODEC).publish_many(
        jetstream.Outgoing("orders.a", order(n)) for n in numbers
    )


async def pinned_consumer(js: JetStreamContext, name: str = "pinned") -> None:
    await jetstream.ensure_consumer(
        js,
        stream=STREAM,
        name=name,
        ack_policy="explicit",
        priority_groups=[GROUP],
        priority_policy="pinned_client",
        priority_timeout=PIN_TIMEOUT,
    )


def subscriber(js: JetStreamContext, consumer: str = "pinned", **options: Any) -> Any:
    options.setdefault("priority_group", GROUP)
    options.setdefault("max_in_flight", 2)  # several pull requests: later ones carry the pin
    return jetstream.Subscriber(js, CODEC, stream=STREAM, consumer=consumer, **options)


async def pinned_id(js: JetStreamContext, consumer: str) -> str | None:
    raw = await consumer_info_raw(js, STREAM, consumer)
    groups = {g["group"]: g.get("pinned_client_id") for g in raw.get("priority_groups", [])}
    return groups[GROUP]


async def num_pending_is(js: JetStreamContext, consumer: str, count: int) -> None:
    """Wait until the server counts ``count`` messages pending (nobody can take them)."""
    async with asyncio.timeout(WAIT):
        while (await js.consumer_info(STREAM, consumer)).num_pending != count:
            await js._nc.flush()


# ------------------------------------------------------------------ pinned_client


async def test_one_pinned_subscriber_gets_everything_and_a_standby_takes_over_when_it_stops(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    await pinned_consumer(js)
    other = await nats.connect(nats_server.url)
    try:
        tally = Tally()
        contexts = {"a": js, "b": other.jetstream()}
        subs = {
            who: await subscriber(ctx).start("orders.>", tally.handler(who))
            for who, ctx in contexts.items()
        }
        await publish(js, range(10))
        counts = await tally.wait_total(10)
        assert sorted(counts.values()) == [0, 10]
        first = max(counts, key=lambda who: counts[who])
        standby = "b" if first == "a" else "a"
        assert await pinned_id(js, "pinned") is not None

        await subs[first].stop()  # gives the pin up: the standby is pinned at once
        started = asyncio.get_running_loop().time()
        await publish(js, range(10, 16))
        assert await tally.wait_total(16) == {first: 10, standby: 6}
        assert asyncio.get_running_loop().time() - started < PIN_TIMEOUT
        await subs[standby].stop()
    finally:
        await other.close()


async def test_a_draining_pinned_subscriber_keeps_its_pin_until_it_has_worked_off_its_messages(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    await pinned_consumer(js)
    other = await nats.connect(nats_server.url)
    handled: list[tuple[str, str]] = []
    gate, holding = asyncio.Event(), asyncio.Event()

    async def gated(msg: Message[Order]) -> None:
        holding.set()
        await gate.wait()
        handled.append(("a", msg.payload.id))

    async def free(msg: Message[Order]) -> None:
        handled.append(("b", msg.payload.id))

    try:
        a = await subscriber(js, max_in_flight=10).start("orders.>", gated)
        await publish(js, range(20))
        await holding.wait()
        while a.outstanding < 10:  # one runs, nine wait behind it
            await js._nc.flush()
        pin = await pinned_id(js, "pinned")
        b = await subscriber(other.jetstream()).start("orders.>", free)
        stopping = asyncio.create_task(a.stop(timeout=WAIT))
        for _ in range(20):  # round trips while a works off what it holds
            assert await pinned_id(js, "pinned") == pin, "the pin went to the standby early"
        gate.set()
        await stopping
        async with asyncio.timeout(WAIT):
            while len(handled) < 20:
                await other.flush()
        await b.stop()
    finally:
        await other.close()
    # One at a time and in order: a's ten, then the standby's ten.
    assert handled == [("a", f"o-{n}") for n in range(10)] + [
        ("b", f"o-{n}") for n in range(10, 20)
    ]


async def test_a_subscriber_unpinned_by_the_server_stands_by_and_takes_over_later(
    js: JetStreamContext,
) -> None:
    await pinned_consumer(js)
    tally = Tally()
    a = await subscriber(js).start("orders.>", tally.handler("a"))
    await publish(js, range(2))
    assert await tally.wait_total(2) == {"a": 2}  # alone: a is pinned
    b = await subscriber(js).start("orders.>", tally.handler("b"))

    # Unpinned, a still pulls with its old pin id: the server answers 423 and pins b.
    await jetstream.unpin_consumer(js, STREAM, "pinned", GROUP)
    await publish(js, range(2, 5))
    assert await tally.wait_total(5) == {"a": 2, "b": 3}
    assert a.running  # a 423 is no failure: a waits as a standby

    await b.stop()
    await publish(js, range(5, 8))
    assert await tally.wait_total(8) == {"a": 5, "b": 3}
    await a.stop()


# ----------------------------------------------------------------------- overflow


async def test_an_overflow_subscriber_gets_messages_only_while_the_backlog_reaches_its_minimum(
    js: JetStreamContext,
) -> None:
    await jetstream.ensure_consumer(
        js,
        stream=STREAM,
        name="overflow",
        ack_policy="explicit",
        priority_groups=[GROUP],
        priority_policy="overflow",
    )
    held: Inbox[Order] = Inbox()
    gate = asyncio.Event()

    async def hold(msg: Message[Order]) -> None:  # a holds its first 2 until the gate opens
        await held(msg)
        await gate.wait()

    tally = Tally()
    a = await subscriber(js, "overflow", concurrency=2).start("orders.>", hold)
    b = await subscriber(js, "overflow", min_pending=3).start("orders.>", tally.handler("b"))

    await publish(js, range(2))
    await held.wait_for(2)
    await publish(js, range(2, 4))  # a is full; a backlog of 2 is below b's minimum
    await num_pending_is(js, "overflow", 2)
    assert tally.counts == {"b": 0}

    await publish(js, range(4, 7))  # each reaches a backlog of 3: b takes one
    assert await tally.wait_total(3) == {"b": 3}
    await num_pending_is(js, "overflow", 2)

    gate.set()  # a acks its 2 and has room again: it takes the backlog
    await held.wait_for(4)
    await num_pending_is(js, "overflow", 0)
    assert (len(held.messages), tally.counts) == (4, {"b": 3})
    await a.stop()
    await b.stop()


async def test_a_min_ack_pending_subscriber_gets_messages_only_while_enough_are_unacked(
    js: JetStreamContext,
) -> None:
    await jetstream.ensure_consumer(
        js,
        stream=STREAM,
        name="busy",
        ack_policy="explicit",
        priority_groups=[GROUP],
        priority_policy="overflow",
    )
    held: Inbox[Order] = Inbox()
    gate = asyncio.Event()

    async def hold(msg: Message[Order]) -> None:  # holds its messages until the gate opens
        await held(msg)
        await gate.wait()

    tally = Tally()
    a = await subscriber(js, "busy", concurrency=2).start("orders.>", hold)
    b = await subscriber(js, "busy", min_ack_pending=3).start("orders.>", tally.handler("b"))
    await publish(js, range(2))
    await held.wait_for(2)  # 2 unacked: below b's minimum of 3
    await publish(js, range(2, 4))
    await num_pending_is(js, "busy", 2)
    assert tally.counts == {"b": 0}

    c = await subscriber(js, "busy", max_in_flight=1).start("orders.>", hold)
    await held.wait_for(3)  # c takes one: 3 unacked, so b may take the last one
    assert await tally.wait_total(1) == {"b": 1}
    await num_pending_is(js, "busy", 0)
    gate.set()
    for subscription in (a, b, c):
        await subscription.stop()
    assert len(held.messages) == 3


async def test_prioritized_pulls_are_served_in_priority_order(js: JetStreamContext) -> None:
    await jetstream.ensure_consumer(
        js,
        stream=STREAM,
        name="ranked",
        ack_policy="explicit",
        priority_groups=[GROUP],
        priority_policy="prioritized",
    )
    tally = Tally()
    first = subscriber(js, "ranked", priority=0, max_in_flight=100)
    second = subscriber(js, "ranked", priority=1, max_in_flight=100)
    a = await first.start("orders.>", tally.handler("a"))
    b = await second.start("orders.>", tally.handler("b"))
    await publish(js, range(10))
    assert await tally.wait_total(10) == {"a": 10, "b": 0}
    await a.stop()
    await publish(js, range(10, 15))
    assert await tally.wait_total(15) == {"a": 10, "b": 5}
    await b.stop()


# ----------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"priority_groups": [GROUP], "priority_policy": "fifo"}, "priority_policy must be"),
        ({"priority_groups": [GROUP]}, "priority_policy must be"),
        ({"priority_policy": "overflow"}, "non-empty list"),
        ({"priority_groups": [], "priority_policy": "overflow"}, "non-empty list"),
        ({"priority_groups": ["a.b"], "priority_policy": "overflow"}, "invalid priority group"),
        ({"priority_groups": ["x" * 17], "priority_policy": "overflow"}, "1 to 16"),
        ({"priority_groups": ["a", "a"], "priority_policy": "overflow"}, "repeated"),
        (
            {"priority_groups": [GROUP], "priority_policy": "overflow", "priority_timeout": 1},
            "pinned_client",
        ),
        (
            {"priority_groups": [GROUP], "priority_policy": "pinned_client", "priority_timeout": 0},
            "> 0",
        ),
    ],
)
async def test_invalid_priority_settings_are_refused_before_the_server_is_asked(
    js: JetStreamContext, settings: dict[str, Any], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        await jetstream.ensure_consumer(js, stream=STREAM, name="bad", **settings)
    assert await js.consumers_info(STREAM) == []


async def test_priority_settings_are_idempotent_and_drift_is_applied(js: JetStreamContext) -> None:
    await pinned_consumer(js)
    created = (await consumer_info_raw(js, STREAM, "pinned"))["created"]
    await pinned_consumer(js)  # the same settings: nothing is sent
    config = (await consumer_info_raw(js, STREAM, "pinned"))["config"]
    assert (config["priority_groups"], config["priority_policy"]) == ([GROUP], "pinned_client")
    assert config["priority_timeout"] == int(PIN_TIMEOUT * 1e9)
    await jetstream.ensure_consumer(
        js,
        stream=STREAM,
        name="pinned",
        ack_policy="explicit",
        priority_groups=[GROUP, "urgent"],
        priority_policy="pinned_client",
        priority_timeout=5.0,
    )
    raw = await consumer_info_raw(js, STREAM, "pinned")
    assert raw["created"] == created  # updated in place
    assert sorted(raw["config"]["priority_groups"]) == sorted([GROUP, "urgent"])
    assert raw["config"]["priority_timeout"] == 5_000_000_000


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"priority_group": GROUP}, "needs a bound durable consumer"),
        ({"priority_group": GROUP, "ordered": True}, "needs a bound durable consumer"),
        ({"min_pending": 3}, "need a priority_group"),
    ],
)
def test_priority_options_need_a_bound_consumer_and_a_group(
    js: JetStreamContext, options: dict[str, Any], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        jetstream.Subscriber(js, CODEC, stream=STREAM, **options)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"priority_group": "a.b"}, "invalid priority group"),
        ({"priority_group": GROUP, "min_pending": 0}, "min_pending must be >= 1"),
        ({"priority_group": GROUP, "min_ack_pending": 0}, "min_ack_pending must be >= 1"),
        ({"priority_group": GROUP, "priority": 10}, "between 0 and 9"),
    ],
)
def test_priority_options_are_checked(
    js: JetStreamContext, options: dict[str, Any], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="pinned", **options)


async def test_a_group_the_consumer_lacks_fails_the_start(js: JetStreamContext) -> None:
    await pinned_consumer(js)
    sub = subscriber(js, priority_group="other")
    with pytest.raises(SubscribeError, match=r"consumer 'pinned' has no priority group 'other'"):
        await sub.start("orders.>", Inbox[Order]())
    await jetstream.ensure_consumer(js, stream=STREAM, name="plain", ack_policy="explicit")
    with pytest.raises(SubscribeError, match="it has no priority groups"):
        await subscriber(js, "plain").start("orders.>", Inbox[Order]())


async def test_thresholds_need_the_overflow_policy(js: JetStreamContext) -> None:
    await pinned_consumer(js)
    with pytest.raises(SubscribeError, match="need 'overflow'"):
        await subscriber(js, min_pending=2).start("orders.>", Inbox[Order]())


async def test_a_consumer_with_groups_refuses_a_subscriber_without_one_at_start(
    js: JetStreamContext,
) -> None:
    await pinned_consumer(js)
    plain = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="pinned")
    with pytest.raises(SubscribeError, match=r"has priority groups \['jobs'\].*priority_group="):
        await plain.start("orders.>", Inbox[Order]())


@pytest.mark.slow  # a pull's expiry
async def test_groups_added_under_a_running_subscriber_fail_it_instead_of_stalling(
    js: JetStreamContext,
) -> None:
    await jetstream.ensure_consumer(js, stream=STREAM, name="late", ack_policy="explicit")
    plain = jetstream.Subscriber(
        js, CODEC, stream=STREAM, consumer="late", expires=1.0, idle_heartbeat=0.5
    )
    subscription = await plain.start("orders.>", Inbox[Order]())
    await jetstream.ensure_consumer(
        js,
        stream=STREAM,
        name="late",
        ack_policy="explicit",
        priority_groups=[GROUP],
        priority_policy="overflow",
    )
    # The next pull request (its predecessor expires within a second) is refused: 400.
    with pytest.raises(SubscribeError, match="Priority Group missing"):
        async with asyncio.timeout(WAIT):
            await subscription.wait()


async def test_unpin_consumer_reports_what_the_server_refuses(js: JetStreamContext) -> None:
    await pinned_consumer(js)
    await jetstream.unpin_consumer(js, STREAM, "pinned", GROUP)  # nobody pinned: fine
    with pytest.raises(jetstream.ConsumerNotFound):
        await jetstream.unpin_consumer(js, STREAM, "missing", GROUP)
    with pytest.raises(jetstream.ProvisioningError, match="does not exist"):
        await jetstream.unpin_consumer(js, STREAM, "pinned", "other")
    with pytest.raises(ValueError, match="invalid priority group"):
        await jetstream.unpin_consumer(js, STREAM, "pinned", "a.b")
