"""A handler that keeps failing: redelivered with a growing delay, never in a hot loop.

Against a real nats-server: the times between deliveries of an always-failing
message, its error lines, the messages beside it, and what happens to a message whose
failure is permanent (``NonRetryable``, or a value a pipe cannot encode).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

import pytest
from nats.js import JetStreamContext

from goflux import BytesCodec, JsonCodec, Message, NonRetryable, pipe_map, process
from goflux._backoff import REDELIVERY_BACKOFF
from goflux.middleware import DeadLetter, auto_ack
from goflux.transports import jetstream
from tests.conftest import STREAM
from tests.helpers import Inbox, drained
from tests.models import Order, order

CODEC = JsonCodec(Order)
POISON = "o-poison"


async def publish(js: JetStreamContext, subject: str, *orders: Order) -> None:
    await jetstream.Publisher(js, CODEC).publish_many(
        jetstream.Outgoing(subject, value) for value in orders
    )


async def dead_letters(
    js: JetStreamContext,
) -> tuple[DeadLetter, Inbox[bytes], jetstream.Subscriber[bytes]]:
    """A dead letter to ``dlq.orders``, and an inbox subscribed to what arrives there."""
    await jetstream.ensure_stream(js, name="DLQ", subjects=["dlq.>"])
    inbox: Inbox[bytes] = Inbox()
    reader = jetstream.Subscriber(js, BytesCodec(), stream="DLQ")
    await reader.start("dlq.>", inbox)
    return DeadLetter(jetstream.Publisher(js, BytesCodec()), "dlq.orders"), inbox, reader


def failures(caplog: pytest.LogCaptureFixture, sequence: int) -> list[logging.LogRecord]:
    """The ERROR lines about the handler failing for stream sequence ``sequence``."""
    return [
        r
        for r in caplog.records
        if r.levelno == logging.ERROR
        and r.getMessage().startswith(f"handler failed for message {sequence} ")
    ]


@pytest.mark.slow  # back-off timers
async def test_a_failing_message_comes_back_later_each_time_while_others_flow(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    deliveries: list[float] = []
    others = 0
    others_done = asyncio.Event()
    fourth = asyncio.Event()

    async def handler(msg: Message[Order]) -> None:
        nonlocal others
        if msg.payload.id == POISON:
            deliveries.append(time.monotonic())
            if len(deliveries) == 4:
                fourth.set()
            raise RuntimeError("always fails")
        others += 1
        if others == 300:
            others_done.set()

    await publish(js, "orders.a", order(0).model_copy(update={"id": POISON}))
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM)
    await sub.start("orders.>", handler)
    began = time.monotonic()
    await publish(js, "orders.a", *(order(n) for n in range(300)))
    async with asyncio.timeout(20):
        await others_done.wait()
    others_took = time.monotonic() - began
    async with asyncio.timeout(20):
        await fourth.wait()
    await sub.close()
    gaps = [b - a for a, b in itertools.pairwise(deliveries)]
    # The default back-off: about 0.5 s, 1 s, 2 s (jitter takes up to 10% off).
    expected = [REDELIVERY_BACKOFF.initial * 2**n for n in range(3)]
    for gap, wanted in zip(gaps, expected, strict=False):
        assert gap >= wanted * 0.85, (gaps, expected)
    assert gaps[2] > gaps[0] * 2, gaps  # it grows
    # The 300 beside it did not wait for it (on a quiet machine: well under a second).
    assert others_took < deliveries[2] - deliveries[0], (others_took, gaps)
    # One error line per delivery, saying when it comes back.
    lines = failures(caplog, 1)
    assert len(lines) >= 3, [r.getMessage() for r in caplog.records]
    assert "(delivery 1; nak'd with a 0." in lines[0].getMessage()
    assert "(delivery 2; nak'd with a " in lines[1].getMessage()


async def test_immediate_redelivery_is_a_choice_and_its_error_lines_are_coalesced(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    handled = 0
    enough = asyncio.Event()

    async def handler(msg: Message[Order]) -> None:
        nonlocal handled
        handled += 1
        if handled == 40:
            enough.set()
        raise RuntimeError("always fails")

    await publish(js, "orders.a", order(1))
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, redelivery_backoff=None)
    await sub.start("orders.>", handler)
    async with asyncio.timeout(10):  # at once: 40 deliveries take well under a second
        await enough.wait()
    await sub.close()
    lines = [r.getMessage() for r in failures(caplog, 1)]
    powers = [n for n in (1, 2, 4, 8, 16, 32, 64, 128) if n <= handled]
    assert len(lines) == len(powers), lines
    for line, n in zip(lines, powers, strict=True):
        assert f"(delivery {n}; nak'd for redelivery at once)" in line, (n, line)


@pytest.mark.slow  # back-off timers
async def test_a_list_of_delays_sets_the_back_off(js: JetStreamContext) -> None:
    deliveries: list[float] = []
    third = asyncio.Event()

    async def handler(msg: Message[Order]) -> None:
        deliveries.append(time.monotonic())
        if len(deliveries) == 3:
            third.set()
        raise RuntimeError("always fails")

    await publish(js, "orders.a", order(1))
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, redelivery_backoff=[0.1, 1.2])
    await sub.start("orders.>", handler)
    async with asyncio.timeout(10):
        await third.wait()
    await sub.close()
    first, second = deliveries[1] - deliveries[0], deliveries[2] - deliveries[1]
    assert 0.1 <= first < 1.0, (first, second)
    assert second >= 1.2, (first, second)


async def test_a_non_retryable_failure_is_dead_lettered_and_terminated(
    js: JetStreamContext,
) -> None:
    dead_letter, letters, dlq = await dead_letters(js)
    handled: list[int] = []

    async def handler(msg: Message[Order]) -> None:
        handled.append(msg.delivery.num_delivered if msg.delivery else 0)
        raise NonRetryable("this order can never be processed")

    await publish(js, "orders.a", order(1))
    # Redelivered at once if it were naked: a second handling would come quickly.
    sub = jetstream.Subscriber(
        js, CODEC, stream=STREAM, dead_letter=dead_letter, redelivery_backoff=None
    )
    subscription = await sub.start("orders.>", handler)
    async with asyncio.timeout(10):
        await letters.wait_for(1)
    # Terminated: the consumer has nothing left to deliver or to wait for.
    async with asyncio.timeout(10):
        await drained(js, STREAM, subscription.consumer)
    await sub.close()
    await dlq.close()
    assert handled == [1]
    assert letters.messages[0].headers is not None
    assert letters.messages[0].headers.get("Dead-Letter-Reason") == "non_retryable"
    assert letters.messages[0].headers.get("Dead-Letter-Error-Type") == "goflux.NonRetryable"


async def test_a_pipe_that_cannot_encode_its_value_gives_the_message_up(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    handled = 0
    seen = asyncio.Event()
    piped = jetstream.Publisher(js, CODEC)
    forward = pipe_map(piped, lambda m: m.payload, subject="orders.out")

    async def handler(msg: Message[Order]) -> None:
        nonlocal handled
        handled += 1
        try:
            await forward(msg)
        finally:
            seen.set()

    # 1e999 decodes to an infinite float, which JSON (as Go writes it) cannot carry.
    await js.publish("orders.in", b'{"id": "o-inf", "customerId": "c-1", "amount": 1e999}')
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, redelivery_backoff=None)
    subscription = await sub.start("orders.in", handler)
    async with asyncio.timeout(10):
        await seen.wait()
    async with asyncio.timeout(10):
        await drained(js, STREAM, subscription.consumer)
    await sub.close()
    assert handled == 1  # terminated, not redelivered (immediate redelivery was allowed)
    assert "non-retryable message 1 on 'orders.in' terminated" in caplog.text
    assert "cannot be encoded" in caplog.text


class Wild:
    """A user's back-off with out-of-range answers: far above a year, then NaN."""

    def delay(self, attempt: int, /) -> float:
        return 2.0 ** (attempt + 30) if attempt == 1 else float("nan")


async def test_a_back_off_out_of_range_never_stops_the_subscription(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    good = 0
    done = asyncio.Event()
    failed: list[int] = []

    async def handler(msg: Message[Order]) -> None:
        nonlocal good
        if msg.payload.id == POISON:
            failed.append(msg.delivery.num_delivered if msg.delivery else 0)
            raise RuntimeError("always fails")
        good += 1
        if good == 50:
            done.set()

    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, redelivery_backoff=Wild())
    subscription = await sub.start("orders.>", handler)
    await publish(js, "orders.a", order(0).model_copy(update={"id": POISON}))
    await publish(js, "orders.b", *(order(n) for n in range(50)))
    async with asyncio.timeout(10):
        await done.wait()
    assert subscription.running
    await sub.close()
    assert failed == [1]  # naked for a year (the cap), not redelivered
    assert "nak'd with a 31536000.0s delay" in caplog.text


async def test_a_zero_delay_is_coalesced_like_immediate_redelivery(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    handled = 0
    enough = asyncio.Event()

    async def handler(msg: Message[Order]) -> None:
        nonlocal handled
        handled += 1
        if handled == 20:
            enough.set()
        raise RuntimeError("always fails")

    await publish(js, "orders.a", order(1))
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, redelivery_backoff=[0])
    await sub.start("orders.>", handler)
    async with asyncio.timeout(10):
        await enough.wait()
    await sub.close()
    lines = failures(caplog, 1)
    assert len(lines) == len([n for n in (1, 2, 4, 8, 16, 32) if n <= handled]), handled


async def test_auto_ack_dead_letters_and_terminates_a_non_retryable_failure(
    js: JetStreamContext,
) -> None:
    dead_letter, letters, dlq = await dead_letters(js)
    handled: list[int] = []

    async def handler(msg: Message[Order]) -> None:
        handled.append(msg.delivery.num_delivered if msg.delivery else 0)
        raise NonRetryable("never")

    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, manual_ack=True)
    subscription = await sub.start("orders.>", auto_ack(None, dead_letter=dead_letter)(handler))
    await publish(js, "orders.a", order(1))
    async with asyncio.timeout(10):
        await letters.wait_for(1)
        await drained(js, STREAM, subscription.consumer)
    await sub.close()
    await dlq.close()
    assert handled == [1]  # terminated, although naks would redeliver at once
    assert letters.messages[0].headers is not None
    assert letters.messages[0].headers.get("Dead-Letter-Reason") == "non_retryable"


async def test_process_dead_letters_a_non_retryable_failure(js: JetStreamContext) -> None:
    dead_letter, letters, dlq = await dead_letters(js)

    async def handler(msg: Message[Order]) -> None:
        raise NonRetryable("never")

    await publish(js, "orders.a", order(1))
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM)
    async with sub.stream("orders.>") as stream:
        processing = asyncio.create_task(process(stream, handler, dead_letter=dead_letter))
        async with asyncio.timeout(10):
            await letters.wait_for(1)
        await stream.stop()
        stats = await processing
    await dlq.close()
    assert stats.failed == 1
    assert letters.messages[0].headers is not None
    assert letters.messages[0].headers.get("Dead-Letter-Reason") == "non_retryable"


@pytest.mark.parametrize("mode", [{"manual_ack": True}, {"ordered": True}])
async def test_a_redelivery_back_off_without_the_subscribers_own_naks_is_refused(
    js: JetStreamContext, mode: dict[str, bool]
) -> None:
    with pytest.raises(ValueError, match="redelivery_backoff"):
        jetstream.Subscriber(js, CODEC, stream=STREAM, redelivery_backoff=[1], **mode)  # type: ignore[arg-type]


@pytest.mark.slow  # back-off timers
async def test_a_handler_whose_own_cancellation_escapes_is_redelivered_later_each_time(
    js: JetStreamContext,
) -> None:
    deliveries: list[float] = []
    third = asyncio.Event()

    async def handler(msg: Message[Order]) -> None:
        deliveries.append(time.monotonic())
        if len(deliveries) == 3:
            third.set()
        raise asyncio.CancelledError  # a timeout of its own, say, that it did not catch

    await publish(js, "orders.a", order(1))
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM)
    subscription = await sub.start("orders.>", handler)
    async with asyncio.timeout(10):
        await third.wait()
    assert subscription.running
    await sub.close()
    gaps = [b - a for a, b in itertools.pairwise(deliveries)]
    assert gaps[0] >= 0.4, gaps  # about 0.5 s, not at once
    assert gaps[1] >= 0.85, gaps  # then about 1 s
