"""The Spark tests' retry of a step whose Python worker missed Spark's fixed 10 s.

The helpers run a query's start or a batch read again only when a Python worker
connected back too late, and only before anything ran. These tests drive them with
writers and queries that fail as Spark's do (PySpark's own exception classes, no JVM);
the behaviour against real Spark was reproduced with a worker delayed past the 10 s.
"""

from __future__ import annotations

from typing import Any

import pytest
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.errors.exceptions.connect import SparkConnectGrpcException
from pyspark.errors.exceptions.connect import StreamingQueryException as ConnectQueryError

from tests.spark.helpers import run_to_end, starting_again

MISSED = "(org.apache.spark.SparkException) Python worker failed to connect back."
TIMED_OUT = "Timed out while waiting for the Python worker to connect back"


class Query:
    """A started query: fails with ``error`` (after ``batches`` batches) or ends."""

    def __init__(self, error: str | None, batches: int) -> None:
        self.error = error
        self.recentProgress = [{"batchId": n} for n in range(batches)]

    def awaitTermination(self) -> None:  # noqa: N802 - PySpark's name
        if self.error is not None:
            raise ConnectQueryError(message=f"[STREAM_FAILED] {self.error}")

    def exception(self) -> Exception | None:
        return None if self.error is None else ConnectQueryError(message=self.error)


class Writer:
    """A DataStreamWriter whose starts go as ``outcomes`` say, one per start.

    An outcome is ``("start", message)``: the start raises; ``("query", message,
    batches)``: the query fails so after that many batches; ``("ok",)``: it ends.
    """

    def __init__(self, *outcomes: tuple[Any, ...]) -> None:
        self.outcomes = list(outcomes)
        self.starts = 0

    def option(self, key: str, value: str) -> Writer:
        return self

    def trigger(self, **kwargs: Any) -> Writer:
        return self

    def start(self) -> Query:
        outcome = self.outcomes[self.starts]
        self.starts += 1
        if outcome[0] == "start":
            raise SparkConnectGrpcException(message=outcome[1])
        if outcome[0] == "query":
            return Query(outcome[1], outcome[2])
        return Query(None, 1)


def run(writer: Writer) -> Any:
    return run_to_end(writer, "/nowhere")  # type: ignore[arg-type]


def test_a_query_failed_before_its_first_batch_is_started_again() -> None:
    writer = Writer(("query", MISSED, 0), ("ok",))
    query = run(writer)
    assert writer.starts == 2
    assert query.exception() is None


def test_a_start_that_failed_so_is_started_again() -> None:
    writer = Writer(("start", TIMED_OUT), ("ok",))
    run(writer)
    assert writer.starts == 2


def test_a_query_failed_after_a_batch_ran_fails_the_test() -> None:
    writer = Writer(("query", MISSED, 1), ("ok",))
    with pytest.raises(ConnectQueryError, match="connect back"):
        run(writer)
    assert writer.starts == 1


def test_any_other_failure_is_raised_at_once() -> None:
    writer = Writer(("query", "boom", 0), ("ok",))
    with pytest.raises(ConnectQueryError, match="boom"):
        run(writer)
    started = Writer(("start", "refused"), ("ok",))
    with pytest.raises(SparkConnectGrpcException, match="refused"):
        run(started)
    assert (writer.starts, started.starts) == (1, 1)


def test_the_third_start_is_the_last_whichever_way_each_failed() -> None:
    writer = Writer(("start", MISSED), ("query", TIMED_OUT, 0), ("start", MISSED), ("ok",))
    with pytest.raises(SparkConnectGrpcException, match="connect back"):
        run(writer)
    assert writer.starts == 3


def test_a_batch_step_runs_again_on_a_classic_sessions_error_too() -> None:
    calls: list[int] = []

    class JavaError(Py4JJavaError):  # type: ignore[misc]
        def __init__(self) -> None:
            Exception.__init__(self)

        def __str__(self) -> str:
            return f"An error occurred: org.apache.spark.SparkException: {MISSED}"

    def read() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise JavaError()
        return "rows"

    assert starting_again(read) == "rows"
    assert len(calls) == 3
    calls.clear()

    def broken() -> str:
        calls.append(1)
        raise JavaError()

    with pytest.raises(Py4JJavaError):
        starting_again(broken)
    assert len(calls) == 3
