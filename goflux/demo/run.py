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
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TextIO

import nats
from nats.js import JetStreamContext
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from goflux import BytesCodec, GofluxError, JsonCodec, Message, Telemetry, chain
from goflux.demo.model import CustomerRevenue, Order, make_orders
from goflux.demo.service import FlakyGateway, PaymentService
from goflux.middleware import DeadLetter, ExponentialBackoff, RetryPolicy, retry_ack
from goflux.testing import NatsServer
from goflux.transports import jetstream

__all__ = (
    "DemoConfig",
    "DemoError",
    "DemoSummary",
    "Progress",
    "main",
    "print_summary",
    "run_demo",
)


class DemoError(GofluxError):
    """The demo cannot run here (no Java, no server) or did not finish in time."""


@dataclass(frozen=True)
class DemoConfig:
    """How big the demo is and where it runs.

    Attributes:
        orders: Orders the shop publishes.
        url: A NATS server with JetStream; None starts an embedded one.
        master: Spark master URL (``local[*]``, or a cluster's).
        batches: About how many Spark micro-batches the orders are read in.
        timeout: Seconds the service may take to settle every order.
        out: Where progress and the summary are printed.
    """

    orders: int = 500
    url: str | None = None
    master: str = "local[*]"
    batches: int = 3
    timeout: float = 120.0
    out: TextIO = field(default=sys.stdout, repr=False)


@dataclass
class DemoSummary:
    """What the demo measured, and whether each promise held."""

    published: int = 0
    valid: int = 0
    accepted: int = 0
    flaky: int = 0
    flaky_accepted_after_retries: int = 0
    transient_failures: int = 0
    invalid: int = 0
    dead_lettered: int = 0
    spark_batches: int = 0
    results_published: int = 0
    results_received: int = 0
    windows: int = 0
    aggregated_orders: int = 0
    aggregated_revenue: float = 0.0
    expected_revenue: float = 0.0
    producer_spans: int = 0
    consumer_spans: int = 0
    consumer_spans_linked: int = 0
    hops_in_trace: int = 0
    seconds: float = 0.0
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every check held."""
        return bool(self.checks) and all(self.checks.values())

    def as_dict(self) -> dict[str, object]:
        """The summary as plain data (for ``--summary-json``)."""
        return {**asdict(self), "ok": self.ok}


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


def _java() -> None:
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    raise DemoError(
        "the Spark part of the demo needs Java 17 or newer: install a JDK "
        "(e.g. `apt install openjdk-17-jre-headless`) or set JAVA_HOME"
    )


async def _provision(js: JetStreamContext) -> None:
    await jetstream.ensure_stream(js, name="ORDERS", subjects=["orders.>"])
    await jetstream.ensure_stream(js, name="ORDERS_DLQ", subjects=["deadletter.orders"])
    await jetstream.ensure_stream(js, name="REVENUE", subjects=["revenue.>"])
    await jetstream.ensure_consumer(
        js, stream="ORDERS", name="payments", filter_subject="orders.created", ack_wait=30
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
        stream="ORDERS",
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
) -> dict[tuple[str, str], CustomerRevenue]:
    """The latest version of every (customer, window) result on ``revenue.by_customer``."""
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
        return latest
    async with jetstream.Subscriber(js, JsonCodec(CustomerRevenue), stream="REVENUE") as sub:
        await sub.start("revenue.by_customer", keep)
        try:
            await asyncio.wait_for(all_in.wait(), timeout)
        except TimeoutError:
            raise DemoError(f"received {received} of {expected} Spark results") from None
    return latest


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


async def _dead_letters(js: JetStreamContext) -> int:
    info = await js.stream_info("ORDERS_DLQ")
    return int(info.state.messages)


def _spark_part(
    url: str, config: DemoConfig, sequences: int, progress: Progress
) -> tuple[int, int]:
    """Run the Spark job; return (batches, results published)."""
    from goflux.demo.analytics import revenue_job  # noqa: PLC0415 - starts a JVM
    from goflux.transports import spark as gspark  # noqa: PLC0415

    spark = gspark.local_session(
        config.master, app_name="goflux-demo", **{"spark.ui.showConsoleProgress": "false"}
    )
    spark.sparkContext.setLogLevel("ERROR")
    batches = results = 0

    def on_batch(batch_id: int, stats: gspark.SinkStats) -> None:
        nonlocal batches, results
        batches += 1
        results += stats.published
        progress.update(spark_batches=batches, results_published=results, force=True)

    try:
        with tempfile.TemporaryDirectory(prefix="goflux-demo-") as checkpoint:
            publisher = revenue_job(
                spark,
                url,
                checkpoint,
                # The bound counts stream sequences, created and accepted orders alike.
                max_messages_per_trigger=max(1, -(-sequences // max(config.batches, 1))),
                on_batch=on_batch,
            )
    finally:
        spark.stop()
    unique = sum(stats.published - stats.duplicates for stats in publisher.history)
    return batches, unique


async def _run(url: str, config: DemoConfig, summary: DemoSummary) -> None:
    out = config.out
    orders = make_orders(config.orders)
    invalid = {o.id for o in orders if o.amount <= 0}
    flaky = {o.id for n, o in enumerate(orders) if n % 7 == 3 and o.id not in invalid}
    valid_orders = [o for o in orders if o.id not in invalid]
    summary.published = len(orders)
    summary.valid = len(valid_orders)
    summary.invalid = len(invalid)
    summary.flaky = len(flaky)
    summary.expected_revenue = round(sum(o.amount for o in valid_orders), 2)

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(tracer_provider=provider)
    progress = Progress(out)

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await _provision(js)
        out.write(f"1-2. shop and payment service ({len(orders)} orders)\n")
        service = await _run_service(js, orders, flaky, telemetry, progress, config.timeout)
        progress.done()
        counts = service.counts
        summary.accepted = counts.accepted
        summary.transient_failures = counts.retried
        summary.flaky_accepted_after_retries = sum(
            1 for order_id in flaky if counts.deliveries[order_id] == 3
        )
        summary.dead_lettered = await _dead_letters(js)
        _trace_counts(list(exporter.get_finished_spans()), summary)

        out.write("3. Spark: revenue per customer per minute (goflux source -> sink)\n")
        sequences = (await js.stream_info("ORDERS")).state.last_seq
        batches, published = await asyncio.to_thread(_spark_part, url, config, sequences, progress)
        progress.done()
        summary.spark_batches, summary.results_published = batches, published

        out.write("4. results subscriber\n")
        latest = await _collect_results(js, published, timeout=30)
        summary.results_received = published
        summary.windows = len(latest)
        summary.aggregated_orders = sum(row.orders for row in latest.values())
        summary.aggregated_revenue = round(sum(row.revenue for row in latest.values()), 2)
    finally:
        await nc.close()
        provider.shutdown()


def _checks(summary: DemoSummary) -> dict[str, bool]:
    return {
        "every valid order accepted once": summary.accepted == summary.valid,
        "every order in the aggregates exactly once": summary.aggregated_orders == summary.valid,
        "revenue matches the orders": abs(summary.aggregated_revenue - summary.expected_revenue)
        < 0.01 * max(summary.windows, 1),
        "flaky orders retried and accepted": summary.flaky_accepted_after_retries == summary.flaky
        and summary.transient_failures == 2 * summary.flaky,
        "invalid orders dead-lettered": summary.dead_lettered == summary.invalid,
        "Spark results published back": summary.results_published > 0
        and summary.results_received == summary.results_published,
        "consumer spans linked to producers": summary.consumer_spans > 0
        and summary.consumer_spans_linked == summary.consumer_spans,
        "trace continues across the hop": summary.hops_in_trace == summary.valid,
    }


def print_summary(summary: DemoSummary, out: TextIO) -> None:
    """Print the summary table and the checks."""
    rows = [
        ("orders published", summary.published),
        ("accepted by the payment service", summary.accepted),
        ("transient failures retried", summary.transient_failures),
        ("flaky orders accepted after 2 retries", f"{summary.flaky_accepted_after_retries}"
         f" of {summary.flaky}"),
        ("dead-lettered (invalid amount)", f"{summary.dead_lettered} of {summary.invalid}"),
        ("Spark micro-batches", summary.spark_batches),
        ("results published back / received", f"{summary.results_published} / "
         f"{summary.results_received}"),
        ("customer-minute windows", summary.windows),
        ("orders in the aggregates", f"{summary.aggregated_orders} (expected {summary.valid})"),
        ("revenue in the aggregates", f"{summary.aggregated_revenue:.2f} (expected "
         f"{summary.expected_revenue:.2f})"),
        ("consumer spans linked to their producer", f"{summary.consumer_spans_linked} of "
         f"{summary.consumer_spans}"),
        ("accepted publishes inside the consumer's trace", summary.hops_in_trace),
        ("seconds", f"{summary.seconds:.1f}"),
    ]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    out.write("\nsummary\n")
    for name, value in rows:
        out.write(f"  {name:<{width}}  {value}\n")
    out.write("\nchecks\n")
    for name, held in summary.checks.items():
        out.write(f"  [{'ok' if held else 'FAILED'}] {name}\n")
    out.flush()


async def run_demo(config: DemoConfig | None = None) -> DemoSummary:
    """Run the whole demo and return its summary (``summary.ok`` tells if all held).

    Raises:
        DemoError: Java is missing, or a stage did not finish in time.
        NatsServerNotFound: No nats-server binary to start (and no ``url`` given).
    """
    config = config or DemoConfig()
    _java()
    began = time.perf_counter()
    summary = DemoSummary()
    for name in ("goflux.middleware", "goflux.transports", "py4j"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    async with contextlib.AsyncExitStack() as stack:
        url = config.url
        if url is None:
            server = await stack.enter_async_context(NatsServer(jetstream=True))
            url = server.url
            config.out.write(f"embedded nats-server on {url} (set NATS_URL to use another)\n")
        else:
            config.out.write(f"nats-server at {url}\n")
        await _run(url, config, summary)
    summary.seconds = time.perf_counter() - began
    summary.checks = _checks(summary)
    return summary


def main(
    config: DemoConfig | None = None, *, report: Callable[[DemoSummary], None] | None = None
) -> int:
    """Run the demo, print the summary; return 0 if every check held, else 1."""
    config = config or DemoConfig(url=os.environ.get("NATS_URL") or None)
    summary = asyncio.run(run_demo(config))
    print_summary(summary, config.out)
    if report is not None:
        report(summary)
    return 0 if summary.ok else 1
