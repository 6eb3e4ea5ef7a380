"""Fixtures shared by the whole suite."""

from __future__ import annotations

import socket
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
import pytest_timeout
from nats.aio.client import Client
from nats.js import JetStreamContext
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from goflux import Telemetry
from goflux.testing import NatsServer, SparkConnectServer
from goflux.testing._process import load_factor
from goflux.transports import jetstream

STREAM = "ORDERS"

TESTS = Path(__file__).resolve().parent
# Test tiers (README "Test tiers"): tests are marked by the folder they live in, so a
# new test lands in the right tier without decoration; ``./scripts/check.sh --fast`` leaves out
# every test marked slow, spark, reliability or e2e. Single slow tests elsewhere carry
# ``@pytest.mark.slow`` themselves.
FOLDER_MARKERS = {"reliability": "reliability", "e2e": "e2e"}
NATS_LOG_LINES = 200  # the last lines a failing test's report searches for warnings
SPARK_FIXTURE = "spark"  # tests/spark/conftest.py: the session-wide local SparkSession
# Seconds a JVM start-up may take on a busy machine, as goflux.testing's Spark servers
# allow theirs: added to the timeout of a test that will start the local session's JVM.
JVM_STARTUP = 180.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by its folder or file, and ``spark`` if it starts a Spark session.

    The tests in tests/spark that need no JVM (schema, options, ranges) are the unit
    tests of goflux.transports.spark and stay in the fast tier.
    """
    for item in items:
        try:
            parts = item.path.resolve().relative_to(TESTS).parts
        except ValueError:
            continue  # not under tests/
        markers = {FOLDER_MARKERS.get(parts[0])}
        if SPARK_FIXTURE in getattr(item, "fixturenames", ()):
            markers.add("spark")
        for name in sorted(m for m in markers if m is not None):
            item.add_marker(name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Add what the test's nats-servers logged as warnings or errors to a failure.

    The server answers some refusals only with a fixed sentence ("error creating store
    for stream") and writes the cause to its own log. Every captured section is made
    UTF-8 clean, for pytest-xdist.
    """
    report = yield
    if report.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, NatsServer):
                lines = [
                    line
                    for line in value.log_tail(NATS_LOG_LINES).splitlines()
                    if "[WRN]" in line or "[ERR]" in line or "[FTL]" in line
                ]
                if lines:
                    report.sections.append((f"nats-server {name} warnings", "\n".join(lines)))
    # Captured output may hold lone surrogates (tests of undecodable text log them);
    # pytest-xdist's workers send reports as UTF-8 and would crash on them.
    report.sections = [(title, _utf8(text)) for title, text in report.sections]
    return report


def _utf8(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def starts_the_local_jvm(item: pytest.Item) -> bool:
    """Whether the test will start the JVM of the local Spark session (none runs yet)."""
    if SPARK_FIXTURE not in getattr(item, "fixturenames", ()):
        return False
    pyspark = sys.modules.get("pyspark")  # not imported yet: no session either
    return pyspark is None or pyspark.SparkContext._active_spark_context is None


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """A test marked spark or e2e gets its timeout times the machine's load factor.

    Its JVMs and child processes start, and its jobs run, that much slower on an
    overloaded machine (the factor is ``max(1, load average / CPUs)``, as for the
    servers' start-up timeouts and the children's own limits,
    ``tests.processes.scaled``); on an idle one nothing changes. A test that will
    start the local Spark session's JVM (the first to ask for it, or the first after
    a broken one) gets :data:`JVM_STARTUP` more first: its timeout covers its setup.
    """
    if not settings.timeout:  # no timeout (--timeout=0): none added either
        return None
    factor = load_factor()
    startup = JVM_STARTUP if starts_the_local_jvm(item) else 0.0
    if (factor <= 1 and not startup) or not any(
        item.get_closest_marker(m) for m in ("spark", "e2e")
    ):
        return None
    scaled = settings._replace(timeout=(settings.timeout + startup) * factor)
    started: bool = pytest_timeout.pytest_timeout_set_timer(item=item, settings=scaled)
    return started


class ConnectServers:
    """The run's Spark Connect server: one for every test, a new one if it died.

    A server that failed to start fails the test that asked for it; the next test
    tries again.
    """

    def __init__(self) -> None:
        self.server: SparkConnectServer | None = None
        self.started = 0

    def get(self) -> SparkConnectServer:
        """The server, after checking it runs and accepts connections."""
        if self.server is not None and not self.answers(self.server):
            self.stop()
        if self.server is None:
            server = SparkConnectServer("local[2]", driver_memory="1g")
            server.start()  # stops what it started if it fails
            self.server = server
            self.started += 1
        return self.server

    @staticmethod
    def answers(server: SparkConnectServer) -> bool:
        """True if its JVM runs and its port accepts a connection."""
        if not server.running:
            return False
        try:
            socket.create_connection((server.host, server.port), timeout=10).close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.stop()


@pytest.fixture(scope="session")
def connect_servers() -> Iterator[ConnectServers]:
    servers = ConnectServers()
    yield servers
    servers.stop()


@pytest.fixture
def connect_server(connect_servers: ConnectServers) -> SparkConnectServer:
    """A real Spark Connect server (local[2]) from pyspark's own jars, shared by the run."""
    return connect_servers.get()


@dataclass
class Otel:
    """A Telemetry wired to in-memory exporters."""

    telemetry: Telemetry
    tracer_provider: TracerProvider
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def span(self, name: str) -> ReadableSpan:
        found = [s for s in self.spans() if s.name == name]
        assert len(found) == 1, f"expected one span {name!r}, got {[s.name for s in self.spans()]}"
        return found[0]

    def metrics(self) -> dict[str, Metric]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return {
            m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        }


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    propagator = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    telemetry = Telemetry(
        tracer_provider=tracer_provider, meter_provider=meter_provider, propagator=propagator
    )
    yield Otel(telemetry, tracer_provider, exporter, reader)
    tracer_provider.shutdown()
    meter_provider.shutdown()


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    yield client
    if not client.is_closed:
        await client.close()


@pytest.fixture
async def bare_js(nc: Client) -> JetStreamContext:
    """A JetStream context on a server with no streams yet."""
    return nc.jetstream()


@pytest.fixture
async def js(bare_js: JetStreamContext) -> JetStreamContext:
    """A JetStream context with the ORDERS stream capturing orders.>."""
    await jetstream.ensure_stream(bare_js, name=STREAM, subjects=["orders.>"])
    return bare_js
