"""Publishing and inspecting streams from Spark tests (which are synchronous)."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import nats
import pytest
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pydantic import BaseModel
from pyspark.errors import PySparkException, StreamingQueryException
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

from goflux import Codec, Headers, JsonCodec
from goflux.transports import jetstream
from goflux.transports.spark._datasource.reader import ADMISSION_CONTROL

R = TypeVar("R")

needs_admission_control = pytest.mark.skipif(
    not ADMISSION_CONTROL,
    reason="batches of max_messages_per_trigger need admission control (PySpark 4.2+)",
)
"""For tests whose micro-batches come from ``max_messages_per_trigger``."""


class Line(BaseModel):
    sku: str
    quantity: int
    tags: list[str] = []


class Sale(BaseModel):
    """A payload with nested models and lists; no field clashes with metadata columns."""

    id: str
    customer: str
    amount: float
    lines: list[Line] = []
    placed: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    note: str | None = None


def sale(n: int) -> Sale:
    return Sale(
        id=f"s-{n}",
        customer=f"c-{n % 7}",
        amount=n * 1.25,
        lines=[Line(sku=f"k-{n % 5}", quantity=n % 3 + 1, tags=["a"] * (n % 2))],
        placed=datetime(2026, 1, 1, tzinfo=UTC).replace(microsecond=n % 1_000_000),
        note=None if n % 4 else f"note {n}",
    )


def on_server(url: str, work: Callable[[JetStreamContext], Awaitable[R]]) -> R:
    """Run ``work`` with a JetStream context on a fresh connection (Spark tests are sync)."""

    async def run() -> R:
        nc = await nats.connect(url)
        try:
            return await work(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(run())


async def _ensure(js: JetStreamContext, stream: str) -> None:
    await jetstream.ensure_stream(js, name=stream, subjects=[f"{stream.lower()}.>"])


def make_stream(url: str, stream: str) -> None:
    """Create ``stream`` on the subjects ``<stream>.>`` (lowercase)."""
    on_server(url, lambda js: _ensure(js, stream))


def publish(
    url: str,
    stream: str,
    values: Sequence[object],
    *,
    subjects: Sequence[str] | None = None,
    headers: Headers | None = None,
    codec: Codec[Any] | None = None,
) -> None:
    """Publish ``values`` to ``stream`` (created on ``<stream>.>`` if missing).

    As JSON, or with ``codec``.
    """
    targets = subjects or [f"{stream.lower()}.new"]

    async def work(js: JetStreamContext) -> None:
        await _ensure(js, stream)
        publisher = jetstream.Publisher(js, codec or JsonCodec(type(values[0])))
        await publisher.publish_many(
            (
                jetstream.Outgoing(targets[i % len(targets)], value, headers=headers)
                for i, value in enumerate(values)
            ),
            window=2_000,
        )

    on_server(url, work)


def publish_raw(url: str, stream: str, subject: str, bodies: Sequence[bytes]) -> None:
    """Publish raw bodies (no codec) to ``subject``."""

    async def work(js: JetStreamContext) -> None:
        await _ensure(js, stream)
        for body in bodies:
            await js.publish(subject, body)

    on_server(url, work)


def fetch_all(url: str, stream: str, subject: str, codec: Codec[R], count: int) -> list[R]:
    """The first ``count`` messages on ``subject`` of ``stream``, decoded with ``codec``.

    A goflux JetStream subscriber fetches them from a new durable consumer, as any
    service would; a message it cannot decode is left out (and terminated).
    """
    name = "reader-" + subject.replace(".", "-").replace("*", "any").replace(">", "all")

    async def work(js: JetStreamContext) -> list[R]:
        await jetstream.ensure_consumer(js, stream=stream, name=name, filter_subject=subject)
        subscriber = jetstream.Subscriber(js, codec, stream=stream, consumer=name)
        try:
            messages = await subscriber.fetch(count, expires=5)
            for message in messages:
                await message.ack()
        finally:
            await subscriber.close()
        return [message.payload for message in messages]

    return on_server(url, work)


def stream_state(url: str, stream: str) -> tuple[int, int, int]:
    """(messages, first_seq, last_seq) of ``stream``."""

    async def work(js: JetStreamContext) -> tuple[int, int, int]:
        state = (await js.stream_info(stream)).state
        return state.messages, state.first_seq, state.last_seq

    return on_server(url, work)


def purge(url: str, stream: str) -> None:
    """Delete every message of ``stream`` (sequences keep counting)."""
    on_server(url, lambda js: js.purge_stream(stream))


def bodies(url: str, stream: str) -> list[bytes]:
    """Every stored body of ``stream`` in sequence order (small streams only)."""

    async def work(js: JetStreamContext) -> list[bytes]:
        state = (await js.stream_info(stream)).state
        return [
            (await js.get_msg(stream, seq)).data or b""
            for seq in range(state.first_seq, state.last_seq + 1)
        ]

    return on_server(url, work)


def delete_stream(url: str, stream: str) -> None:
    """Delete ``stream`` and everything in it."""
    on_server(url, lambda js: js.delete_stream(stream))


def message_ids(url: str, stream: str) -> list[str]:
    """Every stored message's ``Nats-Msg-Id`` in sequence order, read by one consumer."""

    async def work(js: JetStreamContext) -> list[str]:
        count = (await js.stream_info(stream)).state.messages
        psub = await js.pull_subscribe(
            "", stream=stream, config=ConsumerConfig(ack_policy=AckPolicy.NONE)
        )
        ids: list[str] = []
        try:
            while len(ids) < count:
                batch = await psub.fetch(min(500, count - len(ids)), timeout=10)
                ids.extend((msg.headers or {}).get("Nats-Msg-Id", "") for msg in batch)
        finally:
            await psub.unsubscribe()
        return ids

    return on_server(url, work)


def published_during(url: str, subject: str, work: Callable[[], None]) -> list[Msg]:
    """Run ``work`` with a core NATS subscription to ``subject`` open; return what it got.

    Core NATS delivers every publish, including one the stream refuses as a duplicate:
    this is what a sink sent, not what the stream kept. ``work`` runs in this thread
    (Spark's session is per thread), the subscription on a loop in another; once
    ``work`` returns (its publishes acknowledged), a flush brings every message it
    published: the server sends the PONG after every message before it.
    """
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(step: Awaitable[R]) -> R:
        return asyncio.run_coroutine_threadsafe(_awaited(step), loop).result(timeout=30)

    try:
        nc = on_loop(nats.connect(url))
        try:
            sub = on_loop(nc.subscribe(subject))
            on_loop(nc.flush())  # subscribed on the server before anything is published
            work()
            on_loop(nc.flush())
            return [on_loop(sub.next_msg(timeout=1)) for _ in range(sub.pending_msgs)]
        finally:
            on_loop(nc.close())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


async def _awaited(step: Awaitable[R]) -> R:
    return await step


def forget_commit(checkpoint: Path, batch_id: int) -> None:
    """Delete a batch's commit (and its checksum), so a restart replays the batch."""
    (checkpoint / "commits" / str(batch_id)).unlink()
    (checkpoint / "commits" / f".{batch_id}.crc").unlink(missing_ok=True)


WORKER_START_FAILED = "to connect back"
"""Spark's failure when a Python worker misses its fixed 10 s to connect back.

PySpark 4.0 says "Python worker failed to connect back" or "Timed out while waiting
for the Python worker to connect back"; both end so.
"""

_WORKER_STARTS = 3
# What a step fails with: a PySparkException (every error on a Connect session, and
# on a classic one those PySpark converts), or py4j's error for the JVM exceptions a
# classic session passes on as they are (a plain SparkException from a query's start).
_STEP_ERRORS = (PySparkException, Py4JJavaError)


def worker_start_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is Spark's failure of a Python worker that connected back too late."""
    return WORKER_START_FAILED in str(exc)


def _again(attempt: int, exc: BaseException) -> bool:
    """Whether a step that failed with ``exc`` on ``attempt`` runs again (and say so)."""
    if attempt == _WORKER_STARTS or not worker_start_failed(exc):
        return False
    print(f"a Python worker missed Spark's 10 s; attempt {attempt + 1}", file=sys.stderr)
    return True


def starting_again(step: Callable[[], R]) -> R:
    """Run ``step``; run it again when a Python worker it started missed Spark's 10 s.

    Spark gives a Python worker (the one that plans a Python data source, runs a
    streaming source, or, on a Connect server, runs a query's foreachBatch function)
    a fixed 10 s to connect back, and no setting changes it; on a machine short of CPU
    (the full check runs the JVM tests niced, beside the other tests) a step can fail
    so before it did anything. Such a step is run again, as ``goflux demo`` does: for
    the steps it wraps (a batch read) nothing happened yet. Any other failure, or this
    one three times, is raised.
    """
    attempt = 1
    while True:
        try:
            return step()
        except _STEP_ERRORS as exc:
            if not _again(attempt, exc):
                raise
        attempt += 1


def run_to_end(writer: DataStreamWriter, checkpoint: Path | str) -> StreamingQuery:
    """Start ``writer`` with ``checkpoint`` and ``Trigger.AvailableNow``; return it ended.

    A start that failed because a Python worker missed Spark's fixed 10 s to connect
    back, and a query that failed so before its first batch, are started again from
    the same checkpoint (nothing ran). Any other failure, this one after a batch ran,
    or this one at the third start, fails the test. Works on a classic and on a
    Connect session.
    """
    writer = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    attempt = 1
    while True:
        try:
            query = writer.start()
        except _STEP_ERRORS as exc:
            if not _again(attempt, exc):
                raise
            attempt += 1
            continue
        try:
            query.awaitTermination()
        except StreamingQueryException as exc:
            started = bool(query.recentProgress)  # a batch ran: not a failed start
            if started or not _again(attempt, exc):
                raise
            attempt += 1
            continue
        assert query.exception() is None
        return query
