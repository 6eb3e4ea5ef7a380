"""Spark fixtures: one local[2] session shared by the run, a fresh server per test.

The Spark Connect server fixture is in tests/conftest.py (it makes no SparkContext here).

A Python process holds at most one SparkContext (one driver), so the local[2] session
and the standalone-cluster session of test_cluster.py take turns in :class:`OneContext`:
the cluster tests stop the local session while their module runs, and the next test
that asks for ``spark`` gets a new local[2] session (a few seconds, once). Any order of
tests works; a test never gets a stopped session.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pyspark import util as pyspark_util
from pyspark.sql import SparkSession

from goflux.transports import spark as gspark

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


class OneContext:
    """The one SparkContext of this process: the local[2] session or a borrowed one."""

    def __init__(self) -> None:
        self._local: SparkSession | None = None
        self._borrowed = False

    def local(self) -> SparkSession:
        """The local[2] session, started (again) if there is none."""
        if self._borrowed:
            raise RuntimeError("a test asked for the local session while another one runs")
        if self._local is None:
            self._local = gspark.local_session("local[2]", app_name="goflux-tests")
            self._local.sparkContext.setLogLevel("ERROR")
        return self._local

    @contextmanager
    def borrowed(self, make: Callable[[], SparkSession]) -> Iterator[SparkSession]:
        """Stop the local session, run ``make``'s session, stop it when done."""
        self.stop()
        self._borrowed = True
        try:
            session = make()
            try:
                yield session
            finally:
                session.stop()
        finally:
            self._borrowed = False

    def stop(self) -> None:
        """Stop the local session, if one runs."""
        local, self._local = self._local, None
        if local is not None:
            local.stop()


@pytest.fixture(scope="session")
def spark_context() -> Iterator[OneContext]:
    context = OneContext()
    yield context
    context.stop()


@pytest.fixture
def spark(spark_context: OneContext) -> SparkSession:
    """The shared local[2] session (the same one from test to test while it runs)."""
    return spark_context.local()
