"""The ``goflux-jetstream`` stream sink's writer, and the publishing of one partition.

Every row becomes one message with a deterministic message ID: the value of a key
column, or ``<query id>:<batch id>:<partition>:<row>``. A replayed micro-batch
publishes the same IDs, and the server stores each ID once within the stream's
duplicate window (default two minutes), so the output holds every row exactly once.
Executors publish their partitions in parallel (:func:`publish_partition`, which
:func:`~goflux.transports.spark.foreach_batch_publisher` uses too), each with a
bounded window of PubAcks outstanding; any refused publish fails the batch (Spark
retries it, and the retry is de-duplicated).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import datasource as _datasource
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from goflux._codecs import BytesCodec, Codec, JsonCodec
from goflux.transports.jetstream._publisher import Outgoing, Publisher
from goflux.transports.spark._connection import TaskLoop
from goflux.transports.spark._errors import SourceOptionError
from goflux.transports.spark._options import SinkOptions
from goflux.transports.spark._schema import PayloadColumns

__all__ = ("JetStreamStreamWriter", "PartitionResult", "publish_partition", "task")

_log = logging.getLogger("goflux.transports.spark")


@dataclass(frozen=True)
class PartitionResult(WriterCommitMessage):
    """What one task published: messages sent and how many the server already had."""

    partition: int
    published: int
    duplicates: int


def _message_id(options: SinkOptions, row: Mapping[str, Any], position: str) -> str:
    if options.key_column is None:
        return position
    key = row[options.key_column]
    if key is None or key == "":
        raise SourceOptionError(
            f"key column {options.key_column!r} is empty in a row; every row needs a key "
            "(its message ID)"
        )
    return str(key)


def _outgoing(
    options: SinkOptions, batches: Iterable[pa.RecordBatch], prefix: str
) -> Iterator[Outgoing[Any]]:
    columns = PayloadColumns(options.payload_type) if options.payload_type is not None else None
    index = 0
    for batch in batches:
        for row in batch.to_pylist():
            subject = options.subject or row[options.subject_column]
            value = row["value"] if columns is None else columns.from_row(row)
            yield Outgoing(
                subject, value, message_id=_message_id(options, row, f"{prefix}:{index}")
            )
            index += 1


def publish_partition(
    options: SinkOptions, batches: Iterable[pa.RecordBatch], prefix: str
) -> tuple[int, int]:
    """Publish one task's rows; return (published, duplicates).

    ``prefix`` starts the positional message IDs (``<query>:<batch>:<partition>``).

    Raises:
        PublishError: A publish was refused or not acknowledged in time (nothing after
            it is left unsent without an error).
        DecodeError: A row is not a valid payload.
        EncodeError: The codec cannot encode a row's payload.
        TransportError: NATS cannot be reached.
    """
    codec: Codec[Any]
    if options.payload_type is None:
        codec = BytesCodec()
    else:
        codec = JsonCodec(options.payload_type) if options.codec is None else options.codec
    loop = TaskLoop()
    try:
        nc = loop.run(options.connection.connect(name="goflux-spark-writer"))
        try:
            publisher: Publisher[Any] = Publisher(nc.jetstream(), codec, timeout=options.timeout)
            receipts = loop.run(
                publisher.publish_many(_outgoing(options, batches, prefix), window=options.window)
            )
        finally:
            loop.run(nc.close())
    finally:
        loop.close()
    return len(receipts), sum(1 for receipt in receipts if receipt.duplicate)


def task() -> TaskContext:
    """The running Spark task's context.

    Raises:
        RuntimeError: Not inside a Spark task.
    """
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("not running in a Spark task")
    return context


# Arrow batches where PySpark has an Arrow stream writer; Rows before that.
_StreamWriterBase: type = getattr(
    _datasource, "DataSourceStreamArrowWriter", _datasource.DataSourceStreamWriter
)


_ROWS_PER_BATCH = 1_000


def _as_batches(items: Iterable[Any]) -> Iterator[pa.RecordBatch]:
    """Arrow batches from Arrow batches (PySpark >= 4.2) or from Rows (older)."""
    rows: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, pa.RecordBatch):
            yield item
            continue
        rows.append(item.asDict(recursive=True))
        if len(rows) >= _ROWS_PER_BATCH:
            yield pa.RecordBatch.from_pylist(rows)
            rows = []
    if rows:
        yield pa.RecordBatch.from_pylist(rows)


class JetStreamStreamWriter(_StreamWriterBase):  # type: ignore[misc]
    """``writeStream.format("goflux-jetstream")``: the same publishing as a stream sink.

    Message IDs are the ``keyColumn``'s values or ``<query id>:<batch id>:<partition>:
    <row>``; ``commit`` logs what each batch published.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._options = SinkOptions.parse(options)
        self._options.check_columns(schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PartitionResult:
        """Publish one partition on an executor.

        Raises:
            PublishError: A publish was refused or not acknowledged in time.
        """
        context = task()
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        prefix = self._options.id_prefix or context.getLocalProperty("sql.streaming.queryId")
        if batch_id is None or prefix is None:
            raise SourceOptionError(
                "the goflux-jetstream sink runs inside a streaming query (no batch or query "
                "ID in this task)"
            )
        partition = context.partitionId()
        published, duplicates = publish_partition(
            self._options, _as_batches(iterator), f"{prefix}:{batch_id}:{partition}"
        )
        return PartitionResult(partition, published, duplicates)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Log what the batch published."""
        done = [m for m in messages if isinstance(m, PartitionResult)]
        _log.info(
            "batch %d: published %d messages (%d duplicates)",
            batchId,
            sum(m.published for m in done),
            sum(m.duplicates for m in done),
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Log the failed batch (published messages stay; a retry de-duplicates them)."""
        _log.warning("batch %d failed; Spark will retry it (publishes are idempotent)", batchId)
