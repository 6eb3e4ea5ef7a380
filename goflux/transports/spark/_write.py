"""Publish Spark rows to JetStream as typed messages, idempotently.

:func:`foreach_batch_publisher` makes the function for ``writeStream.foreachBatch``;
:func:`write_stream` sets up the ``goflux-jetstream`` stream sink. Every row becomes
one message with a deterministic message ID: the value of a key column, or ``<query
id>:<batch id>:<partition>:<row>``. A replayed micro-batch publishes the same IDs,
and the server stores each ID once within the stream's duplicate window (default two
minutes), so the output holds every row exactly once. Executors publish their
partitions in parallel (:mod:`._datasource.writer`), each with a bounded window of
PubAcks outstanding; any refused publish fails the batch (Spark retries it, and the
retry is de-duplicated).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, Unpack

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.readwriter import DataStreamWriter

from goflux._codecs import BytesCodec, JsonCodec
from goflux.transports.spark._codec import PayloadCodec, sink_payload_type
from goflux.transports.spark._connection import (
    ConnectionSettings,
    connection_options,
    require_keywords,
)
from goflux.transports.spark._datasource.source import FORMAT, register
from goflux.transports.spark._datasource.writer import publish_partition, task
from goflux.transports.spark._errors import SourceOptionError, SparkError
from goflux.transports.spark._options import SinkOptions, dump_type
from goflux.transports.spark._schema import PayloadColumns
from goflux.transports.spark._session import is_connect

__all__ = (
    "BatchPublisher",
    "SinkStats",
    "WriteOptions",
    "foreach_batch_publisher",
    "write_stream",
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
            partition = task().partitionId()
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


class WriteOptions(ConnectionSettings, total=False):
    """The keyword arguments :func:`foreach_batch_publisher` and :func:`write_stream` share.

    ``servers`` is required, and one of ``subject`` / ``subject_column``; what each
    means, and its default, is in :func:`foreach_batch_publisher`'s arguments. The
    connection settings are those of :class:`ConnectionSettings`.
    """

    subject: str | None
    subject_column: str | None
    key_column: str | None
    id_prefix: str | None
    window: int
    timeout: float


_SINK_KEYS = ("subject", "subject_column", "key_column", "id_prefix", "window", "timeout")


def foreach_batch_publisher(
    *, codec: PayloadCodec[T] | BytesCodec, **options: Unpack[WriteOptions]
) -> BatchPublisher[T]:
    """Return the ``foreachBatch`` function publishing each row as one message.

    With a codec that states its payload type ``T`` (``JsonCodec(T)``,
    ``MsgpackCodec(T)``, ``pipe(MsgpackCodec(T), Gzip())``, any
    :class:`PayloadCodec`), the row's columns named like ``T``'s fields (extra
    columns are ignored) are validated into a ``T``, which the codec encodes on the
    executors (it is pickled with cloudpickle, so their Python needs its library
    too); with ``BytesCodec()`` the binary ``value`` column is published as it is.
    Message IDs are the ``key_column``'s values, or ``<query id>:<batch
    id>:<partition>:<row>`` (stable when a replayed batch has the same partitioning;
    a key column is stable whatever the partitioning). On Spark Connect the function
    runs on the server, where it cannot see its query: give ``key_column`` or
    ``id_prefix`` there (see :class:`BatchPublisher` for where its statistics go).
    Use one publisher per query.

    Args:
        codec: A codec with a payload type (``.type``), or ``BytesCodec()``.
        **options: :class:`WriteOptions`, shared with :func:`write_stream`:

            - ``servers`` (required): NATS server URL(s).
            - ``subject``: The subject of every message.
            - ``subject_column``: A column of subjects (instead of ``subject``).
            - ``key_column``: The column of message IDs (default: positional IDs).
            - ``id_prefix``: Replaces the query ID in positional IDs (needed outside a
              query without ``key_column``). Each ``(id_prefix, batch_id)`` must name
              one batch for good: reusing it within the duplicate window drops the
              new messages as duplicates (with ``run_micro_batches``, use
              ``key_column="message_key"``).
            - ``window``: Most PubAcks outstanding per task (default 1,000).
            - ``timeout``: Seconds to wait for each PubAck (default 10).
            - ``user``, ``password``, ``token``, ``creds_file``, ``nkey_seed_file``,
              ``tls_ca_file``, ``tls_cert_file``, ``tls_key_file``,
              ``connect_timeout``: how to connect (:class:`ConnectionSettings`).

    Raises:
        TypeError: ``servers`` is missing, or an option is unknown; or ``codec`` is
            neither a ``BytesCodec`` nor a codec that states its payload type
            (``.type``).
        SourceOptionError: Both or neither of ``subject`` / ``subject_column``, a
            bad ``window`` / ``timeout``, or a ``codec`` that cannot be pickled.
        InvalidSubject: ``subject`` is not a valid publish subject.
        SchemaError: The payload type has no Spark schema.
    """
    return _batch_publisher("foreach_batch_publisher", codec, options)


def _batch_publisher(
    caller: str, codec: PayloadCodec[T] | BytesCodec, options: WriteOptions
) -> BatchPublisher[T]:
    """The publisher of a ``foreach_batch_publisher`` or ``write_stream`` call."""
    require_keywords(caller, options, "servers")
    payload_type = sink_payload_type(codec)
    if payload_type is not None:
        PayloadColumns(payload_type)
    connection: dict[str, Any] = dict(options)
    sink = {key: connection.pop(key) for key in _SINK_KEYS if key in connection}
    # A JsonCodec is made again from its type where rows are encoded (the same bytes:
    # strict=True changes only decoding); any other codec goes along, pickled.
    shipped: object = codec
    if payload_type is None or type(shipped) is JsonCodec:
        shipped = None
    if shipped is not None:
        dump_type(shipped, "codec")  # one that cannot be pickled fails here, not in a task
    return BatchPublisher(
        SinkOptions(
            connection=connection_options(caller, connection),
            payload_type=payload_type,
            codec=shipped,
            **sink,
        )
    )


def write_stream(
    df: DataFrame, *, codec: PayloadCodec[T] | BytesCodec, **options: Unpack[WriteOptions]
) -> DataStreamWriter:
    """``df.writeStream`` set up for the ``goflux-jetstream`` sink.

    The same publishing as :func:`foreach_batch_publisher` (arguments alike:
    :class:`WriteOptions`), as a streaming sink; add ``.option("checkpointLocation",
    ...)`` and ``.start()``.

    Raises:
        TypeError: ``servers`` is missing, or an option is unknown; or ``codec`` is
            neither a ``BytesCodec`` nor a codec that states its payload type
            (``.type``).
        SourceOptionError: See :func:`foreach_batch_publisher`.
        SchemaError: The payload type has no Spark schema.
    """
    publisher = _batch_publisher("write_stream", codec, options)
    publisher.options.check_columns(df.schema)
    register(df.sparkSession)
    return df.writeStream.format(FORMAT).options(**publisher.options.to_options())
