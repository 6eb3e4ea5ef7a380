"""retry_ack where the broker cannot redeliver (channel, core NATS): attempts run in place."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client

from goflux import BytesCodec, JsonCodec, Message, NonRetryable, PublishError
from goflux.middleware import DeadLetter, RetryPolicy, auto_ack, retry_ack
from goflux.transports import channel
from goflux.transports import nats as gnats
from tests.helpers import Inbox
from tests.models import Order, order

CODEC = JsonCodec(Order)


class Flaky:
    """Fails the first ``failures`` calls, recording every message it sees."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or ConnectionError("downstream unavailable")
        self.seen: list[Message[Order]] = []
        self.times: list[float] = []

    async def __call__(self, msg: Message[Order]) -> None:
        self.seen.append(msg)
        self.times.append(asyncio.get_running_loop().time())
        if len(self.seen) <= self.failures:
            raise self.error


async def test_channel_handler_is_retried_in_place_with_the_delays() -> None:
    bus = channel.Bus(codec=CODEC)
    flaky = Flaky(failures=2)
    policy = RetryPolicy(backoff=[0.05, 0.1], max_attempts=3)
    subscription = await channel.Subscriber(bus).start("orders.>", retry_ack(policy)(flaky))
    await channel.Publisher(bus).publish("orders.created", order(1))
    await subscription.stop()
    assert [m.payload for m in flaky.seen] == [order(1)] * 3
    assert subscription.failed == 0  # the final attempt succeeded
    gaps = [b - a for a, b in zip(flaky.times, flaky.times[1:], strict=False)]
    assert 0.05 <= gaps[0] < 0.05 + 0.5
    assert 0.1 <= gaps[1] < 0.1 + 0.5
    assert len({id(m) for m in flaky.seen}) == 3  # each attempt gets an unsettled message


async def test_channel_retries_stop_at_max_attempts_and_dead_letter() -> None:
    bus = channel.Bus(codec=CODEC)
    dead = channel.Bus(codec=BytesCodec())
    letters: Inbox[bytes] = Inbox()
    await channel.Subscriber(dead).start("dlq.>", letters)
    flaky = Flaky(failures=10)
    policy = RetryPolicy(
        backoff=[0.01],
        max_attempts=3,
        dead_letter=DeadLetter(channel.Publisher(dead), "dlq.orders"),
    )
    subscription = await channel.Subscriber(bus).start("orders.>", retry_ack(policy)(flaky))
    await channel.Publisher(bus).publish("orders.created", order(4), message_id="o-4")
    [letter] = await letters.wait_for(1)
    await subscription.stop()
    assert len(flaky.seen) == 3
    assert subscription.failed == 1  # the last error reached the transport
    assert letter.payload == CODEC.encode(order(4))
    assert letter.headers["Dead-Letter-Reason"] == "max_attempts"
    assert letter.headers["Dead-Letter-Delivery-Count"] == "3"
    assert letter.headers["Dead-Letter-Message-Id"] == "o-4"
    assert "Dead-Letter-Stream" not in letter.headers  # no stream on a channel
    assert letter.id is None  # no redelivery here, so no second copy to de-duplicate


async def test_non_retryable_is_not_retried_in_place() -> None:
    bus = channel.Bus(codec=CODEC)
    flaky = Flaky(failures=10, error=NonRetryable("never"))
    subscription = await channel.Subscriber(bus).start(
        "orders.>", retry_ack(RetryPolicy(backoff=[0.01]))(flaky)
    )
    await channel.Publisher(bus).publish("orders.created", order(1))
    await subscription.stop()
    assert len(flaky.seen) == 1
    assert subscription.failed == 1


async def test_dead_lettering_a_value_without_bytes_fails_clearly() -> None:
    bus: channel.Bus[Order] = channel.Bus()  # no codec: values travel, no bytes
    dead = DeadLetter(channel.Publisher(channel.Bus(codec=BytesCodec())), "dlq.orders")
    with pytest.raises(PublishError, match="no payload bytes") as caught:
        await dead.send(Message("orders.created", order(1)), ValueError("x"), "non_retryable")
    assert caught.value.permanent
    flaky = Flaky(failures=10, error=NonRetryable("never"))
    policy = RetryPolicy(dead_letter=dead)
    subscription = await channel.Subscriber(bus).start("orders.>", retry_ack(policy)(flaky))
    await channel.Publisher(bus).publish("orders.created", order(1))
    await subscription.stop()
    assert len(flaky.seen) == 1  # given up without a dead letter, and logged
    assert subscription.failed == 1


async def test_core_nats_handler_is_retried_in_place(nc: Client) -> None:
    flaky = Flaky(failures=1)
    done = asyncio.Event()

    async def handler(msg: Message[Order]) -> None:
        await flaky(msg)
        done.set()

    sub = gnats.Subscriber(nc, CODEC)
    await sub.start("orders.>", retry_ack(RetryPolicy(backoff=[0.01]))(handler))
    await gnats.Publisher(nc, CODEC).publish("orders.created", order(2))
    await asyncio.wait_for(done.wait(), 10)
    await sub.close()
    assert [m.payload for m in flaky.seen] == [order(2)] * 2


async def test_auto_ack_passes_through_without_acknowledgement() -> None:
    bus = channel.Bus(codec=CODEC)
    flaky = Flaky(failures=1)
    subscription = await channel.Subscriber(bus).start("orders.>", auto_ack()(flaky))
    publisher = channel.Publisher(bus)
    await publisher.publish("orders.created", order(1))
    await publisher.publish("orders.created", order(2))
    await subscription.stop()
    assert [m.payload for m in flaky.seen] == [order(1), order(2)]  # no redelivery
    assert [m.settled for m in flaky.seen] == [None, None]  # nothing settled for it
    assert subscription.failed == 1
