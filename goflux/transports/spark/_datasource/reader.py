"""Reading JetStream in Spark: micro-batch and batch readers over sequence ranges.

Offsets are stream sequences, ``{"stream": name, "seq": next}``: a micro-batch is the
range ``[start, end)``, planned on the driver from the stream's state and read on
executors in parallel partitions. Reading a range is deterministic (the same stored
messages, in order), so a batch Spark replays after a crash yields the same rows, and
Spark's checkpoint makes processing exactly-once. Nothing is acknowledged: the
stream must keep messages by limits (age, count, size), not by interest.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import datetime
from types import ModuleType
from typing import Any, TypeVar

import nats
import pyarrow as pa
from nats.aio.client import Client
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from goflux._errors import TransportError
from goflux.transports._natspy import LineKeepingClient
from goflux.transports.jetstream._errors import StreamNotFound
from goflux.transports.spark._connection import TaskLoop
from goflux.transports.spark._datasource.ranges import (
    RangeReader,
    StreamBounds,
    stream_bounds,
)
from goflux.transports.spark._datasource.rows import RowBuilder
from goflux.transports.spark._errors import DataLossError, SourceOptionError
from goflux.transports.spark._options import SourceOptions

_admission: ModuleType | None
try:  # admission control and Trigger.AvailableNow: PySpark >= 4.2
    from pyspark.sql.streaming import datasource as _admission
except ImportError:  # pragma: no cover - PySpark 4.0 / 4.1 read everything available
    _admission = None

_AvailableNow: type = _admission.SupportsTriggerAvailableNow if _admission else object
ADMISSION_CONTROL = _admission is not None
"""Whether ``max_messages_per_trigger`` bounds micro-batches (PySpark 4.2+)."""


__all__ = (
    "JetStreamBatchReader",
    "JetStreamStreamReader",
    "SequenceRange",
    "offset",
    "read_range",
    "split_range",
)

_R = TypeVar("_R")
_log = logging.getLogger("goflux.transports.spark")


def offset(stream: str, seq: int) -> dict[str, Any]:
    """The offset for "next sequence to read is ``seq``" (stable key order)."""
    return {"stream": stream, "seq": seq}


class SequenceRange(InputPartition):
    """The part of a micro-batch one Spark task reads: sequences ``[start, end)``."""

    def __init__(self, stream: str, start: int, end: int) -> None:
        super().__init__((stream, start, end))
        self.stream = stream
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"SequenceRange({self.stream!r}, {self.start}, {self.end})"


def split_range(
    stream: str, start: int, end: int, *, per_partition: int, max_partitions: int
) -> list[SequenceRange]:
    """Split ``[start, end)`` into contiguous ranges of about ``per_partition`` sequences."""
    total = end - start
    if total <= 0:
        return []
    count = max(1, min(max_partitions, math.ceil(total / per_partition)))
    bounds = [start + total * index // count for index in range(count + 1)]
    return [SequenceRange(stream, lo, hi) for lo, hi in itertools.pairwise(bounds)]


def read_range(options: SourceOptions, part: SequenceRange) -> Iterator[pa.RecordBatch]:
    """Read one partition on an executor: connect, read the range, yield Arrow batches.

    Raises:
        DataLossError: ``fail_on_data_loss`` and the range starts before the stream's
            first sequence (the messages were deleted before being read).
        DecodeError: A payload does not decode and ``on_decode_error`` is ``fail``.
        TransportError: The server cannot be reached or stops answering.
    """
    if part.end <= part.start:
        return
    builder = RowBuilder(options)
    loop = TaskLoop()
    nc: Client | None = None
    reader: RangeReader | None = None
    try:
        client = LineKeepingClient if options.include_headers else Client
        nc = loop.run(options.connection.connect(client=client, name="goflux-spark-reader"))
        if options.fail_on_data_loss:
            bounds = loop.run(stream_bounds(nc, part.stream))
            _check_loss(part.stream, part.start, bounds)
        reader = RangeReader(
            nc,
            part.stream,
            part.start,
            part.end,
            filters=options.subjects,
            chunk=options.fetch_size,
            idle_timeout=options.idle_timeout,
        )
        loop.run(reader.open())
        while chunk := loop.run(reader.next_chunk()):
            yield builder.build(chunk)
    finally:
        if reader is not None:
            loop.run(reader.close())
        if nc is not None:
            loop.run(nc.close())
        loop.close()


def _sequence_range(partition: InputPartition) -> SequenceRange | None:
    """The range to read; None for the placeholder Spark plans for an empty read."""
    if isinstance(partition, SequenceRange):
        return partition
    if getattr(partition, "value", None) is None:
        return None
    raise TypeError(f"not a partition of this source: {partition!r}")


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    part = _sequence_range(partition)
    return iter(()) if part is None else read_range(options, part)


def _check_loss(stream: str, needed: int, bounds: StreamBounds) -> None:
    if bounds.first > needed:
        raise DataLossError(
            f"stream {stream!r}: messages from sequence {needed} to {bounds.first - 1} were "
            f"deleted before the query read them (the stream now starts at {bounds.first}); "
            "set fail_on_data_loss=False (option failOnDataLoss=false) to skip them",
            stream=stream,
            expected=needed,
            first=bounds.first,
        )


class _Planner:
    """The driver-side connection (one long-lived process per query plans every batch)."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._loop = TaskLoop()
        self._nc: Client | None = None
        self._created: str | None = None

    def _client(self) -> Client:
        if self._nc is None or self._nc.is_closed or not self._nc.is_connected:
            self._drop()
            self._nc = self._loop.run(self._options.connection.connect(name="goflux-spark-planner"))
        return self._nc

    def _drop(self) -> None:
        nc, self._nc = self._nc, None
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(Exception):
                self._loop.run(nc.close())

    def _ask(self, request: Callable[[Client], Awaitable[_R]]) -> _R:
        """Run ``request`` on the planner's connection, reconnecting once if it broke.

        The connection sits idle between micro-batches, so a server restart goes
        unnoticed until the next request fails; a fresh connection then retries it.
        """
        try:
            return self._loop.run(request(self._client()))
        except TransportError as exc:
            if isinstance(exc, StreamNotFound):
                raise
            _log.info("planner connection failed (%s); reconnecting", exc)
            self._drop()
            return self._loop.run(request(self._client()))

    def bounds(self) -> StreamBounds:
        """The stream's bounds; notices a stream recreated while the query runs.

        Raises:
            DataLossError: The stream was deleted and created again since the last
                call, and ``fail_on_data_loss`` is set.
            SourceOptionError: The stream does not use limits retention.
            StreamNotFound: The stream does not exist.
            TransportError: The server cannot be reached, even on a new connection.
        """
        stream = self._options.stream
        bounds = self._ask(lambda nc: stream_bounds(nc, stream))
        if bounds.retention != "limits":
            raise SourceOptionError(
                f"stream {self._options.stream!r} has {bounds.retention} retention: its "
                "messages go once consumed, so sequence offsets cannot replay a batch. "
                "The source reads streams with limits retention (age, count, size)"
            )
        if self._created is not None and bounds.created != self._created:
            message = (
                f"stream {self._options.stream!r} was deleted and created again while the "
                "query ran: the messages it had not read yet are gone"
            )
            if self._options.fail_on_data_loss:
                raise DataLossError(
                    message, stream=self._options.stream, expected=0, first=bounds.first
                )
            _log.warning("%s (fail_on_data_loss is off: reading on)", message)
        self._created = bounds.created
        return bounds

    def first_at(self, when: datetime, bounds: StreamBounds) -> int:
        """The first sequence stored at or after ``when`` (``last + 1`` if none)."""
        request = json.dumps({"start_time": when.isoformat()}).encode()
        subject = f"$JS.API.STREAM.MSG.GET.{self._options.stream}"

        async def ask(nc: Client) -> bytes:
            try:
                reply = await nc.request(subject, request, timeout=5.0)
            except (TimeoutError, nats.errors.Error) as exc:
                raise TransportError(f"cannot find the first message after {when}: {exc}") from exc
            return bytes(reply.data)

        answer = json.loads(self._ask(ask))
        if "error" in answer:
            if answer["error"].get("code") == 404:
                return bounds.last + 1
            raise TransportError(f"cannot find the first message after {when}: {answer['error']}")
        return int(answer["message"]["seq"])

    def close(self) -> None:
        self._drop()
        self._loop.close()


def _start_seq(options: SourceOptions, planner: _Planner) -> int:
    bounds = planner.bounds()
    if options.starting_time is not None:
        return planner.first_at(options.starting_time, bounds)
    if options.starting == "earliest":
        return bounds.first
    if options.starting == "latest":
        return bounds.last + 1
    start = int(options.starting)
    if start > bounds.last + 1:
        raise SourceOptionError(
            f"starting sequence {start} is past the end of stream {options.stream!r} "
            f"(its last sequence is {bounds.last})"
        )
    return start


class _Reading:
    """What the stream and the batch reader share: options, a lazy planner, pickling."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._planner_: _Planner | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_planner_"] = None  # connections and loops stay on the driver
        return state

    @property
    def _planner(self) -> _Planner:
        if self._planner_ is None:
            self._planner_ = _Planner(self._options)
        return self._planner_

    def _stop_planner(self) -> None:
        if self._planner_ is not None:
            self._planner_.close()
            self._planner_ = None

    def _split(self, start: int, end: int) -> list[SequenceRange]:
        return split_range(
            self._options.stream,
            start,
            end,
            per_partition=self._options.messages_per_partition,
            max_partitions=self._options.max_partitions,
        )


class JetStreamStreamReader(_Reading, DataSourceStreamReader, _AvailableNow):  # type: ignore[misc]
    """Structured Streaming reader: plans sequence ranges, reads them on executors."""

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._target: int | None = None  # Trigger.AvailableNow: end of what exists now
        # Whether latestOffset() was given the batch's start and checked it. PySpark < 4.2
        # calls it without one, and a batch replayed after a restart is planned without
        # calling it: partitions() checks the start then.
        self._start_checked = False

    def _seq(self, value: dict[str, Any]) -> int:
        if value.get("stream") != self._options.stream:
            raise SourceOptionError(
                f"the checkpoint holds an offset of stream {value.get('stream')!r}, but the "
                f"query reads stream {self._options.stream!r}; use a new checkpoint location"
            )
        return int(value["seq"])

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """Where a new query starts (ignored when Spark restarts from a checkpoint)."""
        return offset(self._options.stream, _start_seq(self._options, self._planner))

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        """Trigger.AvailableNow: read only what is stored now, then stop."""
        self._target = self._planner.bounds().last + 1

    def getDefaultReadLimit(self) -> Any:  # noqa: N802 - Spark's name
        """``ReadMaxRows(max_messages_per_trigger)`` when set, else everything available."""
        limit = self._options.max_messages_per_trigger
        if _admission is None:  # pragma: no cover - PySpark < 4.2
            return None
        return _admission.ReadAllAvailable() if limit is None else _admission.ReadMaxRows(limit)

    def latestOffset(  # noqa: N802 - Spark's name
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        """The end of the next micro-batch: what is stored, within the read limit.

        Raises:
            DataLossError: ``fail_on_data_loss`` and messages the query has not read yet
                were deleted (or the stream was recreated behind the query's position).
            SourceOptionError: The stream does not use limits retention, or the
                checkpoint is of another stream.
            TransportError: The server cannot be reached, even on a new connection.
        """
        bounds = self._planner.bounds()
        available = bounds.last + 1
        if self._target is not None:
            available = min(available, self._target)
        self._start_checked = start is not None
        if start is None:  # PySpark < 4.2: no admission control
            return offset(self._options.stream, available)
        begin = self._seq(start)
        if not self._check_start(begin, bounds):
            return offset(self._options.stream, begin)
        end = max(begin, available)
        if _admission is not None and isinstance(limit, _admission.ReadMaxRows):
            end = min(end, max(begin, bounds.first) + limit.max_rows)
        return offset(self._options.stream, end)

    def _check_start(self, begin: int, bounds: StreamBounds) -> bool:
        """Check the query's position ``begin``; False when the stream ends before it.

        Raises:
            DataLossError: ``fail_on_data_loss`` and messages from ``begin`` on were
                deleted, or the stream ends before ``begin``.
        """
        stream = self._options.stream
        if begin < bounds.first:
            if self._options.fail_on_data_loss:
                _check_loss(stream, begin, bounds)
            _log.warning(
                "stream %r: skipping deleted sequences %d..%d (fail_on_data_loss is off)",
                stream,
                begin,
                bounds.first - 1,
            )
        if bounds.last + 1 < begin:
            message = (
                f"stream {stream!r} ends at sequence {bounds.last}, before the query's "
                f"position {begin}: was it deleted and recreated?"
            )
            if self._options.fail_on_data_loss:
                raise DataLossError(message, stream=stream, expected=begin, first=bounds.first)
            _log.warning("%s (waiting for it to grow past the position)", message)
            return False
        return True

    def reportLatestOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """The end of what is stored (for the query's progress report)."""
        return offset(self._options.stream, self._planner.bounds().last + 1)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[SequenceRange]:
        """Split the micro-batch ``[start, end)`` into task-sized sequence ranges.

        Raises:
            DataLossError: As :meth:`latestOffset`, for a start it did not check.
        """
        begin, end_seq = self._seq(start), self._seq(end)
        if not self._start_checked and begin != end_seq:
            self._check_start(begin, self._planner.bounds())
        return self._split(begin, end_seq)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range on an executor (see :func:`read_range`)."""
        return _read(self._options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets in Spark's checkpoint are the only state."""

    def stop(self) -> None:
        """Close the driver-side connection."""
        self._stop_planner()


class JetStreamBatchReader(_Reading, DataSourceReader):
    """Batch reader over a bounded range (``startingOffsets`` to ``endingOffsets``)."""

    def partitions(self) -> Sequence[SequenceRange]:
        """Resolve the range on the driver and split it into partitions.

        Raises:
            DataLossError: ``fail_on_data_loss`` and the start was deleted.
        """
        try:
            bounds = self._planner.bounds()
            start = _start_seq(self._options, self._planner)
        finally:
            self._stop_planner()
        end = bounds.last + 1 if self._options.ending == "latest" else int(self._options.ending)
        if self._options.fail_on_data_loss and start < end:
            _check_loss(self._options.stream, start, bounds)
        return self._split(max(start, bounds.first) if start < end else start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range on an executor (see :func:`read_range`)."""
        return _read(self._options, partition)
