"""Confirmed acks: the server's reply, retries, giving up, and the in-flight bound."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator

import nats
import nats.errors
import pytest
from nats.js import JetStreamContext
from opentelemetry.sdk.metrics.export import Sum

from goflux import AckNotConfirmed, Message, StrCodec
from goflux.testing import NatsServer
from goflux.transports import jetstream
from tests.conftest import STREAM, Otel
from tests.helpers import settle_loop

SETTLEMENTS = "goflux.consumer.settlements"


async def publish(js: JetStreamContext, count: int) -> None:
    pub = jetstream.Publisher(js, StrCodec())
    await pub.publish_many(jetstream.Outgoing("orders.new", f"o{i}") for i in range(count))


def ack_outcomes(otel: Otel) -> dict[tuple[str, bool], int]:
    """Go goflux's goflux.processor.ack.outcome by action and error."""
    data = otel.metrics()["goflux.processor.ack.outcome"].data
    assert isinstance(data, Sum)
    found: dict[tuple[str, bool], int] = {}
    for p in data.data_points:
        attributes = p.attributes or {}
        key = (str(attributes["goflux.ack.action"]), bool(attributes["goflux.ack.error"]))
        found[key] = int(p.value)
    return found


def outcomes(otel: Otel) -> dict[str, int]:
    data = otel.metrics()[SETTLEMENTS].data
    assert isinstance(data, Sum)
    return {
        str(p.attributes["goflux.settlement.outcome"]): int(p.value)  # type: ignore[index]
        for p in data.data_points
    }


class GivenUp(logging.Handler):
    """Sets ``done`` once ``count`` auto-acks were reported unconfirmed (a real signal)."""

    def __init__(self, count: int) -> None:
        super().__init__(logging.ERROR)
        self.count = count
        self.messages: list[str] = []
        self.done = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "not confirmed" in record.getMessage():
            self.messages.append(record.getMessage())
            if len(self.messages) >= self.count:
                self.done.set()


@pytest.fixture
async def doomed_js(nats_server: NatsServer) -> AsyncIterator[JetStreamContext]:
    """A JetStream context whose server the test kills (closing it may fail then)."""
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name=STREAM, subjects=["orders.>"])
    yield js
    with contextlib.suppress(Exception):
        await nc.close()


@pytest.fixture
def given_up() -> Iterator[GivenUp]:
    handler = GivenUp(4)
    logger = logging.getLogger("goflux.transports.jetstream")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


async def test_confirmed_auto_acks_are_all_applied_when_the_drain_returns(
    js: JetStreamContext, otel: Otel
) -> None:
    await jetstream.ensure_consumer(js, stream=STREAM, name="double", filter_subject="orders.>")
    await publish(js, 300)
    handled = asyncio.Event()
    count = 0

    async def handle(msg: Message[str]) -> None:
        nonlocal count
        count += 1
        if count == 300:
            handled.set()

    sub = jetstream.Subscriber(
        js,
        StrCodec(),
        stream=STREAM,
        consumer="double",
        confirm_acks=True,
        max_in_flight=64,
        telemetry=otel.telemetry,
    )
    subscription = await sub.start("orders.>", handle)
    async with asyncio.timeout(20):
        await handled.wait()
        await subscription.stop()  # waits for the confirmations still in flight
    # No polling: every ack was confirmed, so the server has applied every one.
    info = await js.consumer_info(STREAM, "double")
    assert (info.num_ack_pending, info.num_pending) == (0, 0)
    assert info.ack_floor.stream_seq == 300
    assert subscription.unconfirmed == 0
    assert outcomes(otel) == {"ack": 300}


@pytest.mark.parametrize("how", ["ack(confirm=True)", "confirm_acks"])
async def test_a_confirmed_manual_ack_returns_once_the_server_applied_it(
    js: JetStreamContext, how: str
) -> None:
    await jetstream.ensure_consumer(js, stream=STREAM, name="manual", filter_subject="orders.>")
    await publish(js, 1)
    seen: list[tuple[int, int]] = []
    done = asyncio.Event()

    async def handle(msg: Message[str]) -> None:
        await (msg.ack() if how == "confirm_acks" else msg.ack(confirm=True))
        info = await js.consumer_info(STREAM, "manual")  # asked after the reply came
        seen.append((info.num_ack_pending, info.ack_floor.stream_seq))
        done.set()

    sub = jetstream.Subscriber(
        js,
        StrCodec(),
        stream=STREAM,
        consumer="manual",
        manual_ack=True,
        confirm_acks=how == "confirm_acks",
    )
    async with await sub.start("orders.>", handle):
        async with asyncio.timeout(10):
            await done.wait()
    assert seen == [(0, 1)]


@pytest.mark.slow  # confirmation timeouts
@pytest.mark.parametrize("how", ["ack(confirm=True)", "confirm_acks"])
async def test_a_confirmed_ack_the_server_never_answers_raises_naming_the_message(
    nats_server: NatsServer, doomed_js: JetStreamContext, otel: Otel, how: str
) -> None:
    js = doomed_js
    await jetstream.ensure_consumer(js, stream=STREAM, name="lost", filter_subject="orders.>")
    await publish(js, 1)
    raised: list[BaseException] = []
    started = asyncio.Event()
    done = asyncio.Event()

    async def handle(msg: Message[str]) -> None:
        await started.wait()  # not while start() still waits for the server
        nats_server.kill()  # from now on nothing answers; the client buffers the acks
        try:
            await (msg.ack() if how == "confirm_acks" else msg.ack(confirm=True))
        except AckNotConfirmed as exc:
            raised.append(exc)
            assert msg.settled is None  # unsettled again: the caller may ack again
        finally:
            done.set()

    sub = jetstream.Subscriber(
        js,
        StrCodec(),
        stream=STREAM,
        consumer="lost",
        manual_ack=True,
        confirm_acks=how == "confirm_acks",
        confirm_timeout=0.2,
        drain_timeout=0.5,
        telemetry=otel.telemetry,
    )
    subscription = await sub.start("orders.>", handle)
    loop = asyncio.get_running_loop()
    began = loop.time()
    started.set()
    async with asyncio.timeout(10):
        await done.wait()
    took = loop.time() - began
    [error] = raised
    assert isinstance(error, AckNotConfirmed)
    assert (error.stream, error.consumer, error.sequence) == (STREAM, "lost", 1)
    assert "after 3 attempt(s)" in str(error)
    assert isinstance(error.__cause__, TimeoutError)
    assert took >= 3 * 0.2  # three sends, each given its timeout
    assert subscription.unconfirmed == 1
    assert outcomes(otel) == {"ack_unconfirmed": 1}
    assert ack_outcomes(otel) == {("ack", True): 1}  # an ack whose operation failed
    assert subscription.outstanding == 0  # the room was given back
    await subscription.stop()


async def test_a_confirmed_ack_after_the_consumer_is_gone_fails_at_once(
    js: JetStreamContext,
) -> None:
    await jetstream.ensure_consumer(js, stream=STREAM, name="gone", filter_subject="orders.>")
    await publish(js, 1)
    held: list[Message[str]] = []
    got = asyncio.Event()

    async def keep(msg: Message[str]) -> None:
        held.append(msg)  # settled later, outside the handler
        got.set()

    sub = jetstream.Subscriber(
        js, StrCodec(), stream=STREAM, consumer="gone", manual_ack=True, confirm_timeout=5
    )
    subscription = await sub.start("orders.>", keep)
    async with asyncio.timeout(10):
        await got.wait()
        await js.delete_consumer(STREAM, "gone")
        with pytest.raises(Exception, match="failed"):
            await subscription.wait()  # the subscription ended with its consumer
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(AckNotConfirmed, match="the consumer is gone") as info:
            await held[0].ack(confirm=True)
    assert loop.time() - started < 5  # the server's no-responders reply, not a timeout
    assert isinstance(info.value.__cause__, nats.errors.NoRespondersError)
    assert "after 1 attempt(s)" in str(info.value)


@pytest.mark.slow  # confirmation timeouts
async def test_confirmations_do_not_hold_up_the_worker_but_hold_the_in_flight_room(
    nats_server: NatsServer, doomed_js: JetStreamContext, otel: Otel, given_up: GivenUp
) -> None:
    js = doomed_js
    await jetstream.ensure_consumer(js, stream=STREAM, name="room", filter_subject="orders.>")
    await publish(js, 4)
    holder: list[jetstream.JetStreamSubscription[str]] = []
    handled: list[str] = []
    all_handled = asyncio.Event()

    async def handle(msg: Message[str]) -> None:
        if not handled:  # the first: wait until all four are here, then lose the server
            # No event marks a delivery: yield until the engine has counted all four.
            while not holder or holder[0].outstanding < 4:  # noqa: ASYNC110
                await asyncio.sleep(0)
            nats_server.kill()
        handled.append(msg.payload)
        if len(handled) == 4:
            all_handled.set()

    sub = jetstream.Subscriber(
        js,
        StrCodec(),
        stream=STREAM,
        consumer="room",
        concurrency=1,  # one worker: if it waited for each confirmation, it would stall
        max_in_flight=4,
        confirm_acks=True,
        confirm_timeout=0.5,
        drain_timeout=0.5,
        telemetry=otel.telemetry,
    )
    holder.append(await sub.start("orders.>", handle))
    subscription = holder[0]
    async with asyncio.timeout(10):
        await all_handled.wait()  # the worker went on while no ack was confirmed
        await settle_loop()  # the last auto-ack is sent
        assert subscription.handled == 4
        assert subscription.outstanding == 4  # no room back before the confirmation
        assert subscription.unconfirmed == 0
        await given_up.done.wait()
    assert handled == ["o0", "o1", "o2", "o3"]
    assert subscription.unconfirmed == 4
    assert subscription.outstanding == 0  # given up: the room is back
    assert outcomes(otel) == {"ack_unconfirmed": 4}
    await subscription.stop()
    assert sorted(given_up.messages) == sorted(
        f"ack of message {seq} on stream 'ORDERS' (consumer 'room') not confirmed after 3 "
        "attempt(s) (TimeoutError: no reply within 0.5s); if it was not applied, the "
        "server redelivers the message after ack_wait"
        for seq in range(1, 5)
    )


def test_confirm_options_are_checked(js: JetStreamContext) -> None:
    with pytest.raises(ValueError, match="confirm_timeout"):
        jetstream.Subscriber(js, StrCodec(), stream=STREAM, confirm_timeout=0)
    with pytest.raises(ValueError, match="confirm_acks"):
        jetstream.Subscriber(js, StrCodec(), stream=STREAM, ordered=True, confirm_acks=True)
