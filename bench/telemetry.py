"""JetStream with OpenTelemetry on: what tracing and metrics cost, against the SDK's floor.

Each setup is one set of SDK providers: a batch span processor feeding an exporter
that drops the spans (the SDK's whole cost without I/O) and an in-memory metric
reader. Every message in the stream carries a ``traceparent`` (published with tracing
on), so a consumer span always has a producer to link to. Sampling is
``ParentBased(TraceIdRatioBased(r))``, as a service configures it; a consumer span is
a root (it links to its producer), so the ratio decides.

The floor is the SDK doing the same signals by hand in raw nats-py's fastest consumer
(the callback pull of the consume table), in the same rounds: per message what the
conventions ask for — extract the producer's context, start a CONSUMER span with its
attributes and a link, make it current while the message is decoded, end it, record
``messaging.process.duration`` and add to ``messaging.client.consumed.messages``. So
the floor pays what the SDK costs inside a real consumer (its allocations in a real
heap, the span processor's thread beside the event loop), as goflux does. A side's
telemetry CPU per message is its case's CPU per message less its telemetry-off case's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import nats
from nats.aio.msg import Msg
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.propagate import get_global_textmap
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Link, NoOpTracerProvider, SpanKind
from opentelemetry.util.types import AttributeValue

from bench.harness import Table, interleave
from bench.jetstream import (
    STREAM,
    DroppingExporter,
    goflux_consume,
    goflux_pipelined,
    goflux_sequential,
    raw_callback_pull,
    stored_by,
)
from bench.payload import ADAPTER, ORDER, Order
from bench.sizes import Sizes
from goflux import JsonCodec, Telemetry
from goflux._otel.semconv import DURATION_BUCKETS
from goflux.testing import NatsServer
from goflux.transports import jetstream

OFF = "telemetry off"
METRICS = "metrics only (no tracer provider)"
SAMPLED = "1 % sampled traces + metrics"
TRACED = "100 % traces + metrics"
SETUPS: dict[str, float | None] = {METRICS: None, SAMPLED: 0.01, TRACED: 1.0}
"""The setups with telemetry on, and their trace sampling ratio (None: no tracing)."""

SUBJECT = "bench.traced"


@dataclass
class Providers:
    """One setup's SDK providers (None where the setup has none)."""

    tracer: TracerProvider | None
    meter: MeterProvider | None

    @classmethod
    def make(cls, ratio: float | None, *, metrics: bool = True) -> Providers:
        tracer = None
        if ratio is not None:
            tracer = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
            tracer.add_span_processor(BatchSpanProcessor(DroppingExporter()))
        meter = MeterProvider(metric_readers=[InMemoryMetricReader()]) if metrics else None
        return cls(tracer, meter)

    def telemetry(self) -> Telemetry:
        return Telemetry(
            tracer_provider=self.tracer or NoOpTracerProvider(),
            meter_provider=self.meter or NoOpMeterProvider(),
        )

    def shutdown(self) -> None:
        if self.tracer is not None:
            self.tracer.shutdown()
        if self.meter is not None:
            self.meter.shutdown()


def off() -> Telemetry:
    """Telemetry with OpenTelemetry's no-op providers: nothing recorded."""
    return Providers(None, None).telemetry()


# ----------------------------------------------------------------------- the floor


class ByHand:
    """One consumed message's signals made with the SDK by hand, around its decoding."""

    def __init__(self, providers: Providers) -> None:
        assert providers.meter is not None
        meter = providers.meter.get_meter("by-hand")
        self._duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._consumed = meter.create_counter(
            "messaging.client.consumed.messages", unit="{message}"
        )
        self._tracer = (
            providers.tracer.get_tracer("by-hand") if providers.tracer is not None else None
        )
        self._propagator = get_global_textmap()
        self._attributes: dict[str, AttributeValue] = {
            "messaging.system": "nats-jetstream",
            "messaging.operation.name": "process",
            "messaging.consumer.group.name": "by-hand",
            "messaging.destination.name": SUBJECT,
        }

    def decode(self, msg: Msg) -> Order:
        """Decode ``msg`` inside its CONSUMER span; record the metrics."""
        start = time.perf_counter()
        tracer = self._tracer
        span: trace.Span | None = None
        token = None
        if tracer is not None:
            remote = self._propagator.extract(msg.headers or {})
            producer = trace.get_current_span(remote).get_span_context()
            parent = trace.set_span_in_context(trace.INVALID_SPAN, remote)
            span = tracer.start_span(
                f"process {SUBJECT}",
                context=parent,
                kind=SpanKind.CONSUMER,
                attributes={
                    **self._attributes,
                    "messaging.operation.type": "process",
                    "messaging.message.body.size": len(msg.data),
                    "messaging.nats.stream": STREAM,
                    "messaging.nats.stream.sequence": msg.metadata.sequence.stream,
                    "messaging.nats.delivery.count": msg.metadata.num_delivered,
                },
                links=[Link(producer)],
            )
            token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            return ADAPTER.validate_json(msg.data)
        finally:
            if span is not None and token is not None:
                otel_context.detach(token)
                span.end()
            self._duration.record(time.perf_counter() - start, self._attributes)
            self._consumed.add(1, self._attributes)


def plain_decode(msg: Msg) -> Order:
    """Decode ``msg`` (the raw side's telemetry-off case, through the same hook)."""
    return ADAPTER.validate_json(msg.data)


def raw_name(setup: str) -> str:
    """The raw side's row for ``setup``."""
    return f"raw callback pull, {setup}" + (", SDK by hand" if setup != OFF else "")


@dataclass
class Cost:
    """One setup's telemetry CPU per message: goflux's and the SDK floor's."""

    setup: str
    goflux_us: float
    floor_us: float

    @property
    def ratio(self) -> float:
        return self.goflux_us / self.floor_us


def costs(table: Table) -> list[Cost]:
    """Each side's telemetry CPU per message: its CPU less its telemetry-off case's."""
    goflux_off = table.results[OFF].cpu
    raw_off = table.results[raw_name(OFF)].cpu
    return [
        Cost(
            setup,
            table.results[setup].cpu - goflux_off,
            table.results[raw_name(setup)].cpu - raw_off,
        )
        for setup in SETUPS
    ]


def cost_markdown(found: list[Cost]) -> str:
    lines = [
        "### Telemetry CPU per consumed message: goflux against the SDK's floor",
        "",
        "Each side's client CPU per message less its own telemetry-off case's, from the "
        "consume table above (same rounds). The floor is raw nats-py's callback pull "
        "with the same signals made by hand with the SDK.",
        "",
        "| setup | goflux µs/msg | SDK floor µs/msg | goflux / floor |",
        "|---|---:|---:|---:|",
    ]
    lines.extend(
        f"| {c.setup} | {c.goflux_us:.2f} | {c.floor_us:.2f} | {c.ratio:.2f} |" for c in found
    )
    return "\n".join(lines)


# ------------------------------------------------------------------------- the run


def run(rounds: int, sizes: Sizes) -> tuple[list[Table], list[Cost], str]:
    """The consume and publish tables, the per-message costs and their markdown."""
    loop = asyncio.new_event_loop()
    server = NatsServer().start()
    setups = {name: Providers.make(ratio) for name, ratio in SETUPS.items()}
    producer = Providers.make(1.0, metrics=False)  # every stored message has a traceparent
    try:
        nc = loop.run_until_complete(nats.connect(server.url))
        js = nc.jetstream(publish_async_max_pending=sizes.window)
        loop.run_until_complete(
            jetstream.ensure_stream(js, name=STREAM, subjects=["bench.>"], storage="file")
        )
        traced = jetstream.Publisher(js, JsonCodec(Order), telemetry=producer.telemetry())
        loop.run_until_complete(
            traced.publish_many(
                (jetstream.Outgoing(SUBJECT, ORDER) for _ in range(sizes.consumed)),
                window=sizes.window,
            )
        )
        telemetries = {OFF: off(), **{name: p.telemetry() for name, p in setups.items()}}
        decoders: dict[str, Callable[[Msg], Order]] = {
            OFF: plain_decode,
            **{name: ByHand(p).decode for name, p in setups.items()},
        }

        def on(make: Callable[[], Awaitable[int]]) -> Callable[[], int]:
            return lambda: loop.run_until_complete(make())

        n = sizes.consumed
        consume = Table(
            "telemetry",
            f"JetStream consume with telemetry ({n:,} traced messages per round)",
            interleave(
                {
                    **{
                        name: on(lambda tel=tel: goflux_consume(js, n, SUBJECT, telemetry=tel))
                        for name, tel in telemetries.items()
                    },
                    **{
                        raw_name(name): on(
                            lambda decode=decode: raw_callback_pull(js, n, SUBJECT, decode=decode)
                        )
                        for name, decode in decoders.items()
                    },
                },
                rounds,
                expected=n,
            ),
            OFF,
            note="Every message carries a `traceparent`. Sampling: "
            "`ParentBased(TraceIdRatioBased(r))`; spans go to a batch span processor "
            "with an exporter that drops them, metrics to an in-memory reader. The raw "
            "rows are the floor: raw nats-py's callback pull with the same signals made "
            "by hand with the SDK. Ratios are to goflux with telemetry off.",
            versus="off",
        )
        publishers = {
            name: jetstream.Publisher(js, JsonCodec(Order), telemetry=telemetries[name])
            for name in (OFF, SAMPLED)
        }

        def stored(make: Callable[[], Awaitable[object]]) -> Callable[[], int]:
            return on(lambda: stored_by(js, make()))

        publish = Table(
            "telemetry_publish",
            "JetStream publish with telemetry, waiting for each PubAck",
            interleave(
                {
                    name: stored(lambda pub=pub: goflux_sequential(pub, sizes.sequential))
                    for name, pub in publishers.items()
                },
                rounds,
                expected=sizes.sequential,
            ),
            OFF,
            versus="off",
        )
        pipelined = Table(
            "telemetry_pipelined",
            f"JetStream pipelined publish with telemetry ({sizes.window:,} PubAcks in flight)",
            interleave(
                {
                    name: stored(
                        lambda pub=pub: goflux_pipelined(pub, sizes.pipelined, sizes.window)
                    )
                    for name, pub in publishers.items()
                },
                rounds,
                expected=sizes.pipelined,
            ),
            OFF,
            versus="off",
        )
        loop.run_until_complete(nc.close())
    finally:
        for providers in (*setups.values(), producer):
            providers.shutdown()
        server.stop()
        loop.close()
    found = costs(consume)
    return [consume, publish, pipelined], found, cost_markdown(found)
