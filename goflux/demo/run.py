"""The end-to-end demo: orders through a service, Spark, and back, on a real server.

1. The shop publishes typed :class:`Order` events on ``orders.created`` (JetStream).
2. The payment service (a durable consumer with ``retry_ack``) charges each order:
   a flaky gateway fails some orders twice (retried with broker-side backoff, then
   accepted), orders with a non-positive amount fail for good (dead-lettered on
   ``deadletter.orders``). Accepted orders are published on ``orders.accepted``.
3. A Spark Structured Streaming job reads ``orders.accepted`` through the goflux
   source, sums revenue per customer per minute and publishes the results on
   ``revenue.by_customer`` through the ``foreachBatch`` sink.
4. A subscriber collects the results; the run checks them against the orders.

Traces go to an in-memory exporter: every consumer span links to its producer span,
and the service's publishes are children of the consumer span that made them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from goflux import BytesCodec, GofluxError, JsonCodec, Message, Telemetry, chain
from goflux._urls import redact_url
from goflux.demo.model import (
    DEAD_LETTER_STREAM,
    ORDER_STREAM,
    RESULT_STREAM,
    CustomerRevenue,
    Order,
    flaky_orders,
    make_orders,
)
from goflux.demo.service import FlakyGateway, PaymentService
from goflux.demo.summary import DemoSummary, check, print_next_steps, print_summary
from goflux.middleware import DeadLetter, ExponentialBackoff, RetryPolicy, retry_ack
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports.spark._connection import ConnectionOptions

__all__ = (
    "DemoConfig",
    "DemoError",
    "Progress",
    "run_and_print",
    "run_demo",
)


MIN_ORDERS = 13


class DemoError(GofluxError):
    """The demo cannot run here (no Java, no server) or did not finish in time."""


@dataclass(frozen=True)
class DemoConfig:
    """How big the demo is and where it runs.

    Attributes:
        orders: Orders the shop publishes.
        url: A NATS server with JetStream; None starts an embedded one.
        master: Spark master URL (``local[*]``, or a cluster's).
        remote: A Spark Connect server (``sc://host:port``) to run the Spark step on,
            instead of a session of our own on ``master``.
        batches: About how many Spark micro-batches the orders are read in.
        timeout: Seconds the service may take to settle every order.
        checkpoint: The Spark checkpoint directory (default: a temporary one; on a
            cluster, a path every executor can reach; on Connect, one the server can
            write).
        spark_logs: Let Spark's own log lines (log4j, the JVM) through to stderr;
            by default they go to a file and only a failure shows their tail.
        traces: Write the finished spans to this file (one JSON object per line).
        out: Where progress and the summary are printed.
    """

    orders: int = 500
    url: str | None = None
    master: str = "local[*]"
    remote: str | None = None
    batches: int = 3
    timeout: float = 120.0
    checkpoint: str | None = None
    spark_logs: bool = False
    traces: str | None = None
    out: TextIO = field(default_factory=lambda: sys.stdout, repr=False)

    def __post_init__(self) -> None:
        if self.orders < MIN_ORDERS:
            raise ValueError(
                f"the demo needs at least {MIN_ORDERS} orders (so that some are flaky and "
                f"some invalid), got {self.orders}"
            )
        if self.batches < 1 or self.timeout <= 0:
            raise ValueError("batches must be >= 1 and timeout > 0")
        if self.remote is not None and not self.remote.startswith("sc://"):
            raise ValueError(
                f"remote must be a Spark Connect URL (sc://host:port), got {self.remote!r}"
            )


class Progress:
    """One status line, rewritten in place on a terminal, throttled elsewhere."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._tty = out.isatty()
        self._last = ""
        self._shown = 0.0
        self.values: dict[str, int] = {}

    def update(self, *, force: bool = False, **values: int) -> None:
        """Set counters; show the line if it changed (at most every 0.1 s / 2 s)."""
        self.values.update(values)
        line = " | ".join(
            f"{name.replace('_', ' ')} {value}" for name, value in self.values.items()
        )
        now = time.monotonic()
        if line == self._last or (not force and now - self._shown < (0.1 if self._tty else 2.0)):
            return
        self._last, self._shown = line, now
        if self._tty:
            self._out.write(f"\r  {line}\x1b[K")
        else:
            self._out.write(f"  {line}\n")
        self._out.flush()

    def done(self) -> None:
        """End the line on a terminal."""
        if self._tty:
            self._out.write("\n")
            self._out.flush()


_NEED_JAVA = (
    "the Spark part of the demo needs Java 17 or newer: install a JDK "
    "(e.g. `apt install openjdk-17-jre-headless`) or set JAVA_HOME"
)


def _java() -> None:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if java is None or not os.path.exists(java):
        raise DemoError(f"{_NEED_JAVA} (no java found)")
    try:
        shown = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except OSError as exc:
        raise DemoError(f"{_NEED_JAVA} ({java} does not run: {exc})") from None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', shown)
    major = int(found.group(1)) if found else 0
    if major == 1 and found and found.group(2):  # "1.8" is Java 8
        major = int(found.group(2))
    if major < 17:
        raise DemoError(f"{_NEED_JAVA} ({java} is {shown.splitlines()[0] if shown else '?'})")


async def _provision(js: JetStreamContext) -> None:
    # A previous run's messages would be de-duplicated against (same message IDs) or
    # counted again: start from empty streams.
    for name in (ORDER_STREAM, DEAD_LETTER_STREAM, RESULT_STREAM):
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(name)
    await jetstream.ensure_stream(js, name=ORDER_STREAM, subjects=["orders.>"])
    await jetstream.ensure_stream(js, name=DEAD_LETTER_STREAM, subjects=["deadletter.orders"])
    await jetstream.ensure_stream(js, name=RESULT_STREAM, subjects=["revenue.>"])
    await jetstream.ensure_consumer(
        js, stream=ORDER_STREAM, name="payments", filter_subject="orders.created", ack_wait=30
    )


async def _run_service(
    js: JetStreamContext,
    orders: list[Order],
    flaky: set[str],
    telemetry: Telemetry,
    progress: Progress,
    timeout: float,
) -> PaymentService:
    accepted = jetstream.Publisher(js, JsonCodec(Order), telemetry=telemetry)
    service = PaymentService(FlakyGateway(flaky), accepted)
    policy = RetryPolicy(
        backoff=ExponentialBackoff(initial=0.1, multiplier=2.0, max=2.0, jitter=0.0),
        max_attempts=5,
        dead_letter=DeadLetter(jetstream.Publisher(js, BytesCodec()), "deadletter.orders"),
    )
    handler = chain(retry_ack(policy))(service)
    subscriber = jetstream.Subscriber(
        js,
        JsonCodec(Order),
        stream=ORDER_STREAM,
        consumer="payments",
        concurrency=16,
        max_in_flight=256,
        telemetry=telemetry,
    )
    async with subscriber:
        await subscriber.start("orders.created", handler)
        shop = jetstream.Publisher(js, JsonCodec(Order), telemetry=telemetry)
        await shop.publish_many(
            jetstream.Outgoing("orders.created", order, message_id=order.id) for order in orders
        )
        # The shop re-sends some orders, as after lost PubAcks: the server keeps one copy.
        resent = await shop.publish_many(
            jetstream.Outgoing("orders.created", order, message_id=order.id)
            for order in orders[:: max(1, len(orders) // 10)]
        )
        service.resent = len(resent)
        service.duplicates = sum(1 for receipt in resent if receipt.duplicate)
        progress.update(published=len(orders), force=True)
        deadline = asyncio.get_running_loop().time() + timeout
        while len(service.settled) < len(orders):
            service.changed.clear()
            counts = service.counts
            progress.update(
                accepted=counts.accepted,
                retried=counts.retried,
                dead_lettered=counts.rejected,
            )
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise DemoError(
                    f"the service settled {len(service.settled)} of {len(orders)} orders "
                    f"in {timeout:g} s"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(service.changed.wait(), left)
    counts = service.counts
    progress.update(
        accepted=counts.accepted, retried=counts.retried, dead_lettered=counts.rejected, force=True
    )
    return service


async def _collect_results(
    js: JetStreamContext, expected: int, timeout: float
) -> tuple[dict[tuple[str, str], CustomerRevenue], int]:
    """The latest version of every (customer, window) result, and how many arrived."""
    latest: dict[tuple[str, str], CustomerRevenue] = {}
    received = 0
    all_in = asyncio.Event()

    async def keep(msg: Message[CustomerRevenue]) -> None:
        nonlocal received
        received += 1
        row = msg.payload
        key = (row.customer, row.window_start.isoformat())
        if key not in latest or latest[key].batch <= row.batch:
            latest[key] = row
        if received >= expected:
            all_in.set()

    if expected == 0:
        return latest, 0
    async with jetstream.Subscriber(js, JsonCodec(CustomerRevenue), stream=RESULT_STREAM) as sub:
        await sub.start("revenue.by_customer", keep)
        try:
            await asyncio.wait_for(all_in.wait(), timeout)
        except TimeoutError:
            raise DemoError(f"received {received} of {expected} Spark results") from None
    return latest, received


def _trace_counts(spans: list[ReadableSpan], summary: DemoSummary) -> None:
    producers = {
        s.context.span_id: s
        for s in spans
        if s.kind is SpanKind.PRODUCER and s.name == "send orders.created"
    }
    consumers = [s for s in spans if s.kind is SpanKind.CONSUMER and "orders.created" in s.name]
    consumer_ids = {s.context.span_id for s in consumers}
    summary.producer_spans = len(producers)
    summary.consumer_spans = len(consumers)
    summary.consumer_spans_linked = sum(
        1 for s in consumers if any(link.context.span_id in producers for link in s.links)
    )
    summary.hops_in_trace = sum(
        1
        for s in spans
        if s.name == "send orders.accepted" and s.parent is not None
        if s.parent.span_id in consumer_ids
    )


def _print_results(latest: dict[tuple[str, str], CustomerRevenue], out: TextIO) -> None:
    """Revenue per customer over all windows, as the results subscriber saw it."""
    per_customer: dict[str, tuple[float, int, int]] = {}
    for row in latest.values():
        revenue, orders, windows = per_customer.get(row.customer, (0.0, 0, 0))
        per_customer[row.customer] = (revenue + row.revenue, orders + row.orders, windows + 1)
    for customer, (revenue, orders, windows) in sorted(per_customer.items()):
        out.write(
            f"  {customer:<9} revenue {revenue:>10.2f} from {orders:>4} orders "
            f"in {windows} one-minute windows\n"
        )


async def _dead_letters(js: JetStreamContext) -> int:
    info = await js.stream_info(DEAD_LETTER_STREAM)
    return int(info.state.messages)


class _SparkRun:
    """The Spark part, run in a worker thread; ``stop()`` ends it from another thread."""

    def __init__(self) -> None:
        self.session: Any = None
        self.stopped = False

    def stop(self) -> None:
        """Stop the running query and the session (a Ctrl-C must not wait for them)."""
        self.stopped = True
        session = self.session
        if session is None:
            return
        with contextlib.suppress(Exception):
            for query in session.streams.active:
                query.stop()


def _start_spark(config: DemoConfig, log_dir: str) -> Any:
    """A classic session on ``config.master``, or a Connect one to ``config.remote``.

    Raises:
        DemoError: Spark could not start (bad master URL, broken Java, no server).
    """
    from goflux.transports import spark as gspark  # noqa: PLC0415 - starts a JVM

    where = f"Spark Connect server {config.remote}" if config.remote else f"master {config.master}"
    jvm_log = None if config.spark_logs else os.path.join(log_dir, "spark.log")
    try:
        if config.remote:
            return gspark.connect_session(config.remote)
        spark = gspark.local_session(
            config.master,
            app_name="goflux-demo",
            jvm_log=jvm_log,
            **{"spark.ui.showConsoleProgress": "false"},
        )
    except Exception as exc:
        tail = ""
        if jvm_log is not None and os.path.exists(jvm_log):
            with open(jvm_log, encoding="utf-8", errors="replace") as log:
                tail = "\n" + "".join(log.readlines()[-20:])
        raise DemoError(f"Spark did not start ({where}): {exc}{tail}") from exc
    if not config.spark_logs:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def _spark_part(
    url: str, config: DemoConfig, sequences: int, progress: Progress, run: _SparkRun
) -> tuple[int, int]:
    """Run the Spark job; return (batches, results published).

    Raises:
        DemoError: Spark could not start (bad master URL, broken Java, no server).
    """
    from goflux.demo.analytics import revenue_job  # noqa: PLC0415 - starts a JVM
    from goflux.transports import spark as gspark  # noqa: PLC0415

    def on_progress(history: list[gspark.SinkStats]) -> None:
        results = sum(stats.published for stats in history)
        progress.update(spark_batches=len(history), results_published=results, force=True)

    with tempfile.TemporaryDirectory(prefix="goflux-demo-") as work:
        spark = _start_spark(config, work)
        run.session = spark
        try:
            publisher = revenue_job(
                spark,
                url,
                config.checkpoint or os.path.join(work, "checkpoint"),
                # The bound counts stream sequences, created and accepted orders alike.
                max_messages_per_trigger=max(1, -(-sequences // max(config.batches, 1))),
                on_progress=on_progress,
            )
            history = publisher.history
        finally:
            run.session = None
            spark.stop()
    if run.stopped:
        raise DemoError("the Spark job was stopped")
    unique = sum(stats.published - stats.duplicates for stats in history)
    return len(history), unique


def _expect(orders: list[Order], summary: DemoSummary) -> set[str]:
    """Record what the orders should produce; return the flaky ones."""
    valid = [o for o in orders if o.amount > 0]
    flaky = flaky_orders(orders)
    summary.published = len(orders)
    summary.valid = len(valid)
    summary.invalid = len(orders) - len(valid)
    summary.flaky = len(flaky)
    summary.expected_revenue = round(sum(o.amount for o in valid), 2)
    return flaky


async def _run(url: str, config: DemoConfig, summary: DemoSummary) -> None:
    out = config.out
    orders = make_orders(config.orders)
    flaky = _expect(orders, summary)

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(tracer_provider=provider)
    progress = Progress(out)

    # No reconnecting and no per-attempt tracebacks: an unreachable server is one line.
    nc = await ConnectionOptions(servers=(url,)).connect(name="goflux-demo")
    try:
        js = nc.jetstream()
        await _provision(js)
        out.write(f"1-2. shop and payment service ({len(orders)} orders)\n")
        service = await _run_service(js, orders, flaky, telemetry, progress, config.timeout)
        progress.done()
        counts = service.counts
        summary.resent = service.resent
        summary.stored_once = (await js.stream_info(ORDER_STREAM)).state.messages - counts.accepted
        summary.accepted = counts.accepted
        summary.transient_failures = counts.retried
        summary.flaky_accepted_after_retries = sum(
            1 for order_id in flaky if counts.deliveries[order_id] == 3
        )
        summary.dead_lettered = await _dead_letters(js)
        _trace_counts(list(exporter.get_finished_spans()), summary)

        over = f" on Spark Connect at {redact_url(config.remote)}" if config.remote else ""
        out.write(f"3. Spark{over}: revenue per customer per minute (goflux source -> sink)\n")
        sequences = (await js.stream_info(ORDER_STREAM)).state.last_seq
        batches, published = await _spark_stage(url, config, sequences, progress)
        progress.done()
        summary.spark_batches, summary.results_published = batches, published

        out.write("4. results subscriber\n")
        latest, received = await _collect_results(js, published, timeout=30)
        summary.results_received = received
        _print_results(latest, out)
        summary.windows = len(latest)
        summary.aggregated_orders = sum(row.orders for row in latest.values())
        summary.aggregated_revenue = round(sum(row.revenue for row in latest.values()), 2)
    finally:
        await nc.close()
        if config.traces:
            _write_traces(exporter, config.traces)
        provider.shutdown()


async def _spark_stage(
    url: str, config: DemoConfig, sequences: int, progress: Progress
) -> tuple[int, int]:
    """Run the Spark part in a thread; a cancellation (Ctrl-C) stops the query first."""
    spark_run = _SparkRun()
    work = asyncio.ensure_future(
        asyncio.to_thread(_spark_part, url, config, sequences, progress, spark_run)
    )
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        spark_run.stop()  # before the embedded server goes away
        with contextlib.suppress(BaseException):
            await work
        raise


def _write_traces(exporter: InMemorySpanExporter, path: str) -> None:
    """Every finished span as one compact JSON object per line."""
    with open(path, "w", encoding="utf-8") as file:
        for span in exporter.get_finished_spans():
            file.write(json.dumps(json.loads(span.to_json())) + "\n")


async def run_demo(config: DemoConfig | None = None) -> DemoSummary:
    """Run the whole demo and return its summary (``summary.ok`` tells if all held).

    Raises:
        DemoError: Java is missing, or a stage did not finish in time.
        NatsServerNotFound: No nats-server binary to start (and no ``url`` given).
    """
    config = config or DemoConfig()
    if config.remote is None:  # a Connect client needs no Java here
        _java()
    began = time.perf_counter()
    summary = DemoSummary()
    async with contextlib.AsyncExitStack() as stack:
        # Retries and dead letters are the demo's subject, shown in its counters; the
        # transports' per-failure logs would drown them. Levels are restored after.
        for name in ("goflux.middleware", "goflux.transports", "py4j"):
            logger = logging.getLogger(name)
            stack.callback(logger.setLevel, logger.level)
            logger.setLevel(logging.CRITICAL)
        url = config.url
        if url is None:
            server = await stack.enter_async_context(NatsServer(jetstream=True))
            url = server.url
            config.out.write(f"embedded nats-server on {url} (set NATS_URL to use another)\n")
        else:
            config.out.write(f"nats-server at {redact_url(url)}\n")
        await _run(url, config, summary)
    summary.seconds = time.perf_counter() - began
    summary.checks = check(summary)
    return summary


def run_and_print(
    config: DemoConfig | None = None, *, report: Callable[[DemoSummary], None] | None = None
) -> int:
    """Run the demo, print the summary and the next steps; return 0 if every check held."""
    config = config or DemoConfig(url=os.environ.get("NATS_URL") or None)
    summary = asyncio.run(run_demo(config))
    print_summary(summary, config.out)
    print_next_steps(config.out)
    if report is not None:
        report(summary)
    return 0 if summary.ok else 1
