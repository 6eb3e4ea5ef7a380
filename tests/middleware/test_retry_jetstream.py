"""retry_ack and dead letters against a real nats-server (JetStream)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from nats.js import JetStreamContext
from opentelemetry.sdk.metrics.export import Sum
from opentelemetry.trace import StatusCode

from goflux import BytesCodec, JsonCodec, Message, NonRetryable, chain
from goflux.middleware import (
    DeadLetter,
    ExponentialBackoff,
    RetryPolicy,
    auto_ack,
    retry_ack,
    timeout,
)
from goflux.transports import jetstream
from tests.conftest import STREAM, Otel
from tests.helpers import Inbox, drained
from tests.models import Order, order

CODEC = JsonCodec(Order)
DLQ = "DLQ"


class Deliveries:
    """Records when each delivery reached the handler (the handler's own clock)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.counts: list[int] = []
        self.changed = asyncio.Event()

    def record(self, msg: Message[Order]) -> None:
        assert msg.delivery is not None
        self.times.append(asyncio.get_running_loop().time())
        self.counts.append(msg.delivery.num_delivered)
        self.changed.set()

    async def wait_for(self, count: int, timeout: float = 20.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.times) < count:
                self.changed.clear()
                await self.changed.wait()

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.times, self.times[1:], strict=False)]


@pytest.fixture
async def dlq(js: JetStreamContext) -> AsyncIterator[Inbox[bytes]]:
    """A dead-letter stream and a subscriber that collects what reaches it."""
    await jetstream.ensure_stream(js, name=DLQ, subjects=["dlq.>"])
    inbox: Inbox[bytes] = Inbox()
    sub = jetstream.Subscriber(js, BytesCodec(), stream=DLQ)
    await sub.start("dlq.>", inbox)
    yield inbox
    await sub.close()


async def stream_state(js: JetStreamContext, consumer: str) -> tuple[int, int]:
    """(num_ack_pending, num_pending) of a consumer, as the server sees them."""
    info = await js.consumer_info(STREAM, consumer)
    return info.num_ack_pending or 0, info.num_pending or 0


async def until_settled(js: JetStreamContext, consumer: str) -> None:
    """Wait until the server holds nothing for ``consumer``: it will deliver nothing more."""
    async with asyncio.timeout(10):
        await drained(js, STREAM, consumer)


@pytest.mark.slow
async def test_fails_twice_then_succeeds_with_gaps_matching_the_backoff(
    js: JetStreamContext, otel: Otel
) -> None:
    deliveries = Deliveries()
    succeeded = asyncio.Event()

    async def flaky(msg: Message[Order]) -> None:
        deliveries.record(msg)
        if len(deliveries.times) < 3:
            raise ConnectionError("downstream unavailable")
        succeeded.set()

    backoff = ExponentialBackoff(initial=0.4, multiplier=2.0, max=10.0, jitter=0.0)
    policy = RetryPolicy(backoff=backoff, max_attempts=5)
    await jetstream.ensure_consumer(js, stream=STREAM, name="flaky", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="flaky", telemetry=otel.telemetry)
    await sub.start("orders.>", retry_ack(policy)(flaky))
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(1))
    await deliveries.wait_for(3)
    await succeeded.wait()
    await until_settled(js, "flaky")
    await sub.close()

    assert deliveries.counts == [1, 2, 3]
    expected = [backoff.delay(1), backoff.delay(2)]  # 0.4 s, then 0.8 s
    for gap, delay in zip(deliveries.gaps, expected, strict=True):
        assert delay - 0.05 <= gap <= delay + 0.5, (deliveries.gaps, expected)

    spans = [s for s in otel.spans() if s.name == "process orders.>"]
    assert len(spans) == 3
    spans.sort(key=lambda s: s.start_time or 0)
    assert [s.attributes.get("error.type") for s in spans] == [  # type: ignore[union-attr]
        "ConnectionError",
        "ConnectionError",
        None,  # the final, successful outcome records no error
    ]
    assert spans[-1].status.status_code is not StatusCode.ERROR
    settlements = otel.metrics()["goflux.consumer.settlements"].data
    assert isinstance(settlements, Sum)
    by_outcome = {
        p.attributes["goflux.settlement.outcome"]: p.value  # type: ignore[index]
        for p in settlements.data_points
    }
    assert by_outcome == {"nak": 2, "ack": 1}


async def test_non_retryable_is_dead_lettered_once_and_terminated(
    js: JetStreamContext, dlq: Inbox[bytes], otel: Otel
) -> None:
    calls = 0

    async def reject(msg: Message[Order]) -> None:
        nonlocal calls
        calls += 1
        try:
            raise ValueError("order o-7 has no lines\r\nsecond line")
        except ValueError as exc:
            raise NonRetryable("order rejected") from exc

    dead_letter = DeadLetter(
        jetstream.Publisher(js, BytesCodec()), "dlq.orders", telemetry=otel.telemetry
    )
    policy = RetryPolicy(backoff=[0.1], max_attempts=5, dead_letter=dead_letter)
    await jetstream.ensure_consumer(js, stream=STREAM, name="strict", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="strict")
    await sub.start("orders.>", retry_ack(policy)(reject))
    before = datetime.now(UTC)
    receipt = await jetstream.Publisher(js, CODEC).publish(
        "orders.created", order(7), headers={"Tenant": "acme"}, message_id="order-7"
    )
    [letter] = await dlq.wait_for(1)
    await until_settled(js, "strict")  # terminated: the server holds nothing more for it
    await sub.close()

    assert calls == 1
    raw = await js.get_msg(STREAM, receipt.sequence)
    assert letter.payload == raw.data  # the original bytes, unchanged
    headers = letter.headers
    assert headers["Tenant"] == "acme"
    assert headers["Dead-Letter-Reason"] == "non_retryable"
    assert headers["Dead-Letter-Error-Type"] == "goflux.NonRetryable"
    assert headers["Dead-Letter-Error"] == "order rejected"
    assert headers["Dead-Letter-Subject"] == "orders.created"
    assert headers["Dead-Letter-Message-Id"] == "order-7"
    assert headers["Dead-Letter-Stream"] == STREAM
    assert headers["Dead-Letter-Sequence"] == str(receipt.sequence)
    assert headers["Dead-Letter-Consumer"] == "strict"
    assert headers["Dead-Letter-Delivery-Count"] == "1"
    stored = datetime.fromisoformat(headers["Dead-Letter-Timestamp"])
    failed = datetime.fromisoformat(headers["Dead-Letter-Failed-At"])
    assert before - (failed - before) <= stored <= failed  # stored by the server, then failed
    assert letter.id == f"dead-letter:{STREAM}:strict:{receipt.sequence}"
    dead_letters = otel.metrics()["goflux.consumer.dead_letters"].data
    assert isinstance(dead_letters, Sum)
    [point] = dead_letters.data_points
    assert point.value == 1
    assert point.attributes == {
        "goflux.dead_letter.reason": "non_retryable",
        "messaging.destination.name": "dlq.orders",
    }
    info = await js.consumer_info(STREAM, "strict")
    assert info.num_redelivered == 0


async def test_max_attempts_exhausted_dead_letters_and_terminates(
    js: JetStreamContext, dlq: Inbox[bytes]
) -> None:
    deliveries = Deliveries()

    async def always_failing(msg: Message[Order]) -> None:
        deliveries.record(msg)
        raise TimeoutError("payment service timed out")

    dead_letter = DeadLetter(jetstream.Publisher(js, BytesCodec()), "dlq.orders")
    policy = RetryPolicy(backoff=[0.05, 0.1], max_attempts=3, dead_letter=dead_letter)
    await jetstream.ensure_consumer(js, stream=STREAM, name="doomed", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="doomed")
    await sub.start("orders.>", retry_ack(policy)(always_failing))
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(3))
    [letter] = await dlq.wait_for(1)
    await until_settled(js, "doomed")
    await sub.close()

    assert deliveries.counts == [1, 2, 3]
    assert letter.headers["Dead-Letter-Reason"] == "max_attempts"
    assert letter.headers["Dead-Letter-Error-Type"] == "TimeoutError"
    assert letter.headers["Dead-Letter-Delivery-Count"] == "3"
    assert json.loads(letter.payload)["id"] == "o-3"


@pytest.mark.slow
async def test_a_failed_dead_letter_keeps_the_message_until_it_succeeds(
    js: JetStreamContext,
) -> None:
    """No DLQ stream at first: the dead letter fails, so the original is naked, not lost."""
    deliveries = Deliveries()

    async def reject(msg: Message[Order]) -> None:
        deliveries.record(msg)
        raise NonRetryable("bad order")

    dead_letter = DeadLetter(jetstream.Publisher(js, BytesCodec(), timeout=1.0), "dlq.orders")
    policy = RetryPolicy(backoff=[0.2], dead_letter=dead_letter)
    await jetstream.ensure_consumer(js, stream=STREAM, name="keeper", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="keeper")
    await sub.start("orders.>", retry_ack(policy)(reject))
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(5))
    await deliveries.wait_for(2)  # the dead letter failed: naked and delivered again
    await jetstream.ensure_stream(js, name=DLQ, subjects=["dlq.>"])
    await until_settled(js, "keeper")  # dead-lettered at last, then terminated
    await sub.close()
    assert deliveries.counts == list(range(1, len(deliveries.counts) + 1))
    stored = await js.stream_info(DLQ)
    assert stored.state.messages == 1
    letter = await js.get_msg(DLQ, 1)
    assert letter.headers is not None
    assert letter.headers["X-Goflux-Dead-Letter-Delivery-Count"] == str(deliveries.counts[-1])


@pytest.mark.slow  # a 1 s back-off
async def test_a_waiting_retry_survives_a_consumer_restart(js: JetStreamContext) -> None:
    """The delay lives in the broker: a new consumer process gets the retry when it is due."""
    first = Deliveries()

    async def fail(msg: Message[Order]) -> None:
        first.record(msg)
        raise ConnectionError("down")

    policy = RetryPolicy(backoff=[1.0])
    await jetstream.ensure_consumer(js, stream=STREAM, name="durable", filter_subject="orders.>")
    old = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="durable")
    await old.start("orders.>", retry_ack(policy)(fail))
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(2))
    await first.wait_for(1)
    await old.close()  # the "process" goes away while the retry waits

    second = Deliveries()

    async def succeed(msg: Message[Order]) -> None:
        second.record(msg)

    new = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="durable")
    await new.start("orders.>", retry_ack(policy)(succeed))
    await second.wait_for(1)
    await until_settled(js, "durable")
    await new.close()
    assert second.counts == [2]
    assert second.times[0] - first.times[0] >= 1.0 - 0.05  # not before the delay


async def test_undecodable_payload_is_dead_lettered_by_the_subscriber(
    js: JetStreamContext, dlq: Inbox[bytes]
) -> None:
    handled = Inbox[Order]()
    dead_letter = DeadLetter(jetstream.Publisher(js, BytesCodec()), "dlq.orders")
    await jetstream.ensure_consumer(js, stream=STREAM, name="parser", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="parser", dead_letter=dead_letter)
    subscription = await sub.start("orders.>", handled)
    await js.publish("orders.created", b"{not json", headers={"X-Goflux-Tenant": "acme"})
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(1))
    [letter] = await dlq.wait_for(1)
    await handled.wait_for(1)
    await until_settled(js, "parser")
    assert subscription.undecodable == 1
    await sub.close()
    assert letter.payload == b"{not json"
    assert letter.headers["Dead-Letter-Reason"] == "undecodable"
    assert letter.headers["Dead-Letter-Error-Type"] == "goflux.DecodeError"
    assert letter.headers["Tenant"] == "acme"
    assert handled.payloads == [order(1)]


async def test_a_handler_that_settles_itself_is_left_alone(js: JetStreamContext) -> None:
    deliveries = Deliveries()

    async def settle_then_fail(msg: Message[Order]) -> None:
        deliveries.record(msg)
        await msg.term("handled elsewhere")
        raise RuntimeError("after settling")

    await jetstream.ensure_consumer(js, stream=STREAM, name="self", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="self", manual_ack=True)
    await sub.start("orders.>", retry_ack(RetryPolicy(backoff=[0.05]))(settle_then_fail))
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(1))
    await deliveries.wait_for(1)
    await until_settled(js, "self")
    await sub.close()
    assert deliveries.counts == [1]


async def test_retry_ack_acks_on_success_in_manual_mode(js: JetStreamContext) -> None:
    inbox = Inbox[Order]()
    await jetstream.ensure_consumer(js, stream=STREAM, name="manual", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="manual", manual_ack=True)
    await sub.start("orders.>", retry_ack()(inbox))
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(1))
    [msg] = await inbox.wait_for(1)
    await until_settled(js, "manual")
    await sub.close()
    assert msg.settled == "ack"


@pytest.mark.slow  # the redelivery back-off
async def test_auto_ack_in_manual_mode_acks_returns_and_naks_failures(
    js: JetStreamContext,
) -> None:
    deliveries = Deliveries()

    async def fail_once(msg: Message[Order]) -> None:
        deliveries.record(msg)
        if len(deliveries.times) == 1:
            raise ConnectionError("once")

    await jetstream.ensure_consumer(js, stream=STREAM, name="auto", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="auto", manual_ack=True)
    await sub.start("orders.>", auto_ack()(fail_once))
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(1))
    await deliveries.wait_for(2)  # naked with a delay (0.5 s), far before ack_wait
    await until_settled(js, "auto")
    await sub.close()
    assert deliveries.counts == [1, 2]
    assert deliveries.gaps[0] < 5.0  # ack_wait is 30 s: only a nak brings it back so soon
    assert deliveries.gaps[0] >= 0.4  # the default redelivery back-off (0.5 s, jitter 10%)


@pytest.mark.slow  # timeout and back-off timers
async def test_a_timed_out_handler_is_retried_with_backoff(js: JetStreamContext) -> None:
    deliveries = Deliveries()

    async def slow_once(msg: Message[Order]) -> None:
        deliveries.record(msg)
        if len(deliveries.times) == 1:
            await asyncio.Event().wait()  # hangs until the timeout cancels it

    handler = chain(retry_ack(RetryPolicy(backoff=[0.2])), timeout(0.2))(slow_once)
    await jetstream.ensure_consumer(js, stream=STREAM, name="slow", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="slow")
    await sub.start("orders.>", handler)
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(1))
    await deliveries.wait_for(2)
    await until_settled(js, "slow")
    await sub.close()
    assert deliveries.counts == [1, 2]
    assert deliveries.gaps[0] >= 0.2 + 0.2 - 0.05  # the timeout, then the backoff delay


@pytest.mark.slow
@pytest.mark.parametrize("heartbeat", [0.3, None], ids=["heartbeats", "control"])
async def test_timeout_heartbeats_keep_a_long_handler_from_redelivery(
    js: JetStreamContext, heartbeat: float | None
) -> None:
    deliveries = Deliveries()
    release = asyncio.Event()

    async def long_handler(msg: Message[Order]) -> None:
        deliveries.record(msg)
        await release.wait()  # outlives the 1 s ack_wait until the test releases it

    await jetstream.ensure_consumer(
        js, stream=STREAM, name="long", filter_subject="orders.>", ack_wait=1.0
    )
    # keep_alive off: only the middleware's heartbeats keep the message.
    sub = jetstream.Subscriber(
        js, CODEC, stream=STREAM, consumer="long", keep_alive=False, concurrency=2
    )
    subscription = await sub.start("orders.>", timeout(10, heartbeat=heartbeat)(long_handler))
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(1))
    await deliveries.wait_for(1)
    try:  # more than twice the ack_wait: redelivered unless heartbeats flow
        await deliveries.wait_for(2, timeout=2.5)
        redelivered = True
    except TimeoutError:
        redelivered = False
    release.set()
    await until_settled(js, "long")
    await sub.close()
    assert redelivered is (heartbeat is None)
    assert subscription.redelivered == (1 if heartbeat is None else 0)
