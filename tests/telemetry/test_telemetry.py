from __future__ import annotations

from collections.abc import Sequence

import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.metrics.export import Histogram, Metric, Sum
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanKind, StatusCode, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes, AttributeValue

from goflux import DecodeError, JsonCodec, Message, Telemetry
from goflux._otel.scopes import HeaderGetter, HeaderSetter, ProcessScopes, PublishScopes
from goflux._otel.semconv import DURATION_BUCKETS, error_type
from goflux.transports import channel
from tests.conftest import Otel
from tests.helpers import Inbox
from tests.models import Order, order

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def points(metric: Metric) -> list[dict[str, object]]:
    assert isinstance(metric.data, Sum | Histogram)
    return [dict(p.attributes or {}) for p in metric.data.data_points]


def test_setter_writes_lowercase_and_getter_reads_any_casing() -> None:
    carrier: dict[str, str] = {}
    HeaderSetter().set(carrier, "TraceParent", TRACEPARENT)
    assert carrier == {"traceparent": TRACEPARENT}
    getter = HeaderGetter()
    assert getter.get({"Traceparent": TRACEPARENT}, "traceparent") == [TRACEPARENT]
    assert getter.get({"TRACEPARENT": TRACEPARENT}, "traceparent") == [TRACEPARENT]
    assert getter.get({"other": "x"}, "traceparent") is None
    assert getter.keys({"a": "1", "B": "2"}) == ["a", "B"]


def test_publish_injects_lowercase_trace_context(otel: Otel) -> None:
    carrier: dict[str, str] = {}
    with PublishScopes(otel.telemetry, "go_channel").open("a.b", carrier):
        pass
    span = otel.span("send a.b")
    assert span.context is not None
    assert carrier["traceparent"] == (
        f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-"
        f"{span.context.trace_flags:02x}"
    )


def test_consumer_links_to_a_go_style_capitalised_traceparent(otel: Otel) -> None:
    with ProcessScopes(otel.telemetry, "nats").open("orders.1", {"Traceparent": TRACEPARENT}):
        pass
    span = otel.span("process orders.1")
    assert span.parent is None
    [link] = span.links
    assert f"{link.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert f"{link.context.span_id:016x}" == "b7ad6b7169203331"


def test_consumer_without_trace_context_has_no_links(otel: Otel) -> None:
    with ProcessScopes(otel.telemetry, "nats").open("orders.1", {}):
        pass
    with ProcessScopes(otel.telemetry, "nats").open("orders.2", None):
        pass
    assert all(not s.links for s in otel.spans())


def test_producer_span_is_a_child_of_the_current_span(otel: Otel) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    with (
        tracer.start_as_current_span("request") as request,
        PublishScopes(otel.telemetry, "go_channel").open("a.b", {}),
    ):
        pass
    producer = otel.span("send a.b")
    assert producer.parent is not None
    assert producer.parent.span_id == request.get_span_context().span_id


def test_consumer_span_is_current_during_processing_and_keeps_baggage(otel: Otel) -> None:
    carrier: dict[str, str] = {}
    token = otel_context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        with PublishScopes(otel.telemetry, "go_channel").open("a.b", carrier):
            pass
    finally:
        otel_context.detach(token)
    assert "baggage" in carrier
    tracer = otel.tracer_provider.get_tracer("test")
    with ProcessScopes(otel.telemetry, "go_channel").open("a.b", carrier) as scope:
        assert trace.get_current_span() is scope.span
        assert baggage.get_baggage("tenant") == "acme"
        with tracer.start_as_current_span("work"):
            pass
    assert trace.get_current_span() is trace.INVALID_SPAN
    work = otel.span("work")
    assert work.parent is not None
    assert work.parent.span_id == otel.span("process a.b").context.span_id  # type: ignore[union-attr]


def test_wildcard_template_names_the_span(otel: Otel) -> None:
    with ProcessScopes(otel.telemetry, "go_channel", template="orders.>").open("orders.eu.123", {}):
        pass
    span = otel.span("process orders.>")
    attrs = dict(span.attributes or {})
    assert attrs["messaging.destination.name"] == "orders.eu.123"
    assert attrs["messaging.destination.template"] == "orders.>"


def test_failures_set_error_type_on_spans_and_metrics(otel: Otel) -> None:
    with (
        pytest.raises(KeyError),
        ProcessScopes(otel.telemetry, "go_channel", consumer_group="g").open(
            "a.b", {}, body_size=3
        ),
    ):
        raise KeyError("x")
    with (
        pytest.raises(ValueError, match="bad"),
        PublishScopes(otel.telemetry, "go_channel").open("a.b", {}),
    ):
        raise ValueError("bad")
    consumer = otel.span("process a.b")
    producer = otel.span("send a.b")
    for span, kind in ((consumer, "KeyError"), (producer, "ValueError")):
        assert span.status.status_code is StatusCode.ERROR
        assert dict(span.attributes or {})["error.type"] == kind
        assert any(e.name == "exception" for e in span.events)
    assert dict(consumer.attributes or {})["messaging.consumer.group.name"] == "g"
    assert dict(consumer.attributes or {})["messaging.message.body.size"] == 3
    metrics = otel.metrics()
    assert points(metrics["messaging.process.duration"])[0]["error.type"] == "KeyError"
    assert points(metrics["messaging.client.sent.messages"])[0]["error.type"] == "ValueError"
    # Delivery itself succeeded: the consumed counter carries no error.
    assert "error.type" not in points(metrics["messaging.client.consumed.messages"])[0]


def test_error_type_is_the_qualified_class_name() -> None:
    assert error_type(ValueError()) == "ValueError"
    assert error_type(DecodeError("x", type_name="T", size=0)) == "goflux.DecodeError"


async def test_the_four_metrics_with_semconv_buckets(otel: Otel) -> None:
    bus = channel.Bus(codec=JsonCodec(Order))
    inbox: Inbox[Order] = Inbox()
    async with (
        channel.Subscriber(bus, queue="billing", telemetry=otel.telemetry) as sub,
        channel.Publisher(bus, telemetry=otel.telemetry) as pub,
    ):
        subscription = await sub.start("orders.*", inbox)
        for n in range(3):
            await pub.publish("orders.created", order(n))
        await inbox.wait_for(3)
        await subscription.stop()

    metrics = otel.metrics()
    expected = {
        "messaging.client.sent.messages": "{message}",
        "messaging.client.consumed.messages": "{message}",
        "messaging.client.operation.duration": "s",
        "messaging.process.duration": "s",
    }
    assert {name: metrics[name].unit for name in expected} == expected
    for name in ("messaging.client.sent.messages", "messaging.client.consumed.messages"):
        data = metrics[name].data
        assert isinstance(data, Sum)
        assert sum(int(p.value) for p in data.data_points) == 3
    for name in ("messaging.client.operation.duration", "messaging.process.duration"):
        data = metrics[name].data
        assert isinstance(data, Histogram)
        [point] = data.data_points
        assert tuple(point.explicit_bounds) == DURATION_BUCKETS
        assert point.count == 3
    [sent] = points(metrics["messaging.client.sent.messages"])
    assert sent == {
        "messaging.system": "go_channel",
        "messaging.operation.name": "send",
        "messaging.destination.name": "orders.created",
    }
    # A wildcard subscription's metrics carry the template, not each subject: the
    # conventions keep messaging.destination.name out of metrics unless it has low
    # cardinality (spans keep it).
    [consumed] = points(metrics["messaging.client.consumed.messages"])
    assert consumed == {
        "messaging.system": "go_channel",
        "messaging.operation.name": "receive",  # as Go goflux: the duration's is process
        "messaging.destination.template": "orders.*",
        "messaging.consumer.group.name": "billing",
    }


async def test_decode_failures_are_recorded_on_the_consumer_span(otel: Otel) -> None:
    class RawOut:
        """Publishes raw bytes; subscribers decode them as Order."""

        def encode(self, value: bytes) -> bytes:
            return value

        def decode(self, data: bytes) -> Order:
            return JsonCodec(Order).decode(data)

    bus: channel.Bus[bytes] = channel.Bus(codec=RawOut())  # type: ignore[arg-type]
    handled: Inbox[object] = Inbox()
    sub = channel.Subscriber(bus, telemetry=otel.telemetry)
    subscription = await sub.start("orders.raw", handled)
    await channel.Publisher(bus, telemetry=otel.telemetry).publish("orders.raw", b"not json")
    await subscription.stop()
    span = otel.span("process orders.raw")
    assert dict(span.attributes or {})["error.type"] == "goflux.DecodeError"
    assert span.kind is SpanKind.CONSUMER
    assert handled.messages == []


def test_default_telemetry_is_shared_and_uses_globals() -> None:
    assert Telemetry.default() is Telemetry.default()
    assert Telemetry.default().propagator is not None


async def test_handler_sees_message_fields_inside_the_span(otel: Otel) -> None:
    seen: list[tuple[str, bool]] = []

    async def handler(msg: Message[Order]) -> None:
        seen.append((msg.subject, trace.get_current_span().get_span_context().is_valid))

    bus = channel.Bus(codec=JsonCodec(Order))
    sub = channel.Subscriber(bus, telemetry=otel.telemetry)
    subscription = await sub.start("a.b", handler)
    await channel.Publisher(bus, telemetry=otel.telemetry).publish("a.b", order())
    await subscription.stop()
    assert seen == [("a.b", True)]


class SeeingSampler(Sampler):
    """Records every link and attribute it is given at a span's start (and samples in)."""

    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, object], int]] = []

    def should_sample(
        self,
        parent_context: otel_context.Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        self.seen.append((dict(attributes or {}), len(links or ())))
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "SeeingSampler"


def sampled(sampler: Sampler) -> tuple[Telemetry, InMemorySpanExporter, TracerProvider]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    propagator = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    return Telemetry(tracer_provider=provider, propagator=propagator), exporter, provider


def test_a_sampler_of_its_own_sees_the_links_and_attributes_at_the_start() -> None:
    sampler = SeeingSampler()
    telemetry, exporter, _ = sampled(sampler)
    assert not telemetry.parent_only_sampling
    with ProcessScopes(telemetry, "nats", consumer_group="g").open(
        "orders.1", {"traceparent": TRACEPARENT}, attributes=lambda: {"x": 1}
    ):
        pass
    [(attributes, links)] = sampler.seen
    assert attributes["messaging.destination.name"] == "orders.1"
    assert attributes["messaging.consumer.group.name"] == "g"
    assert attributes["x"] == 1
    assert links == 1
    [span] = exporter.get_finished_spans()
    assert len(span.links) == 1


@pytest.mark.parametrize("header", ["baggage", "Baggage"])
def test_a_sampled_out_message_still_brings_its_baggage_and_records_no_span(header: str) -> None:
    telemetry, exporter, provider = sampled(ParentBased(TraceIdRatioBased(0.0)))
    assert telemetry.parent_only_sampling
    carrier = {"traceparent": TRACEPARENT, header: "tenant=acme"}
    tracer = provider.get_tracer("test")
    calls: list[int] = []

    def facts() -> dict[str, AttributeValue]:
        calls.append(1)
        return {"x": 1}

    with ProcessScopes(telemetry, "nats").open("orders.1", carrier, attributes=facts) as scope:
        assert not scope.recording
        assert baggage.get_baggage("tenant") == "acme"
        with tracer.start_as_current_span("work") as work:
            assert not work.is_recording()  # the handler's spans follow the decision
    assert exporter.get_finished_spans() == ()
    assert calls == []  # the attributes of a span nobody records are never built


def test_a_sampled_out_message_without_baggage_leaves_no_trace_context_behind() -> None:
    telemetry, exporter, _ = sampled(ParentBased(TraceIdRatioBased(0.0)))
    with ProcessScopes(telemetry, "nats").open("orders.1", {"traceparent": TRACEPARENT}):
        assert not trace.get_current_span().is_recording()
        assert baggage.get_all() == {}
    assert trace.get_current_span() is trace.INVALID_SPAN
    assert exporter.get_finished_spans() == ()
