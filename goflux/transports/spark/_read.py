"""``read_stream`` and ``read``: typed DataFrames over a JetStream stream."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Final, Literal, Required, Unpack

from pyspark.sql import DataFrame, SparkSession

from goflux._codecs import Codec
from goflux.transports.spark._connection import (
    ConnectionSettings,
    connection_options,
    require_keywords,
)
from goflux.transports.spark._datasource.reader import ADMISSION_CONTROL
from goflux.transports.spark._datasource.rows import source_schema
from goflux.transports.spark._datasource.source import FORMAT, register
from goflux.transports.spark._errors import SourceOptionError
from goflux.transports.spark._options import DEFAULT_MESSAGES_PER_PARTITION, SourceOptions

__all__ = ("ReadOptions", "read", "read_stream")

_log = logging.getLogger("goflux.transports.spark")


class ReadOptions(ConnectionSettings, total=False):
    """The keyword arguments :func:`read_stream` and :func:`read` share.

    ``servers`` and ``stream`` are required; what each means, and its default, is in
    :func:`read_stream`'s arguments. The connection settings are those of
    :class:`ConnectionSettings`.
    """

    stream: Required[str]
    subjects: str | list[str] | tuple[str, ...] | None
    starting: Literal["earliest", "latest"] | int | datetime
    fail_on_data_loss: bool
    include_headers: bool
    on_decode_error: Literal["fail", "corrupt"]
    metadata_prefix: str
    messages_per_partition: int
    max_partitions: int
    fetch_size: int
    idle_timeout: float


# What the source options are when not given (the connection's are ConnectionOptions').
_DEFAULTS: Final[dict[str, Any]] = {
    "subjects": None,
    "starting": "earliest",
    "fail_on_data_loss": True,
    "include_headers": False,
    "on_decode_error": "fail",
    "metadata_prefix": "",
    "messages_per_partition": DEFAULT_MESSAGES_PER_PARTITION,
    "max_partitions": 64,
    "fetch_size": 2_000,
    "idle_timeout": 30.0,
}


def _source_options(
    caller: str,
    payload_type: Any,
    *,
    ending: Literal["latest"] | int,
    max_messages_per_trigger: int | None,
    codec: Codec[Any] | None,
    options: ReadOptions,
) -> SourceOptions:
    """The source options of a ``read`` or ``read_stream`` call, checked.

    Raises:
        TypeError: ``servers`` or ``stream`` is missing, a keyword is unknown, or
            ``codec`` is no codec.
        SourceOptionError: An option is malformed, or ``codec`` does not fit
            ``payload_type`` or cannot be pickled.
        SchemaError: ``payload_type`` has no Spark schema.
        InvalidSubject: A subject filter is not a valid pattern.
    """
    require_keywords(caller, options, "servers", "stream")
    connection: dict[str, Any] = dict(options)
    stream = connection.pop("stream")
    given = {**_DEFAULTS, **{key: connection.pop(key) for key in _DEFAULTS if key in connection}}
    subjects = given.pop("subjects")
    if isinstance(subjects, str):
        subjects = [subjects]
    for name, value in (
        ("max_messages_per_trigger", max_messages_per_trigger),
        ("messages_per_partition", given["messages_per_partition"]),
        ("max_partitions", given["max_partitions"]),
        ("fetch_size", given["fetch_size"]),
    ):
        if value is not None and (isinstance(value, bool) or value < 1):
            raise SourceOptionError(f"{name} must be >= 1, got {value!r}")
    starting = given.pop("starting")
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
    source = SourceOptions(
        connection=connection_options(caller, connection),
        stream=stream,
        subjects=tuple(subjects or ()),
        ending=ending,
        max_messages_per_trigger=max_messages_per_trigger,
        payload_type=payload_type,
        codec=codec,
        **given,
        **start,
    )
    # Round-trip through Spark's string options now, so bad input (an unpicklable codec
    # too) fails here, not in the middle of a query.
    source = SourceOptions.parse(source.to_options())
    source_schema(source)
    return source


def read_stream(
    spark: SparkSession,
    payload_type: Any,
    *,
    max_messages_per_trigger: int | None = None,
    codec: Codec[Any] | None = None,
    **options: Unpack[ReadOptions],
) -> DataFrame:
    """A streaming DataFrame of the messages of ``stream``, one row per message.

    Columns: the fields of ``payload_type``, then ``subject``, ``stream``, ``seq`` and
    ``timestamp``; with ``payload_type=None`` a ``value`` bytes column replaces the
    fields (raw mode). Payloads are decoded as JSON (``JsonCodec(payload_type)``), or
    with ``codec``: the columns stay the payload type's fields whatever the codec.
    Offsets are stream sequences kept in the query's checkpoint: a restarted query
    reads nothing twice and loses nothing (exactly-once processing for
    limits-retention streams).

    Args:
        spark: The session (see :func:`local_session` for local runs).
        payload_type: The payload type, or None for raw bytes.
        codec: The codec of the payloads, any :class:`~goflux.Codec` of
            ``payload_type`` (``MsgpackCodec(T)``, ``pipe(MsgpackCodec(T), Gzip())``,
            ...; see :mod:`goflux.codecs`). It is pickled with cloudpickle and
            decodes on the executors, so their Python needs its library too.
            Default: ``JsonCodec(payload_type)``. Raw mode takes none.
        max_messages_per_trigger: At most this many stream sequences per micro-batch
            (PySpark 4.2+; ``Trigger.AvailableNow`` honours it too). Older PySpark has
            no admission control and reads everything available per batch; a warning
            is logged when it is given there. Default: no limit.
        **options: :class:`ReadOptions`, shared with :func:`read`:

            - ``servers`` (required): NATS server URL(s).
            - ``stream`` (required): The JetStream stream to read.
            - ``subjects``: Only messages on these subjects (wildcards allowed).
              Default: every subject of the stream.
            - ``starting``: Where a new query starts: ``"earliest"`` (default),
              ``"latest"``, a stream sequence, or a datetime (the first message stored
              at or after it). A query restarted from its checkpoint continues where
              it stopped.
            - ``fail_on_data_loss``: Fail the query when messages it has not read yet
              were deleted (default True); False skips to what is still stored.
            - ``include_headers``: Add ``headers``: ``array<struct<key, value>>`` with
              every header line as received, repeated names kept (default False).
            - ``on_decode_error``: ``"fail"`` (default) the batch on a payload the
              codec cannot decode (the error names the sequence, the subject and the
              codec), or ``"corrupt"``: null payload columns and the bytes in
              ``_corrupt``.
            - ``metadata_prefix``: Prefix for the metadata column names, for a payload
              with a field named like one of them (default ``""``).
            - ``messages_per_partition``: Sequences read by one Spark task (default
              50,000).
            - ``max_partitions``: Most tasks per micro-batch (default 64).
            - ``fetch_size``: Messages per pull request and per Arrow batch in a task
              (default 2,000).
            - ``idle_timeout``: Seconds a task waits for the next message before
              failing (default 30).
            - ``user``, ``password``, ``token``, ``creds_file``, ``nkey_seed_file``,
              ``tls_ca_file``, ``tls_cert_file``, ``tls_key_file``,
              ``connect_timeout``: how to connect (:class:`ConnectionSettings`).

    Raises:
        TypeError: ``servers`` or ``stream`` is missing, an option is unknown, or
            ``codec`` is no codec.
        SchemaError: ``payload_type`` has no Spark schema.
        SourceOptionError: An option is malformed; or ``codec`` cannot be pickled,
            states another payload type than ``payload_type`` (its ``.type``), or is
            given in raw mode.
        InvalidSubject: A subject filter is not a valid pattern.
    """
    source = _source_options(
        "read_stream",
        payload_type,
        ending="latest",
        max_messages_per_trigger=max_messages_per_trigger,
        codec=codec,
        options=options,
    )
    if max_messages_per_trigger is not None and not ADMISSION_CONTROL:
        _log.warning(
            "max_messages_per_trigger=%d has no effect before PySpark 4.2 (no admission "
            "control): each micro-batch of stream %s reads everything available",
            max_messages_per_trigger,
            source.stream,
        )
    register(spark)
    return spark.readStream.format(FORMAT).options(**source.to_options()).load()


def read(
    spark: SparkSession,
    payload_type: Any,
    *,
    ending: Literal["latest"] | int = "latest",
    codec: Codec[Any] | None = None,
    **options: Unpack[ReadOptions],
) -> DataFrame:
    """A batch DataFrame of the messages in ``[starting, ending)`` of ``stream``.

    ``ending`` is an exclusive sequence, or ``"latest"``: everything stored when the
    read is planned. Columns, ``codec`` and the other arguments (:class:`ReadOptions`)
    are those of :func:`read_stream`.

    Raises:
        TypeError: ``servers`` or ``stream`` is missing, an option is unknown, or
            ``codec`` is no codec.
        SchemaError: ``payload_type`` has no Spark schema.
        SourceOptionError: An option is malformed; or ``codec`` cannot be pickled,
            states another payload type than ``payload_type``, or is given in raw
            mode.
        InvalidSubject: A subject filter is not a valid pattern.
    """
    if ending != "latest" and (
        isinstance(ending, bool) or not isinstance(ending, int) or ending < 1
    ):
        raise SourceOptionError(f"ending must be 'latest' or a sequence >= 1, got {ending!r}")
    source = _source_options(
        "read",
        payload_type,
        ending=ending,
        max_messages_per_trigger=None,
        codec=codec,
        options=options,
    )
    register(spark)
    return spark.read.format(FORMAT).options(**source.to_options()).load()
