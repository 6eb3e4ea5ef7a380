"""``read_stream`` and ``read``: typed DataFrames over a JetStream stream."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession

from goflux._errors import SourceOptionError
from goflux.transports.spark._connection import ConnectionOptions
from goflux.transports.spark._datasource import FORMAT, register
from goflux.transports.spark._options import DEFAULT_MESSAGES_PER_PARTITION, SourceOptions
from goflux.transports.spark._rows import source_schema
from goflux.transports.spark._source import ADMISSION_CONTROL

__all__ = ("read", "read_stream")

_log = logging.getLogger("goflux.transports.spark")


def _options(
    payload_type: Any,
    *,
    servers: str | list[str] | tuple[str, ...],
    stream: str,
    subjects: str | list[str] | tuple[str, ...] | None,
    starting: Literal["earliest", "latest"] | int | datetime,
    ending: Literal["latest"] | int,
    max_messages_per_trigger: int | None,
    fail_on_data_loss: bool,
    include_headers: bool,
    on_decode_error: Literal["fail", "corrupt"],
    metadata_prefix: str,
    messages_per_partition: int,
    max_partitions: int,
    fetch_size: int,
    idle_timeout: float,
    connection: dict[str, Any],
) -> SourceOptions:
    if isinstance(servers, str):
        servers = [servers]
    if isinstance(subjects, str):
        subjects = [subjects]
    for name, value in (
        ("max_messages_per_trigger", max_messages_per_trigger),
        ("messages_per_partition", messages_per_partition),
        ("max_partitions", max_partitions),
        ("fetch_size", fetch_size),
    ):
        if value is not None and (isinstance(value, bool) or value < 1):
            raise SourceOptionError(f"{name} must be >= 1, got {value!r}")
    start: dict[str, Any]
    if isinstance(starting, datetime):
        if starting.tzinfo is None or starting.utcoffset() is None:
            raise SourceOptionError(
                f"starting must be a timezone-aware datetime, got naive {starting!r} "
                "(use datetime.now(UTC) or attach a tzinfo)"
            )
        start = {"starting_time": starting}
    elif starting in ("earliest", "latest") or (isinstance(starting, int) and starting >= 1):
        start = {"starting": starting}
    else:
        raise SourceOptionError(
            f"starting must be 'earliest', 'latest', a sequence >= 1 or a datetime, "
            f"got {starting!r}"
        )
    options = SourceOptions(
        connection=ConnectionOptions(servers=tuple(servers), **connection),
        stream=stream,
        subjects=tuple(subjects or ()),
        ending=ending,
        max_messages_per_trigger=max_messages_per_trigger,
        fail_on_data_loss=fail_on_data_loss,
        include_headers=include_headers,
        on_decode_error=on_decode_error,
        payload_type=payload_type,
        metadata_prefix=metadata_prefix,
        messages_per_partition=messages_per_partition,
        max_partitions=max_partitions,
        fetch_size=fetch_size,
        idle_timeout=idle_timeout,
        **start,
    )
    # Round-trip through Spark's string options now, so bad input fails here, not in
    # the middle of a query.
    options = SourceOptions.parse(options.to_options())
    source_schema(options)
    return options


def read_stream(
    spark: SparkSession,
    payload_type: Any,
    *,
    servers: str | list[str] | tuple[str, ...],
    stream: str,
    subjects: str | list[str] | tuple[str, ...] | None = None,
    starting: Literal["earliest", "latest"] | int | datetime = "earliest",
    max_messages_per_trigger: int | None = None,
    fail_on_data_loss: bool = True,
    include_headers: bool = False,
    on_decode_error: Literal["fail", "corrupt"] = "fail",
    metadata_prefix: str = "",
    messages_per_partition: int = DEFAULT_MESSAGES_PER_PARTITION,
    max_partitions: int = 64,
    fetch_size: int = 2_000,
    idle_timeout: float = 30.0,
    **connection: Any,
) -> DataFrame:
    """A streaming DataFrame of the messages of ``stream``, one row per message.

    Columns: the fields of ``payload_type`` (decoded as JSON, as ``JsonCodec`` does),
    then ``subject``, ``stream``, ``seq`` and ``timestamp``; with ``payload_type=None``
    a ``value`` bytes column replaces the fields (raw mode). Offsets are stream
    sequences kept in the query's checkpoint: a restarted query reads nothing twice
    and loses nothing (exactly-once processing for limits-retention streams).

    Args:
        spark: The session (see :func:`local_session` for local runs).
        payload_type: The payload type, or None for raw bytes.
        servers: NATS server URL(s).
        stream: The JetStream stream to read.
        subjects: Only messages on these subjects (wildcards allowed).
        starting: Where a new query starts: ``"earliest"`` (default), ``"latest"``, a
            stream sequence, or a datetime (the first message stored at or after it).
            A query restarted from its checkpoint continues where it stopped.
        max_messages_per_trigger: At most this many stream sequences per micro-batch
            (PySpark 4.2+; ``Trigger.AvailableNow`` honours it too). Older PySpark has
            no admission control and reads everything available per batch; a warning
            is logged when it is given there.
        fail_on_data_loss: Fail the query when messages it has not read yet were
            deleted (the default); False skips to what is still stored.
        include_headers: Add ``headers``: ``array<struct<key, value>>`` with every
            header line as received, repeated names kept.
        on_decode_error: ``"fail"`` the batch on an undecodable payload, or
            ``"corrupt"``: null payload columns and the bytes in ``_corrupt``.
        metadata_prefix: Prefix for the metadata column names (when the payload has a
            field named like one of them).
        messages_per_partition: Sequences read by one Spark task.
        max_partitions: Most tasks per micro-batch.
        fetch_size: Messages per pull request and per Arrow batch in a task.
        idle_timeout: Seconds a task waits for the next message before failing.
        **connection: ``user``, ``password``, ``token``, ``creds_file``,
            ``nkey_seed_file``, ``tls_ca_file``, ``tls_cert_file``, ``tls_key_file``,
            ``connect_timeout`` (see :class:`ConnectionOptions`).

    Raises:
        SchemaError: ``payload_type`` has no Spark schema.
        SourceOptionError: An option is malformed.
        InvalidSubject: A subject filter is not a valid pattern.
    """
    options = _options(
        payload_type,
        servers=servers,
        stream=stream,
        subjects=subjects,
        starting=starting,
        ending="latest",
        max_messages_per_trigger=max_messages_per_trigger,
        fail_on_data_loss=fail_on_data_loss,
        include_headers=include_headers,
        on_decode_error=on_decode_error,
        metadata_prefix=metadata_prefix,
        messages_per_partition=messages_per_partition,
        max_partitions=max_partitions,
        fetch_size=fetch_size,
        idle_timeout=idle_timeout,
        connection=connection,
    )
    if max_messages_per_trigger is not None and not ADMISSION_CONTROL:
        _log.warning(
            "max_messages_per_trigger=%d has no effect before PySpark 4.2 (no admission "
            "control): each micro-batch of stream %s reads everything available",
            max_messages_per_trigger,
            stream,
        )
    register(spark)
    return spark.readStream.format(FORMAT).options(**options.to_options()).load()


def read(
    spark: SparkSession,
    payload_type: Any,
    *,
    servers: str | list[str] | tuple[str, ...],
    stream: str,
    subjects: str | list[str] | tuple[str, ...] | None = None,
    starting: Literal["earliest", "latest"] | int | datetime = "earliest",
    ending: Literal["latest"] | int = "latest",
    fail_on_data_loss: bool = True,
    include_headers: bool = False,
    on_decode_error: Literal["fail", "corrupt"] = "fail",
    metadata_prefix: str = "",
    messages_per_partition: int = DEFAULT_MESSAGES_PER_PARTITION,
    max_partitions: int = 64,
    fetch_size: int = 2_000,
    idle_timeout: float = 30.0,
    **connection: Any,
) -> DataFrame:
    """A batch DataFrame of the messages in ``[starting, ending)`` of ``stream``.

    ``ending`` is an exclusive sequence, or ``"latest"``: everything stored when the
    read is planned. Columns and the other arguments are those of :func:`read_stream`.

    Raises:
        SchemaError: ``payload_type`` has no Spark schema.
        SourceOptionError: An option is malformed.
        InvalidSubject: A subject filter is not a valid pattern.
    """
    if ending != "latest" and (
        isinstance(ending, bool) or not isinstance(ending, int) or ending < 1
    ):
        raise SourceOptionError(f"ending must be 'latest' or a sequence >= 1, got {ending!r}")
    options = _options(
        payload_type,
        servers=servers,
        stream=stream,
        subjects=subjects,
        starting=starting,
        ending=ending,
        max_messages_per_trigger=None,
        fail_on_data_loss=fail_on_data_loss,
        include_headers=include_headers,
        on_decode_error=on_decode_error,
        metadata_prefix=metadata_prefix,
        messages_per_partition=messages_per_partition,
        max_partitions=max_partitions,
        fetch_size=fetch_size,
        idle_timeout=idle_timeout,
        connection=connection,
    )
    register(spark)
    return spark.read.format(FORMAT).options(**options.to_options()).load()
