"""Fast-ingest batches (nats-server 2.14, ADR-50) against a real server.

What is stored is always the batch's first items, in order, none twice; the client
runs no further ahead of the server's acks than the window allows; and a batch that
ends early says which items are stored and which are not.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry.trace import StatusCode

import goflux
from goflux import (
    ExpectationFailed,
    FeatureUnsupported,
    InvalidSubject,
    PayloadTooLarge,
    PublishError,
    StrCodec,
    StreamFeatureDisabled,
)
from goflux._wire import check_size, outgoing
from goflux.testing import NatsServer, server_binary
from goflux.transports import jetstream
from goflux.transports.jetstream import (
    FastBatchError,
    Outgoing,
    SubjectOutsideStream,
)
from tests.conftest import Otel

CODEC = StrCodec()


@pytest.fixture
async def fast_js(bare_js: JetStreamContext) -> JetStreamContext:
    await jetstream.ensure_stream(
        bare_js, name="FAST", subjects=["fast.>"], allow_batched=True, max_msg_size=1024
    )
    return bare_js


def items(count: int, prefix: str = "fast", ids: str = "id") -> list[Outgoing[str]]:
    return [Outgoing(f"{prefix}.{n % 3}", f"m{n}", message_id=f"{ids}-{n}") for n in range(count)]


async def stored(js: JetStreamContext, stream: str) -> list[tuple[int, str, str]]:
    """Every message of ``stream`` as (sequence, subject, body), read in order."""
    total = (await js.stream_info(stream)).state.messages
    sub = await js.subscribe("", stream=stream, ordered_consumer=True)
    out: list[tuple[int, str, str]] = []
    while len(out) < total:
        msg = await sub.next_msg(timeout=5)
        out.append((msg.metadata.sequence.stream, msg.subject, msg.data.decode()))
    await sub.unsubscribe()
    return out


async def messages_in(js: JetStreamContext, stream: str) -> int:
    return (await js.stream_info(stream)).state.messages


# ------------------------------------------------------------------ all stored


@pytest.mark.slow
async def test_20000_items_are_stored_once_in_order_at_the_receipts_sequences(
    fast_js: JetStreamContext,
) -> None:
    publisher = jetstream.Publisher(fast_js, CODEC)
    await publisher.publish("fast.before", "x")  # the batch starts at sequence 2
    receipt = await publisher.publish_fast(items(20_000))
    assert (receipt.stream, receipt.count, receipt.last_sequence) == ("FAST", 20_000, 20_001)
    held = await stored(fast_js, "FAST")
    assert len(held) == 20_001
    first = receipt.last_sequence - receipt.count + 1
    assert [(seq, subject, body) for seq, subject, body in held[1:]] == [
        (first + n, f"fast.{n % 3}", f"m{n}") for n in range(20_000)
    ]
    # The same message IDs again: the server de-duplicates every one, stores none.
    again = await publisher.publish_fast(items(20_000))
    assert (again.count, again.last_sequence) == (20_000, 0)
    assert await messages_in(fast_js, "FAST") == 20_001


async def test_one_item_and_an_async_iterator(fast_js: JetStreamContext) -> None:
    publisher = jetstream.Publisher(fast_js, CODEC)
    one = await publisher.publish_fast([Outgoing("fast.a", "alone")])
    assert (one.count, one.last_sequence) == (1, 1)

    async def produce() -> AsyncIterator[Outgoing[str]]:
        for n in range(700):
            yield Outgoing("fast.b", str(n))

    receipt = await publisher.publish_fast(produce(), stream="FAST")
    assert (receipt.count, receipt.last_sequence) == (700, 701)
    assert [body for _, _, body in await stored(fast_js, "FAST")][1:] == [
        str(n) for n in range(700)
    ]


@pytest.mark.slow  # 3,000 items
async def test_the_client_stays_within_the_window_of_the_servers_acks(
    fast_js: JetStreamContext, nats_server: NatsServer, otel: Otel
) -> None:
    """An observer on the same server sees every batch message (with its batch sequence
    in the reply subject) and every ack: a message may run no more than ``flow *
    outstanding`` ahead of the last ack. The server hands an ack to the publisher and
    the observer one after the other, so on a busy machine the observer may see it
    after the messages the publisher sent on it: then the lead shows one window more."""
    observer = await nats.connect(nats_server.url)
    acked = 0
    lead = 0
    acks = 0
    over = 0

    async def watch(msg: Msg) -> None:
        nonlocal acked, lead, acks, over
        if msg.subject.startswith("fast."):
            if msg.reply.endswith(".$FI"):
                seq = int(msg.reply.rsplit(".", 3)[1])
                lead = max(lead, seq - acked)
                over += seq - acked > 20
        elif (body := json.loads(msg.data)).get("type") == "ack":
            acks += 1
            acked = max(acked, body["seq"])

    await observer.subscribe("fast.>", cb=watch)
    await observer.subscribe("_INBOX.>", cb=watch)
    await observer.flush()
    publisher = jetstream.Publisher(fast_js, CODEC, telemetry=otel.telemetry)
    receipt = await publisher.publish_fast(items(3_000), flow=10, outstanding=2)
    await observer.flush()
    assert receipt.count == 3_000
    assert acks >= 3_000 // 10 - 1  # the server acked every 10th, not fewer
    assert 10 < lead <= 40, lead  # it used the window, and no more
    assert over < 3_000 // 20, over  # past it only when the observer saw an ack late
    spans = [s for s in otel.spans() if s.name == "send fast.0"]
    assert len(spans) == 1_000
    assert all(s.status.status_code != StatusCode.ERROR for s in spans)
    await observer.close()


# ------------------------------------------------------------------ refusals


async def test_a_stream_without_allow_batched_is_refused_by_name(
    bare_js: JetStreamContext,
) -> None:
    await jetstream.ensure_stream(bare_js, name="SLOW", subjects=["slow.>"])
    publisher = jetstream.Publisher(bare_js, CODEC)
    with pytest.raises(StreamFeatureDisabled, match="'SLOW' does not allow fast") as caught:
        await publisher.publish_fast(items(10, "slow"))
    assert (caught.value.stream, caught.value.setting) == ("SLOW", "allow_batched")
    assert await messages_in(bare_js, "SLOW") == 0


async def test_items_outside_the_stream(fast_js: JetStreamContext) -> None:
    await jetstream.ensure_stream(fast_js, name="OTHER", subjects=["other.>"])
    publisher = jetstream.Publisher(fast_js, CODEC)
    with pytest.raises(SubjectOutsideStream, match=r"'other\.1'.*\['fast\.>'\]") as caught:
        await publisher.publish_fast([Outgoing("other.1", "x")], stream="FAST")
    assert caught.value.stream == "FAST"
    with pytest.raises(FastBatchError, match=r"item 3 is bad input") as gap:
        await publisher.publish_fast([*items(3), Outgoing("other.1", "x"), *items(3)])
    assert (gap.value.stored, gap.value.index, gap.value.may_be_stored) == (3, 3, False)
    assert isinstance(gap.value.__cause__, SubjectOutsideStream)
    assert await messages_in(fast_js, "FAST") == 3
    assert await messages_in(fast_js, "OTHER") == 0
    with pytest.raises(PublishError, match="no stream answered"):
        await publisher.publish_fast([Outgoing("nowhere.1", "x")])


async def test_a_server_older_than_2_14_is_refused_before_sending() -> None:
    binary = await asyncio.to_thread(server_binary, "2.11.11")
    async with NatsServer(binary=binary) as server:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name="OLD", subjects=["old.>"])
        publisher = jetstream.Publisher(js, CODEC)
        with pytest.raises(FeatureUnsupported, match=r"fast batch .* needs nats-server 2\.14"):
            await publisher.publish_fast(items(5, "old"))
        assert await messages_in(js, "OLD") == 0
        await nc.close()


# ------------------------------------------------------------------ ended early


async def test_a_stream_limit_hit_mid_batch_reports_the_gap(
    bare_js: JetStreamContext, otel: Otel
) -> None:
    await jetstream.ensure_stream(
        bare_js, name="CAP", subjects=["cap.>"], allow_batched=True, max_msgs=250, discard="new"
    )
    publisher = jetstream.Publisher(bare_js, CODEC, telemetry=otel.telemetry)
    with pytest.raises(FastBatchError) as caught:
        await publisher.publish_fast(items(1_000, "cap"), flow=64)
    gap = caught.value
    assert (gap.stream, gap.stored, gap.index, gap.may_be_stored) == ("CAP", 250, 250, False)
    assert gap.last_sequence == 250
    assert "items 0..249 are stored, in order" in str(gap)
    assert "items from 250 on are not stored" in str(gap)
    assert isinstance(gap.__cause__, PublishError)
    assert [body for _, _, body in await stored(bare_js, "CAP")] == [f"m{n}" for n in range(250)]
    failed = [s for s in otel.spans() if s.status.status_code == StatusCode.ERROR]
    assert failed, "the items not stored end their spans with the error"
    assert len(otel.spans()) - len(failed) == 250


@pytest.mark.slow  # a refused last item: waits out the 5 s ack timeout
async def test_a_message_too_large_mid_batch_or_last_reports_the_gap(
    fast_js: JetStreamContext,
) -> None:
    publisher = jetstream.Publisher(fast_js, CODEC)
    big = Outgoing("fast.big", "x" * 2_000)
    batch = items(600)
    with pytest.raises(FastBatchError, match=r"item 400 \(to 'fast\.big'\) was refused") as mid:
        await publisher.publish_fast([*batch[:400], big, *batch[400:]])
    assert (mid.value.stored, mid.value.index, mid.value.err_code) == (400, 400, 10054)
    assert await messages_in(fast_js, "FAST") == 400
    with pytest.raises(FastBatchError, match=r"item 3 \(to 'fast\.big'\)") as last:
        await publisher.publish_fast([*items(3, ids="last"), big])
    assert (last.value.stored, last.value.last_sequence) == (3, 403)
    with pytest.raises(FastBatchError, match="none is stored") as first:
        await publisher.publish_fast([big, *items(3)])
    assert (first.value.stored, first.value.index) == (0, 0)
    assert await messages_in(fast_js, "FAST") == 403


async def test_a_connection_closed_mid_batch_says_what_may_be_stored(
    fast_js: JetStreamContext, nc: Client, nats_server: NatsServer
) -> None:
    publisher = jetstream.Publisher(fast_js, CODEC)

    async def produce() -> AsyncIterator[Outgoing[str]]:
        for n in range(5_000):
            if n == 3_000:
                await nc.close()
            yield Outgoing(f"fast.{n % 3}", f"m{n}")

    with pytest.raises(FastBatchError, match="may or may not be stored") as caught:
        await publisher.publish_fast(produce(), flow=100)
    gap = caught.value
    assert gap.may_be_stored
    assert gap.index is not None
    assert gap.sent == gap.index + 1
    async with await nats.connect(nats_server.url) as other:
        held = [body for _, _, body in await stored(other.jetstream(), "FAST")]
    assert held == [f"m{n}" for n in range(len(held))]  # the first ones, in order
    assert gap.stored <= len(held) <= gap.sent


async def test_bad_arguments(fast_js: JetStreamContext) -> None:
    publisher = jetstream.Publisher(fast_js, CODEC)
    with pytest.raises(ValueError, match="at least one"):
        await publisher.publish_fast([])
    with pytest.raises(ValueError, match="outstanding"):
        await publisher.publish_fast(items(1), outstanding=4)
    with pytest.raises(TypeError, match="Outgoing"):
        await publisher.publish_fast(["fast.1"])  # type: ignore[list-item]


@pytest.mark.slow  # a 1 s schedule
async def test_an_item_with_a_schedule_is_stored_as_a_schedule(bare_js: JetStreamContext) -> None:
    """``Outgoing(schedule=, target=)`` in a fast batch is a schedule, not a plain message."""
    await jetstream.ensure_stream(
        bare_js,
        name="FASTSCHED",
        subjects=["plan.>", "due.>"],
        allow_batched=True,
        allow_msg_schedules=True,
    )
    sub = await bare_js.pull_subscribe("due.>", stream="FASTSCHED")
    publisher = jetstream.Publisher(bare_js, CODEC)
    soon = jetstream.Schedule.at(datetime.now(UTC) + timedelta(seconds=1))
    await publisher.publish_fast(
        [
            Outgoing("plan.a", "planned", schedule=soon, target="due.a"),
            Outgoing("due.now", "now"),
        ]
    )
    first = (await sub.fetch(1, timeout=5))[0]
    assert (first.subject, first.data) == ("due.now", b"now")
    await first.ack()
    fired = (await sub.fetch(1, timeout=5))[0]
    assert (fired.subject, fired.data) == ("due.a", b"planned")
    assert fired.headers is not None
    assert fired.headers.get("Nats-Scheduler") == "plan.a"


# ------------------------------------------------------------------ the review's cases


async def test_an_item_over_max_payload_mid_batch_ends_it_with_the_items_before_stored(
    fast_js: JetStreamContext, nc: Client
) -> None:
    """The client refuses a message over ``max_payload`` before sending it; the item
    before it goes as the commit, so the batch ends stored and reported, not raised
    past as a bare ``PayloadTooLarge`` with the batch left open."""
    publisher = jetstream.Publisher(fast_js, CODEC)
    big = Outgoing("fast.big", "x" * (nc.max_payload + 1))
    batch = items(700)
    with pytest.raises(FastBatchError, match=r"item 600 is bad input") as caught:
        await publisher.publish_fast([*batch[:600], big, *batch[600:]])
    gap = caught.value
    assert (gap.stored, gap.sent, gap.index, gap.may_be_stored) == (600, 600, 600, False)
    assert gap.last_sequence == 600
    assert isinstance(gap.__cause__, PayloadTooLarge)
    assert "items from 600 on are not stored" in str(gap)
    assert await messages_in(fast_js, "FAST") == 600
    assert not nc.is_closed


@pytest.mark.parametrize("source", ["async", "sync"])
async def test_a_source_that_raises_midway_commits_what_came_and_says_so(
    fast_js: JetStreamContext, nc: Client, source: str
) -> None:
    publisher = jetstream.Publisher(fast_js, CODEC)

    def rows() -> Iterator[Outgoing[str]]:
        for n in range(3_000):
            if n == 2_345:
                raise RuntimeError("source broke")
            yield Outgoing(f"fast.{n % 3}", f"m{n}")

    async def arows() -> AsyncIterator[Outgoing[str]]:
        for row in rows():
            yield row

    messages = arows() if source == "async" else rows()
    with pytest.raises(FastBatchError, match=r"the message source raised at item 2345") as caught:
        await publisher.publish_fast(messages)
    gap = caught.value
    assert (gap.stored, gap.sent, gap.index, gap.may_be_stored) == (2_345, 2_345, 2_345, False)
    assert isinstance(gap.__cause__, RuntimeError)
    await nc.flush()
    held = [body for _, _, body in await stored(fast_js, "FAST")]
    assert held == [f"m{n}" for n in range(2_345)]  # committed: nothing more comes later


def batch_limits(tmp_path: Path, limits: str) -> list[str]:
    """Server arguments for a configuration with these JetStream batch limits."""
    conf = tmp_path / "batch.conf"
    conf.write_text(f"jetstream {{ limits {{ batch {{ {limits} }} }} }}\n")
    return ["-c", str(conf)]


@pytest.mark.slow  # items 1.3 s apart, past the server's 1 s batch timeout
async def test_a_slow_source_keeps_the_batch_alive_by_pinging(tmp_path: Path) -> None:
    """The server forgets a batch after its batch timeout (1 s here) without a message.
    With pings every 0.4 s at most, a source that takes 1.3 s per item is fine; without
    them the batch is forgotten, and the report says so, not that an item was refused."""

    async def slow(tag: str, pause: float) -> AsyncIterator[Outgoing[str]]:
        for n in range(3):
            if n:
                await asyncio.sleep(pause)
            yield Outgoing(f"fast.{tag}", str(n))

    async with NatsServer(args=batch_limits(tmp_path, 'timeout: "1s"')) as server:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name="FAST", subjects=["fast.>"], allow_batched=True)
        publisher = jetstream.Publisher(js, CODEC)
        receipt = await publisher.publish_fast(slow("kept", 1.3), keepalive=0.4)
        assert (receipt.count, receipt.last_sequence) == (3, 3)

        with pytest.raises(FastBatchError, match="the server forgot the batch") as caught:
            await publisher.publish_fast(slow("forgot", 1.5), keepalive=30)
        gap = caught.value
        assert "refused" not in str(gap)
        assert "item 0 may or may not be stored" in str(gap)
        assert "items from 1 on are not stored" in str(gap)
        assert (gap.stored, gap.unknown_until, gap.may_be_stored) == (0, 1, True)
        assert await messages_in(js, "FAST") == 4  # the three, and item 0 of the second
        await nc.close()


async def test_a_cancelled_batch_is_ended_at_the_server_and_too_many_batches_is_transient(
    tmp_path: Path,
) -> None:
    """A cancelled batch sends an end, so the server commits it (its PubAck comes) and
    does not hold it open until its timeout; a batch refused because the stream has
    as many open as the server allows may be retried."""
    async with NatsServer(args=batch_limits(tmp_path, "max_inflight_per_stream: 1")) as server:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name="FAST", subjects=["fast.>"], allow_batched=True)
        publisher = jetstream.Publisher(js, CODEC)
        pubacks: asyncio.Queue[dict[str, object]] = asyncio.Queue()

        async def watch(msg: Msg) -> None:
            body = json.loads(msg.data)
            if "batch" in body:
                await pubacks.put(body)

        observer = await nats.connect(server.url)
        await observer.subscribe("_INBOX.>", cb=watch)
        await observer.flush()
        waiting = asyncio.Event()

        async def stalls() -> AsyncIterator[Outgoing[str]]:
            for n in range(2):
                yield Outgoing("fast.a", str(n))
            waiting.set()  # item 0 is sent, item 1 is held back as the look-ahead
            await asyncio.Event().wait()
            yield Outgoing("fast.a", "never")

        open_batch = asyncio.create_task(publisher.publish_fast(stalls()))
        await waiting.wait()
        with pytest.raises(FastBatchError, match="too many inflight") as busy:
            await publisher.publish_fast([Outgoing("fast.b", "x")])
        assert busy.value.err_code == 10211
        assert isinstance(busy.value.__cause__, PublishError)
        assert not busy.value.permanent
        assert not busy.value.__cause__.permanent

        open_batch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await open_batch
        puback = await asyncio.wait_for(pubacks.get(), 5)
        assert (puback["count"], puback["seq"]) == (1, 1)
        receipt = await publisher.publish_fast([Outgoing("fast.b", "x")])
        assert receipt.count == 1
        await observer.close()
        await nc.close()


async def test_a_refusal_mid_batch_names_the_stream_and_keeps_the_err_code(
    fast_js: JetStreamContext,
) -> None:
    publisher = jetstream.Publisher(fast_js, CODEC)
    with pytest.raises(FastBatchError) as ttl:
        await publisher.publish_fast([Outgoing("fast.t", "0"), Outgoing("fast.t", "1", ttl=5)])
    cause = ttl.value.__cause__
    assert isinstance(cause, StreamFeatureDisabled)
    assert (cause.stream, cause.setting) == ("FAST", "allow_msg_ttl")
    assert "(unknown)" not in str(ttl.value)
    assert ttl.value.err_code == 10166

    expecting = {"Nats-Expected-Last-Sequence": "99"}
    batch = [*items(2), Outgoing("fast.x", "2", server_headers=expecting), *items(2, ids="b")]
    with pytest.raises(FastBatchError) as expectation:
        await publisher.publish_fast(batch)
    assert isinstance(expectation.value.__cause__, ExpectationFailed)
    assert (expectation.value.index, expectation.value.err_code) == (2, 10071)


async def test_a_closed_publisher_ends_the_batch_as_closed_not_as_bad_input(
    fast_js: JetStreamContext,
) -> None:
    publisher = jetstream.Publisher(fast_js, CODEC)

    async def produce() -> AsyncIterator[Outgoing[str]]:
        for n in range(500):
            if n == 300:
                await publisher.close()
            yield Outgoing("fast.a", str(n))

    with pytest.raises(FastBatchError, match="the publisher was closed before item 300") as gap:
        await publisher.publish_fast(produce())
    assert "bad input" not in str(gap.value)
    assert (gap.value.stored, gap.value.index) == (300, 300)


async def test_a_batch_of_one_duplicate_stores_nothing_anew(fast_js: JetStreamContext) -> None:
    publisher = jetstream.Publisher(fast_js, CODEC)
    await publisher.publish_fast(items(3))
    again = await publisher.publish_fast(items(3)[1:2])
    assert (again.count, again.last_sequence) == (1, 0)
    assert await messages_in(fast_js, "FAST") == 3


async def test_a_no_ack_stream_is_not_waited_on_for_a_go_ahead(bare_js: JetStreamContext) -> None:
    """A ``no_ack`` stream sends no go-ahead for the first message: the client asks for
    it at once instead of after a whole timeout."""
    await jetstream.ensure_stream(
        bare_js, name="QUIET", subjects=["quiet.>"], allow_batched=True, no_ack=True
    )
    publisher = jetstream.Publisher(bare_js, CODEC, timeout=3)
    started = time.perf_counter()
    receipt = await publisher.publish_fast(items(100, "quiet"))
    assert receipt.count == 100
    assert time.perf_counter() - started < 1.5


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"timeout": 0}, ValueError),
        ({"timeout": -1}, ValueError),
        ({"timeout": float("nan")}, ValueError),
        ({"keepalive": 0}, ValueError),
        ({"flow": 2.5}, TypeError),
        ({"flow": True}, TypeError),
        ({"outstanding": 2.0}, TypeError),
        ({"flow": 0}, ValueError),
    ],
)
async def test_bad_numbers_are_refused_before_sending(
    fast_js: JetStreamContext, arguments: dict[str, float], error: type[Exception]
) -> None:
    publisher = jetstream.Publisher(fast_js, CODEC)
    with pytest.raises(error, match=next(iter(arguments))):
        await publisher.publish_fast(items(5), **arguments)  # type: ignore[arg-type]
    assert await messages_in(fast_js, "FAST") == 0


def test_the_errors_are_the_projects_own() -> None:
    assert goflux.FastBatchError is FastBatchError
    assert goflux.SubjectOutsideStream is SubjectOutsideStream
    assert issubclass(SubjectOutsideStream, InvalidSubject)
    assert issubclass(FastBatchError, PublishError)


async def test_an_item_tipped_over_max_payload_by_its_trace_context_ends_the_batch(
    fast_js: JetStreamContext, nc: Client, otel: Otel
) -> None:
    """An item that fits before its trace context is injected, but not after: the
    batch is ended after the item before it (an end without a message), not raised
    past with the batch left open."""
    limit = nc.max_payload
    wire = outgoing("fast.big", None, None, jetstream=True)
    size = limit - 1_000
    while True:  # the largest body that fits with the headers before the trace context
        try:
            check_size("fast.big", wire, b"x" * (size + 1), limit)
        except PayloadTooLarge:
            break
        size += 1
    publisher = jetstream.Publisher(fast_js, CODEC, telemetry=otel.telemetry)
    batch = [*items(5), Outgoing("fast.big", "x" * size), *items(5, ids="after")]
    with pytest.raises(FastBatchError, match=r"item 5 is bad input") as caught:
        await publisher.publish_fast(batch)
    gap = caught.value
    assert (gap.stored, gap.sent, gap.index, gap.may_be_stored) == (5, 5, 5, False)
    assert isinstance(gap.__cause__, PayloadTooLarge)
    assert await messages_in(fast_js, "FAST") == 5
