"""Feed any subscriber into a ``foreachBatch``-style function: :func:`run_micro_batches`.

For transports Spark cannot replay (a JetStream durable consumer, core NATS, an
in-process channel): messages are cut into micro-batches bounded by size and time,
each becomes a DataFrame handed to ``fn(df, batch_id)``, and the batch is acknowledged
only after ``fn`` returns (at-least-once: a failure or a crash before that hands the
whole batch back for redelivery, where the transport redelivers).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from goflux._compose.batches import micro_batches
from goflux._interfaces import Subscriber
from goflux._message import Message
from goflux.transports.spark._errors import SchemaError
from goflux.transports.spark._schema import PayloadColumns, arrow_schema

__all__ = ("MicroBatchStats", "run_micro_batches")

T = TypeVar("T")

_METADATA = [
    StructField("subject", StringType(), nullable=False),
    StructField("message_id", StringType(), nullable=True),
    StructField("stream", StringType(), nullable=True),
    StructField("seq", LongType(), nullable=True),
    StructField("timestamp", TimestampType(), nullable=True),
    StructField("num_delivered", LongType(), nullable=True),
    StructField("message_key", StringType(), nullable=False),
]


@dataclass
class MicroBatchStats:
    """What :func:`run_micro_batches` handed to its function.

    Attributes:
        batches: Batches processed (acknowledged).
        messages: Messages in those batches.
    """

    batches: int = 0
    messages: int = 0


class _Frames:
    """Turns a batch of messages into a DataFrame of the payload's columns + metadata."""

    def __init__(self, spark: SparkSession, payload_type: Any) -> None:
        self._spark = spark
        self._columns: PayloadColumns[Any] = PayloadColumns(payload_type)
        names = set(self._columns.names)
        clashes = sorted(names & {f.name for f in _METADATA})
        if clashes:
            raise SchemaError(
                f"payload column(s) {', '.join(clashes)} clash with the metadata columns "
                "subject, message_id, stream, seq, timestamp, num_delivered, message_key"
            )
        self.schema = StructType([*self._columns.struct.fields, *_METADATA])
        self._arrow = arrow_schema(self.schema)

    def frame(self, batch: Sequence[Message[Any]]) -> DataFrame:
        rows = []
        for message in batch:
            row = self._columns.to_row(message.payload)
            delivery = message.delivery
            row["subject"] = message.subject
            row["message_id"] = message.id
            if delivery is not None:
                row["stream"] = delivery.stream
                row["seq"] = delivery.stream_sequence
                row["timestamp"] = delivery.timestamp
                row["num_delivered"] = delivery.num_delivered
                row["message_key"] = f"{delivery.stream}:{delivery.stream_sequence}"
            else:
                row["message_key"] = message.id or uuid.uuid4().hex
            rows.append(row)
        table = pa.Table.from_pylist(rows, schema=self._arrow)
        return self._spark.createDataFrame(table)


def _call(
    fn: Callable[[DataFrame, int], object],
    frames: _Frames,
    batch: Sequence[Message[Any]],
    batch_id: int,
) -> None:
    fn(frames.frame(batch), batch_id)


async def _call_in_thread(
    fn: Callable[[DataFrame, int], object],
    frames: _Frames,
    batch: Sequence[Message[Any]],
    batch_id: int,
) -> None:
    """Run ``fn`` in a thread; if cancelled, wait for it before the batch is handed back.

    A thread cannot be interrupted: handing the batch back while ``fn`` still runs
    would let its redelivery be processed beside it.
    """
    work = asyncio.ensure_future(asyncio.to_thread(_call, fn, frames, batch, batch_id))
    try:
        await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(work)
        if not work.cancelled():
            work.exception()  # fn's outcome no longer matters; the batch goes back
        raise


def _payload_type(subscriber: object, given: Any) -> Any:
    if given is not None:
        return given
    if hasattr(subscriber, "payload_type"):  # a Key-Value watcher's Entry[V]: its own say
        declared = subscriber.payload_type
    else:  # the type its codec states (JsonCodec(T), MsgpackCodec(T), a pipe of one, ...)
        declared = getattr(getattr(subscriber, "codec", None), "type", None)
    if declared is not None:
        return declared
    raise TypeError(
        "cannot tell the payload type from this subscriber (its codec states none); "
        "pass payload_type= (the type its messages carry)"
    )


async def run_micro_batches(
    spark: SparkSession,
    subscriber: Subscriber[T],
    subject: str,
    fn: Callable[[DataFrame, int], object],
    *,
    max_messages: int = 1_000,
    max_wait: float = 1.0,
    payload_type: Any = None,
    max_batches: int | None = None,
    first_batch_id: int = 0,
    started: asyncio.Event | None = None,
) -> MicroBatchStats:
    """Run ``fn(df, batch_id)`` on micro-batches of the messages on ``subject``.

    Each batch (up to ``max_messages``, or what arrived within ``max_wait`` seconds of
    its first message) becomes a DataFrame with the payload's columns plus
    ``subject``, ``message_id``, ``stream``, ``seq``, ``timestamp`` and
    ``num_delivered`` (the last four from JetStream deliveries, else null; a
    redelivered batch shows ``num_delivered`` > 1), and ``message_key``: the same for
    every delivery of a message (``<stream>:<seq>`` for JetStream, else the message
    ID, else a fresh UUID). Publish results with ``foreach_batch_publisher(...,
    key_column="message_key")`` (or keys derived from it) so a redelivered batch is
    de-duplicated; batch IDs here restart at ``first_batch_id`` on every run, so they
    make no stable message IDs. ``fn`` runs in a worker thread (Spark calls
    block); when it returns, the batch is acknowledged. When it raises, the batch is
    handed back (nak: redelivered by transports that redeliver) and the error is
    raised here. Runs until cancelled (a running ``fn`` is waited for, then its batch
    handed back), or until ``max_batches`` batches are done.

    Args:
        spark: The session the DataFrames belong to.
        subscriber: Any goflux subscriber (JetStream, core NATS, channel).
        subject: The subject (pattern) to subscribe to.
        fn: The batch function, as for ``foreachBatch``.
        max_messages: Most messages per batch (a JetStream subscriber's
            ``max_in_flight`` must be at least twice this for full batches).
        max_wait: Seconds a batch waits for more messages after its first one.
        payload_type: The payload type; default: the type the subscriber's codec
            states (``.type``: ``JsonCodec(T)``, ``MsgpackCodec(T)``, a pipe of one).
        max_batches: Stop after this many batches.
        first_batch_id: The ID of the first batch (then counting up).
        started: Set once the subscription is live (messages published from then
            on are received).

    Raises:
        ValueError: ``max_messages`` or ``max_batches`` < 1, or ``max_wait`` is not a
            positive number.
        TypeError: The payload type is not given and cannot be told.
        SchemaError: The payload type has no Spark schema.
        Exception: Whatever ``fn`` raised (after the batch was handed back).
    """
    if max_batches is not None and max_batches < 1:
        raise ValueError(f"max_batches must be >= 1, got {max_batches}")
    frames = _Frames(spark, _payload_type(subscriber, payload_type))
    stats = MicroBatchStats()
    batch_id = first_batch_id
    async with micro_batches(
        subscriber, subject, max_messages=max_messages, max_wait=max_wait
    ) as batches:
        if started is not None:
            started.set()
        async for batch in batches:
            await _call_in_thread(fn, frames, batch, batch_id)
            stats.batches += 1
            stats.messages += len(batch)
            batch_id += 1
            if max_batches is not None and stats.batches >= max_batches:
                break
    return stats
