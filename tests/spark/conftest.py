"""Spark fixtures: one local[2] session for the run (the Connect server is in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from goflux.transports import spark as gspark


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = gspark.local_session("local[2]", app_name="goflux-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
