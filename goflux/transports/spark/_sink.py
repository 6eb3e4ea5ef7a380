"""Publish Spark rows to JetStream as typed messages, idempotently.

Every row becomes one message with a deterministic message ID: the value of a key
column, or ``<query id>:<batch id>:<partition>:<row>``. A replayed micro-batch
publishes the same IDs, and the server stores each ID once within the stream's
duplicate window (default two minutes), so the output holds every row exactly once.
Executors publish their partitions in parallel, each with a bounded window of
PubAcks outstanding; any refused publish fails the batch (Spark retries it, and the
retry is de-duplicated).
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import datasource as _datasource
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import BinaryType, StructType

from goflux._codecs import BytesCodec, Codec, JsonCodec
from goflux._errors import SourceOptionError, SparkError
from goflux._subjects import validate_subject
from goflux.transports.jetstream._publisher import Outgoing, Publisher
from goflux.transports.spark._connection import ConnectionOptions, TaskLoop
from goflux.transports.spark._options import (
    dump_type,
    load_type,
    parse_positive_float,
    parse_positive_int,
)
from goflux.transports.spark._schema import PayloadColumns
from goflux.transports.spark._session import is_connect

__all__ = (
    "BatchPublisher",
    "JetStreamStreamWriter",
    "PartitionResult",
    "SinkOptions",
    "SinkStats",
    "foreach_batch_publisher",
    "publish_partition",
)

T = TypeVar("T")
_log = logging.getLogger("goflux.transports.spark")
_RESULT_SCHEMA = "partition int, published long, duplicates long"
_RESULT_ARROW = pa.schema(
    [("partition", pa.int32()), ("published", pa.int64()), ("duplicates", pa.int64())]
)
_STATS_SCHEMA = "position long, batch_id long, published long, duplicates long"
_GLOBAL_TEMP = "global_temp"
_HISTORY_LIMIT = 1_000
_SINK_KEYS = frozenset(
    {
        "subject",
        "subjectcolumn",
        "payloadtype",
        "keycolumn",
        "idprefix",
        "window",
        "publishtimeout",
        "checkpointlocation",
        "path",
    }
)


@dataclass(frozen=True)
class SinkOptions:
    """How rows become messages.

    Attributes:
        connection: How to reach NATS.
        subject: The subject of every message (or None with ``subject_column``).
        subject_column: A column holding each row's subject.
        payload_type: The message type built from each row; None publishes the
            ``value`` column's bytes as they are (raw mode).
        key_column: A column whose value is each message's ID (it must identify the
            row across replays, whatever the partitioning); None: positional IDs.
        id_prefix: First part of positional IDs (default: the streaming query's ID).
        window: Most PubAcks outstanding per task.
        timeout: Seconds to wait for each PubAck.
    """

    connection: ConnectionOptions
    subject: str | None = None
    subject_column: str | None = None
    payload_type: Any = None
    key_column: str | None = None
    id_prefix: str | None = None
    window: int = 1_000
    timeout: float = 10.0

    def __post_init__(self) -> None:
        if (self.subject is None) == (self.subject_column is None):
            raise SourceOptionError("give either subject or subject_column")
        if self.subject is not None:
            validate_subject(self.subject)
        if self.window < 1:
            raise SourceOptionError(f"window must be >= 1, got {self.window}")
        if not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise SourceOptionError(f"timeout must be > 0 seconds, got {self.timeout}")

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Parse Spark's string options (the sink's and the connection's).

        Raises:
            SourceOptionError: An option is unknown, missing or malformed.
        """
        lowered = {key.lower(): value for key, value in options.items()}
        connection = ConnectionOptions.from_options(options)
        known = _SINK_KEYS | {key.lower() for key in connection.to_options()}
        known |= {"user", "password", "token", "credsfile", "nkeyseedfile"}
        known |= {"tlscafile", "tlscertfile", "tlskeyfile", "connecttimeout"}
        unknown = sorted(set(lowered) - known)
        if unknown:
            raise SourceOptionError(
                f"unknown option(s) {', '.join(unknown)} for the goflux JetStream sink"
            )
        values: dict[str, Any] = {"connection": connection}
        for option, name in (
            ("subject", "subject"),
            ("subjectcolumn", "subject_column"),
            ("keycolumn", "key_column"),
            ("idprefix", "id_prefix"),
        ):
            if lowered.get(option, "").strip():
                values[name] = lowered[option].strip()
        if lowered.get("payloadtype", "").strip():
            values["payload_type"] = load_type(lowered["payloadtype"].strip())
        if "window" in lowered:
            values["window"] = parse_positive_int("window", lowered["window"])
        if "publishtimeout" in lowered:
            values["timeout"] = parse_positive_float("publishTimeout", lowered["publishtimeout"])
        return cls(**values)

    def to_options(self) -> dict[str, str]:
        """These options as Spark string options (the inverse of :meth:`parse`)."""
        out = self.connection.to_options()
        for name, option in (
            ("subject", "subject"),
            ("subject_column", "subjectColumn"),
            ("key_column", "keyColumn"),
            ("id_prefix", "idPrefix"),
        ):
            value = getattr(self, name)
            if value is not None:
                out[option] = value
        if self.payload_type is not None:
            out["payloadType"] = dump_type(self.payload_type)
        out["window"] = str(self.window)
        out["publishTimeout"] = repr(self.timeout)
        return out

    def check_columns(self, schema: StructType) -> None:
        """Check that the DataFrame has the columns these options read.

        Raises:
            SourceOptionError: A named column is missing, or raw mode lacks a binary
                ``value`` column.
            SchemaError: The payload type has no Spark schema.
        """
        names = set(schema.fieldNames())
        for option, column in (
            ("subject_column", self.subject_column),
            ("key_column", self.key_column),
        ):
            if column is not None and column not in names:
                raise SourceOptionError(f"{option} {column!r} is not a column of the DataFrame")
        if self.payload_type is None:
            if "value" not in names or not isinstance(schema["value"].dataType, BinaryType):
                raise SourceOptionError(
                    "raw mode (no payload type) publishes a binary 'value' column, "
                    "which the DataFrame does not have"
                )
        else:
            missing = [n for n in PayloadColumns(self.payload_type).names if n not in names]
            if missing:
                raise SourceOptionError(
                    f"the DataFrame lacks column(s) {', '.join(missing)} of "
                    f"{getattr(self.payload_type, '__name__', self.payload_type)}"
                )


@dataclass(frozen=True)
class PartitionResult(WriterCommitMessage):
    """What one task published: messages sent and how many the server already had."""

    partition: int
    published: int
    duplicates: int


@dataclass(frozen=True)
class SinkStats:
    """What one micro-batch published.

    Attributes:
        batch_id: Spark's batch ID.
        published: Messages acknowledged by the server (new and duplicate).
        duplicates: Messages the server already had (a replayed batch: all of them).
    """

    batch_id: int
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
        TransportError: NATS cannot be reached.
    """
    codec: Codec[Any] = (
        BytesCodec() if options.payload_type is None else JsonCodec(options.payload_type)
    )
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


def _task() -> TaskContext:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("not running in a Spark task")
    return context


def _query_id(df: DataFrame) -> str | None:
    """The streaming query's ID from the driver thread running ``df``'s batch, if any.

    On Spark Connect a foreachBatch function runs in a server-side process whose
    session has no SparkContext and no trace of the query: None.
    """
    session = df.sparkSession
    if is_connect(session):
        return None
    query_id = session.sparkContext.getLocalProperty("sql.streaming.queryId")
    return str(query_id) if query_id else None


def _no_prefix(df: DataFrame) -> SourceOptionError:
    if is_connect(df.sparkSession):
        where = "on Spark Connect, where a foreachBatch function cannot see its query"
    else:
        where = "outside a streaming query"
    return SourceOptionError(
        f"positional message IDs need the streaming query's ID, which is not available "
        f"{where}; pass key_column= (a column naming each row) or id_prefix= (a name "
        "unique to this query and the same on every restart), or publish with "
        "write_stream(), whose tasks know the query"
    )


@dataclass
class BatchPublisher(Generic[T]):
    """The ``(DataFrame, batch_id)`` function for ``writeStream.foreachBatch``.

    Made by :func:`foreach_batch_publisher`. ``last`` and ``history`` report what each
    call published (``duplicates`` counts what the server had already stored), for
    the most recent 1,000 batches.

    On Spark Connect the function is pickled and runs in a server-side process. That
    copy records its history in the global temporary view
    ``global_temp.<stats_view>`` after every batch, and ``history`` on the client
    reads it through the active session: the same numbers, one query away.
    """

    options: SinkOptions
    stats_view: str = field(default_factory=lambda: f"goflux_sink_{uuid.uuid4().hex}")
    _history: list[SinkStats] = field(default_factory=list, init=False, repr=False)
    # Pickled (shipped to Spark Connect): the batches run in the copy, not here.
    _shipped: bool = field(default=False, init=False, repr=False)
    # This is the copy: it keeps its history where the original can read it.
    _copy: bool = field(default=False, init=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle a fresh copy that records its history in ``stats_view``."""
        self._shipped = True
        state = dict(self.__dict__)
        state.update(_history=[], _shipped=False, _copy=True)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore a pickled copy."""
        self.__dict__.update(state)

    @property
    def history(self) -> list[SinkStats]:
        """What each batch published, oldest first (the most recent 1,000 batches).

        Raises:
            SparkError: The publisher ran on Spark Connect and no session is active
                here to read its history with.
        """
        if self._shipped:
            return self._read_view(_active_session(self.stats_view))
        return list(self._history)

    @property
    def last(self) -> SinkStats | None:
        """The most recent batch's stats (see :attr:`history`)."""
        history = self.history
        return history[-1] if history else None

    def _read_view(self, session: SparkSession) -> list[SinkStats]:
        database = session.conf.get("spark.sql.globalTempDatabase", _GLOBAL_TEMP)
        view = f"{database}.{self.stats_view}"
        if not session.catalog.tableExists(view):
            return []
        rows = session.table(view).orderBy("position").collect()
        return [SinkStats(row.batch_id, row.published, row.duplicates) for row in rows]

    def _write_view(self, session: SparkSession) -> None:
        rows = [
            (position, stats.batch_id, stats.published, stats.duplicates)
            for position, stats in enumerate(self._history)
        ]
        session.createDataFrame(rows, _STATS_SCHEMA).createOrReplaceGlobalTempView(self.stats_view)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Publish every row of ``df``; raise if any publish fails (failing the batch).

        Raises:
            SourceOptionError: A column the options name is missing, or no ID prefix
                is known for positional IDs (outside a streaming query, or on Spark
                Connect) and there is no key column.
            Exception: Spark's error for a failed task (its message includes the
                :class:`PublishError`).
        """
        options = self.options
        options.check_columns(df.schema)
        prefix = options.id_prefix or _query_id(df)
        if prefix is None and options.key_column is None:
            raise _no_prefix(df)
        if self._copy and not self._history:
            # A new server-side copy (a restarted query): go on from what is recorded.
            self._history = self._read_view(df.sparkSession)
        base = f"{prefix}:{batch_id}"

        def publish(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            partition = _task().partitionId()
            published, duplicates = publish_partition(options, batches, f"{base}:{partition}")
            yield pa.RecordBatch.from_pylist(
                [{"partition": partition, "published": published, "duplicates": duplicates}],
                schema=_RESULT_ARROW,
            )

        rows = df.mapInArrow(publish, _RESULT_SCHEMA).collect()
        stats = SinkStats(
            batch_id,
            sum(row["published"] for row in rows),
            sum(row["duplicates"] for row in rows),
        )
        if stats.published and stats.duplicates == stats.published:
            known = any(seen.batch_id == batch_id for seen in self._history)
            if not known:
                _log.warning(
                    "batch %d: the server already had all %d messages. Fine if this batch "
                    "was published before (a replay); otherwise its message IDs collide "
                    "with earlier ones and its messages were dropped: use a key column, "
                    "or an id_prefix never used before",
                    batch_id,
                    stats.published,
                )
        self._history.append(stats)
        del self._history[:-_HISTORY_LIMIT]
        if self._copy:
            self._write_view(df.sparkSession)
        _log.info(
            "batch %d: published %d messages (%d duplicates)",
            batch_id,
            stats.published,
            stats.duplicates,
        )


def _active_session(view: str) -> SparkSession:
    try:
        return SparkSession.active()
    except Exception as exc:
        raise SparkError(
            f"this publisher ran on Spark Connect and records its history in "
            f"{_GLOBAL_TEMP}.{view}; no Spark session is active here to read it"
        ) from exc


def foreach_batch_publisher(
    *,
    servers: str | list[str] | tuple[str, ...],
    subject: str | None = None,
    codec: JsonCodec[T] | BytesCodec,
    key_column: str | None = None,
    subject_column: str | None = None,
    id_prefix: str | None = None,
    window: int = 1_000,
    timeout: float = 10.0,
    **connection: Any,
) -> BatchPublisher[T]:
    """Return the ``foreachBatch`` function publishing each row as one message.

    With ``JsonCodec(T)`` the row's columns named like ``T``'s fields (extra columns
    are ignored) are validated into a ``T`` and published as JSON; with
    ``BytesCodec()`` the binary ``value`` column is published as it is. Message IDs
    are the ``key_column``'s values, or ``<query id>:<batch id>:<partition>:<row>``
    (stable when a replayed batch has the same partitioning; a key column is stable
    whatever the partitioning). On Spark Connect the function runs on the server,
    where it cannot see its query: give ``key_column`` or ``id_prefix`` there (see
    :class:`BatchPublisher` for where its statistics go). Use one publisher per query.

    Args:
        servers: NATS server URL(s).
        subject: The subject of every message.
        codec: ``JsonCodec(T)`` or ``BytesCodec()``.
        key_column: The column of message IDs.
        subject_column: A column of subjects (instead of ``subject``).
        id_prefix: Replaces the query ID in positional IDs (needed outside a query
            without ``key_column``). Each ``(id_prefix, batch_id)`` must name one batch
            for good: reusing it within the duplicate window drops the new messages
            as duplicates (with ``run_micro_batches``, use ``key_column="message_key"``).
        window: Most PubAcks outstanding per task.
        timeout: Seconds to wait for each PubAck.
        **connection: Credentials and TLS, as for :func:`read_stream`.

    Raises:
        SourceOptionError: Both or neither of ``subject`` / ``subject_column``, or a
            bad ``window`` / ``timeout``.
        InvalidSubject: ``subject`` is not a valid publish subject.
        TypeError: ``codec`` is neither a ``JsonCodec`` nor a ``BytesCodec``.
        SchemaError: The payload type has no Spark schema.
    """
    if isinstance(codec, JsonCodec):
        payload_type: Any = codec.type
        PayloadColumns(payload_type)
    elif isinstance(codec, BytesCodec):
        payload_type = None
    else:
        raise TypeError(f"codec must be a JsonCodec or a BytesCodec, got {codec!r}")
    if isinstance(servers, str):
        servers = [servers]
    options = SinkOptions(
        connection=ConnectionOptions(servers=tuple(servers), **connection),
        subject=subject,
        subject_column=subject_column,
        payload_type=payload_type,
        key_column=key_column,
        id_prefix=id_prefix,
        window=window,
        timeout=timeout,
    )
    return BatchPublisher(options)


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
        context = _task()
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
