"""retry_ack and dead letters at the edges: odd input, failing destinations, loops."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux import (
    BytesCodec,
    JsonCodec,
    Message,
    NonRetryable,
    PayloadTooLarge,
    PublishError,
    PublishReceipt,
)
from goflux.middleware import DeadLetter, RetryPolicy, retry_ack
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports import nats as gnats
from tests.conftest import STREAM
from tests.helpers import Inbox, raw_publish
from tests.middleware.test_retry_jetstream import DLQ, Deliveries, stream_state, until_settled
from tests.models import Order, order

CODEC = JsonCodec(Order)
UNDECODABLE_PATH = os.fsdecode(b"/data/report-\xff.csv")  # holds a lone surrogate


@pytest.fixture
async def dlq_stream(js: JetStreamContext) -> JetStreamContext:
    await jetstream.ensure_stream(js, name=DLQ, subjects=["dlq.>"])
    return js


def dead_letter(js: JetStreamContext, subject: str = "dlq.orders") -> DeadLetter:
    return DeadLetter(jetstream.Publisher(js, BytesCodec()), subject)


async def dead_letters(js: JetStreamContext, count: int | None = None) -> list[Message[bytes]]:
    """The dead letters, read through goflux: all stored now, or wait for ``count``."""
    if count is None:
        count = (await js.stream_info(DLQ)).state.messages
    inbox: Inbox[bytes] = Inbox()
    async with jetstream.Subscriber(js, BytesCodec(), stream=DLQ) as sub:
        await sub.start(">", inbox)
        await inbox.wait_for(count)
    return inbox.messages


@pytest.mark.parametrize(
    ("line", "kept"),
    [
        (b"X-Goflux-user/id: 42\r\n", None),  # "/" is no header-name character
        (b"X-Goflux-Note: a\x00b\r\n", ("Note", "a\\x00b")),  # NUL in a value
    ],
    ids=["name", "nul"],
)
@pytest.mark.parametrize("where", ["handler", "undecodable"])
async def test_headers_a_peer_may_send_do_not_block_the_dead_letter(
    nats_server: NatsServer,
    dlq_stream: JetStreamContext,
    line: bytes,
    kept: tuple[str, str] | None,
    where: str,
) -> None:
    js = dlq_stream
    payload = CODEC.encode(order(1)) if where == "handler" else b"{not json"
    lines = line + b"X-Goflux-Tenant: acme\r\n"
    await raw_publish(nats_server.url, "orders.created", lines, payload)

    async def reject(msg: Message[Order]) -> None:
        raise NonRetryable("bad order")

    await jetstream.ensure_consumer(js, stream=STREAM, name="c", filter_subject="orders.>")
    if where == "handler":
        policy = RetryPolicy(backoff=[0.05], dead_letter=dead_letter(js))
        sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="c")
        await sub.start("orders.>", retry_ack(policy)(reject))
    else:
        sub = jetstream.Subscriber(
            js, CODEC, stream=STREAM, consumer="c", dead_letter=dead_letter(js)
        )
        await sub.start("orders.>", reject)
    await until_settled(js, "c")
    await sub.close()
    [letter] = await dead_letters(js)
    assert letter.payload == payload
    assert letter.headers["Tenant"] == "acme"
    assert "user/id" not in letter.headers
    if kept is not None:
        assert letter.headers[kept[0]] == kept[1]


@pytest.mark.slow  # a back-off timer
async def test_a_stray_cancellation_is_retried_with_backoff(js: JetStreamContext) -> None:
    """A CancelledError escaping the handler (not a drain) must not cause a hot loop."""
    deliveries = Deliveries()

    async def stray(msg: Message[Order]) -> None:
        deliveries.record(msg)
        if len(deliveries.times) == 1:
            raise asyncio.CancelledError  # e.g. from a library's internal task

    await jetstream.ensure_consumer(js, stream=STREAM, name="c", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="c")
    await sub.start("orders.>", retry_ack(RetryPolicy(backoff=[0.3]))(stray))
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(1))
    await deliveries.wait_for(2)
    await until_settled(js, "c")
    await sub.close()
    assert deliveries.counts == [1, 2]
    assert deliveries.gaps[0] >= 0.3 - 0.05


async def test_an_ordered_subscriber_retries_in_place_and_dead_letters(
    dlq_stream: JetStreamContext,
) -> None:
    """Ordered mode cannot redeliver: the attempts run in the handler's place."""
    js = dlq_stream
    calls: list[str] = []
    sequences: list[int] = []
    done = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        calls.append(msg.payload.id)
        assert not msg.acknowledgeable
        assert msg.delivery is not None  # every attempt, not only the first
        sequences.append(msg.delivery.stream_sequence)
        if msg.payload.id == "o-1" and calls.count("o-1") < 3:
            raise ConnectionError("flaky")
        if msg.payload.id == "o-2":
            raise ConnectionError("down for good")
        if msg.payload.id == "o-3":
            done.set()

    policy = RetryPolicy(backoff=[0.01], max_attempts=3, dead_letter=dead_letter(js))
    publisher = jetstream.Publisher(js, CODEC)
    for n in (1, 2, 3):
        await publisher.publish("orders.created", order(n))
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, ordered=True)
    await sub.start("orders.>", retry_ack(policy)(handle))
    await asyncio.wait_for(done.wait(), 10)
    await sub.close()
    assert calls == ["o-1"] * 3 + ["o-2"] * 3 + ["o-3"]
    assert sequences == [1, 1, 1, 2, 2, 2, 3]
    [letter] = await dead_letters(js)
    assert letter.headers["Dead-Letter-Reason"] == "max_attempts"
    assert letter.headers["Dead-Letter-Sequence"] == "2"
    assert letter.headers["Dead-Letter-Stream"] == STREAM
    assert letter.headers["Dead-Letter-Delivery-Count"] == "3"  # attempts made in place


@contextlib.asynccontextmanager
async def small_payload_server(
    tmp_path: Path, limit: int
) -> AsyncIterator[tuple[Client, JetStreamContext]]:
    """A server whose max_payload is ``limit`` bytes, its client, and the ORDERS stream."""
    config = tmp_path / "server.conf"
    config.write_text(f"max_payload: {limit}\n")
    async with NatsServer(args=["-c", os.fspath(config)]) as server:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name=STREAM, subjects=["orders.>"])
        yield nc, js
        await nc.close()


async def test_an_oversized_dead_letter_is_sent_compact(tmp_path: Path) -> None:
    """The metadata must not push a dead letter over max_payload (the server would
    close the connection): it is sent again without user headers and error text."""
    async with small_payload_server(tmp_path, 4096) as (nc, js):
        await jetstream.ensure_stream(js, name=DLQ, subjects=["dlq.>"])
        big = b'"' + b"x" * 3500 + b'"'
        await js.publish("orders.created", big, headers={"X-Goflux-Note": "n" * 300})

        async def reject(msg: Message[str]) -> None:
            raise NonRetryable("y" * 900)

        await jetstream.ensure_consumer(js, stream=STREAM, name="c", filter_subject="orders.>")
        sub = jetstream.Subscriber(js, JsonCodec(str), stream=STREAM, consumer="c")
        policy = RetryPolicy(dead_letter=dead_letter(js))
        subscription = await sub.start("orders.>", retry_ack(policy)(reject))
        await until_settled(js, "c")
        assert subscription.running  # the connection survived
        await sub.close()
        [letter] = await dead_letters(js)
        assert letter.payload == big
        assert letter.headers["Dead-Letter-Reason"] == "non_retryable"
        assert "Dead-Letter-Error" not in letter.headers
        assert "Note" not in letter.headers
        assert nc.is_connected


async def test_headers_over_max_payload_are_refused_before_sending(
    tmp_path: Path,
) -> None:
    async with small_payload_server(tmp_path, 1024) as (nc, js):
        headers = {"Note": "n" * 700}
        publisher = jetstream.Publisher(js, JsonCodec(str))
        with pytest.raises(PayloadTooLarge) as caught:
            await publisher.publish("orders.a", "x" * 300, headers=headers)
        assert caught.value.permanent
        assert caught.value.limit == 1024
        assert caught.value.size > 1024
        with pytest.raises(PayloadTooLarge):
            await gnats.Publisher(nc, JsonCodec(str)).publish("plain", "x" * 300, headers=headers)
        [result] = await jetstream.Publisher(js, JsonCodec(str)).publish_many(
            [jetstream.Outgoing("orders.a", "x" * 300, headers=headers)], return_exceptions=True
        )
        assert isinstance(result, PayloadTooLarge)
        receipt = await jetstream.Publisher(js, JsonCodec(str)).publish("orders.a", "fits")
        assert receipt.sequence == 1  # the connection is still open and usable
        # Without any header the body may use the whole limit (no header block is sent).
        full = await jetstream.Publisher(js, BytesCodec()).publish("orders.a", b"x" * 1024)
        assert full.sequence == 2
        with pytest.raises(PublishError):  # over it: nats-py refuses, nothing is sent
            await jetstream.Publisher(js, BytesCodec()).publish("orders.a", b"x" * 1025)
        assert nc.is_connected


@pytest.mark.slow  # back-off timers
async def test_a_failing_dead_letter_destination_keeps_the_message(
    dlq_stream: JetStreamContext,
) -> None:
    """Even a permanent failure (a closed publisher) must not lose the original."""
    js = dlq_stream
    deliveries = Deliveries()
    destination = jetstream.Publisher(js, BytesCodec())
    await destination.close()  # a shutdown in the wrong order, say

    async def reject(msg: Message[Order]) -> None:
        deliveries.record(msg)
        raise NonRetryable("bad")

    policy = RetryPolicy(backoff=[0.2], dead_letter=DeadLetter(destination, "dlq.orders"))
    await jetstream.ensure_consumer(js, stream=STREAM, name="c", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="c")
    await sub.start("orders.>", retry_ack(policy)(reject))
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(1))
    await deliveries.wait_for(2)  # kept and delivered again after the delay
    await sub.close()
    assert deliveries.gaps[0] >= 0.2 - 0.05
    assert await stream_state(js, "c") != (0, 0)  # not terminated: still held


async def test_each_consumer_gets_its_own_dead_letter(dlq_stream: JetStreamContext) -> None:
    js = dlq_stream

    async def reject(msg: Message[Order]) -> None:
        raise NonRetryable("bad")

    policy = RetryPolicy(dead_letter=dead_letter(js))
    subscribers = []
    for name in ("billing", "shipping"):
        await jetstream.ensure_consumer(js, stream=STREAM, name=name, filter_subject="orders.>")
        sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer=name)
        await sub.start("orders.>", retry_ack(policy)(reject))
        subscribers.append(sub)
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(1))
    for name in ("billing", "shipping"):
        await until_settled(js, name)
    for sub in subscribers:
        await sub.close()
    letters = await dead_letters(js)
    assert sorted(letter.headers["Dead-Letter-Consumer"] for letter in letters) == [
        "billing",
        "shipping",
    ]


async def test_unencodable_error_text_is_dead_lettered_and_terminated(
    dlq_stream: JetStreamContext,
) -> None:
    js = dlq_stream
    calls = 0
    called = asyncio.Event()

    async def reject(msg: Message[Order]) -> None:
        nonlocal calls
        calls += 1
        called.set()
        raise NonRetryable(f"cannot read {UNDECODABLE_PATH}")

    await jetstream.ensure_consumer(js, stream=STREAM, name="c", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="c")
    await sub.start("orders.>", retry_ack(RetryPolicy(dead_letter=dead_letter(js)))(reject))
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(1))
    # A loaded server may report nothing pending before it counts the new message.
    async with asyncio.timeout(10):
        await called.wait()
    await until_settled(js, "c")
    await sub.close()
    [letter] = await dead_letters(js)
    assert letter.headers["Dead-Letter-Error"] == "cannot read /data/report-\\udcff.csv"
    assert calls == 1


@pytest.mark.parametrize("where", ["handler", "undecodable"])
async def test_a_dead_letter_subject_inside_the_consumed_stream_does_not_loop(
    js: JetStreamContext, where: str
) -> None:
    """orders.dlq is captured by ORDERS and consumed again: one dead letter, then the end."""
    seen: list[str] = []

    async def reject(msg: Message[Order]) -> None:
        seen.append(msg.subject)
        raise NonRetryable("bad")

    destination = dead_letter(js, "orders.dlq")
    await jetstream.ensure_consumer(js, stream=STREAM, name="c", filter_subject="orders.>")
    if where == "handler":
        sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="c")
        await sub.start("orders.>", retry_ack(RetryPolicy(dead_letter=destination))(reject))
        await jetstream.Publisher(js, CODEC).publish("orders.created", order(1))
    else:
        sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="c", dead_letter=destination)
        await sub.start("orders.>", reject)
        await js.publish("orders.created", b"{not json")
    async with asyncio.timeout(10):  # the original, then its dead letter, both settled
        while (await js.stream_info(STREAM)).state.messages < 2:
            await js._nc.flush()
    await until_settled(js, "c")
    await sub.close()
    info = await js.stream_info(STREAM)
    assert info.state.messages == 2  # no dead letter of the dead letter
    if where == "handler":
        assert seen == ["orders.created", "orders.dlq"]


@pytest.mark.slow
async def test_the_keep_alive_does_not_undo_a_nak_delay(js: JetStreamContext) -> None:
    """A handler that naks with a delay and keeps working gets no in_progress after it."""
    deliveries = Deliveries()
    release = asyncio.Event()

    async def nak_then_work(msg: Message[Order]) -> None:
        deliveries.record(msg)
        if len(deliveries.times) == 1:
            await msg.nak(1.5)
            await release.wait()  # goes on working past ack_wait

    await jetstream.ensure_consumer(
        js, stream=STREAM, name="c", filter_subject="orders.>", ack_wait=1.0
    )
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="c", concurrency=2)
    await sub.start("orders.>", nak_then_work)
    await jetstream.Publisher(js, CODEC).publish("orders.created", order(1))
    await deliveries.wait_for(2)
    release.set()
    await sub.close()
    assert 1.5 - 0.05 <= deliveries.gaps[0] < 2.5  # keep-alive signals would push it to 3+


async def test_the_dead_letter_carries_the_headers_as_received(
    dlq_stream: JetStreamContext,
) -> None:
    js = dlq_stream

    async def meddle(msg: Message[Order]) -> None:
        msg.headers["Tenant"] = "rewritten"
        msg.headers["Added"] = "by handler"
        raise NonRetryable("bad")

    await jetstream.ensure_consumer(js, stream=STREAM, name="c", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="c")
    await sub.start("orders.>", retry_ack(RetryPolicy(dead_letter=dead_letter(js)))(meddle))
    await jetstream.Publisher(js, CODEC).publish(
        "orders.created", order(1), headers={"Tenant": "acme"}
    )
    await until_settled(js, "c")
    await sub.close()
    [letter] = await dead_letters(js)
    assert letter.headers["Tenant"] == "acme"
    assert "Added" not in letter.headers


async def test_a_drain_during_an_undecodable_dead_letter_hands_the_message_back(
    js: JetStreamContext,
) -> None:
    """Cancelled while dead-lettering (drain deadline): nak'd at once, not left for ack_wait."""
    await jetstream.ensure_stream(js, name=DLQ, subjects=["dlq.>"])
    publishing = asyncio.Event()

    class StuckPublisher(jetstream.Publisher[bytes]):
        """A dead-letter destination that never answers."""

        async def publish(self, *args: object, **kwargs: object) -> PublishReceipt:
            publishing.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    await jetstream.ensure_consumer(
        js, stream=STREAM, name="c", filter_subject="orders.>", ack_wait=30
    )
    stuck = DeadLetter(StuckPublisher(js, BytesCodec()), "dlq.orders")
    sub = jetstream.Subscriber(
        js, CODEC, stream=STREAM, consumer="c", dead_letter=stuck, drain_timeout=0.1
    )
    await sub.start("orders.>", Inbox[Order]())
    await js.publish("orders.created", b"{not json")
    await publishing.wait()
    await sub.close()  # the drain deadline cancels the dead-lettering worker
    # Redelivered at once (ack_wait is 30 s): a healthy subscriber dead-letters it now.
    healthy = jetstream.Subscriber(
        js, CODEC, stream=STREAM, consumer="c", dead_letter=dead_letter(js)
    )
    await healthy.start("orders.>", Inbox[Order]())
    [letter] = await dead_letters(js, count=1)  # waits at most 10 s, far below ack_wait
    await healthy.close()
    assert letter.payload == b"{not json"
