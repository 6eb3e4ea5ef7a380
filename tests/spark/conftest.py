"""Spark fixtures: one local[2] session shared by the run, a fresh server per test.

The Spark Connect server fixture is in tests/conftest.py (it makes no SparkContext here).

A Python process holds at most one SparkContext (one driver), so the local[2] session
and the standalone-cluster session of test_cluster.py take turns in
:class:`~tests.spark.jvm.OneContext`: the cluster tests stop the local session while
their module runs, and the next test that asks for ``spark`` gets a new local[2]
session (a few seconds, once). Any order of tests works; a test never gets a stopped
session. A test that fails makes the next one check the session first, and a broken
session (its JVM dead, its Py4J connection out of step after a timeout) is replaced
with a new JVM: one failure fails one test, not every test after it.
"""

from __future__ import annotations

import inspect
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from pyspark import util as pyspark_util
from pyspark.sql import SparkSession

from tests.spark.jvm import OneContext

HERE = Path(__file__).resolve().parent
# PySpark before 4.2 leaves the socket that collect() and toArrow() read from to the
# garbage collector; SPARK-54247 made pyspark.util._load_from_socket a context manager
# that closes it. The ResourceWarning under filterwarnings=error is no leak of goflux's.
_load_from_socket = getattr(pyspark_util, "_load_from_socket", None)
PYSPARK_LEAVES_SOCKETS_OPEN = _load_from_socket is not None and not (
    inspect.isgeneratorfunction(inspect.unwrap(_load_from_socket))
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not PYSPARK_LEAVES_SOCKETS_OPEN:
        return
    ignore = pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
    )
    for item in items:
        if item.path.resolve().is_relative_to(HERE):
            item.add_marker(ignore)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Tell the SparkContext when a test that used it failed (see tests/spark/jvm.py).

    An exception that is no ``Exception`` (pytest-timeout's, KeyboardInterrupt) may
    have been raised in the middle of a Py4J call: the JVM is replaced unasked.
    """
    report = yield
    funcargs: dict[str, object] = getattr(item, "funcargs", None) or {}
    context = funcargs.get("spark_context")
    if report.failed and isinstance(context, OneContext):
        error = call.excinfo.value if call.excinfo is not None else None
        context.failed(interrupted=error is not None and not isinstance(error, Exception))
    return report


@pytest.fixture(scope="session")
def spark_context() -> Iterator[OneContext]:
    context = OneContext()
    yield context
    context.stop()


@pytest.fixture
def spark(spark_context: OneContext) -> SparkSession:
    """The shared local[2] session (the same one from test to test while it works)."""
    return spark_context.local()
