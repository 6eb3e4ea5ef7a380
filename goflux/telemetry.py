"""OpenTelemetry tracing and metrics for every transport (messaging semantic conventions).

Publishing opens a PRODUCER span ``send <subject>`` whose context is injected into the
message headers. Processing opens a CONSUMER span ``process <destination>`` that LINKS
to the producer's span context instead of being its child: delivery is decoupled in
time, and a link is the one structure that also fits batches. The consumer span is the
current span while the handler runs, so work the handler does nests under it.

Metrics follow the conventions: ``messaging.client.sent.messages``,
``messaging.client.consumed.messages``, ``messaging.client.operation.duration`` and
``messaging.process.duration`` (seconds, with the conventions' bucket advice).
``error.type`` is set only when an operation fails.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, MutableMapping
from contextvars import Token
from types import TracebackType
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.propagators.textmap import Getter, Setter, TextMapPropagator
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.util.types import AttributeValue

from goflux._version import __version__

__all__ = (
    "DURATION_BUCKETS",
    "NULL_SCOPE",
    "HeaderGetter",
    "HeaderSetter",
    "NullScope",
    "ProcessScope",
    "PublishScope",
    "Telemetry",
    "error_type",
)

_SCOPE_NAME: Final = "goflux"

DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
"""Histogram bucket boundaries advised by the messaging semantic conventions."""

# Attribute keys (messaging semantic conventions).
SYSTEM: Final = "messaging.system"
OPERATION_NAME: Final = "messaging.operation.name"
OPERATION_TYPE: Final = "messaging.operation.type"
DESTINATION: Final = "messaging.destination.name"
DESTINATION_TEMPLATE: Final = "messaging.destination.template"
MESSAGE_ID: Final = "messaging.message.id"
CONSUMER_GROUP: Final = "messaging.consumer.group.name"
BODY_SIZE: Final = "messaging.message.body.size"
ERROR_TYPE: Final = "error.type"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
SETTLEMENT_OUTCOME: Final = "goflux.settlement.outcome"
SETTLEMENTS_METRIC: Final = "goflux.consumer.settlements"
REDELIVERIES_METRIC: Final = "goflux.consumer.redeliveries"
DROPPED_METRIC: Final = "goflux.consumer.dropped"
DEAD_LETTERS_METRIC: Final = "goflux.consumer.dead_letters"
DEAD_LETTER_REASON: Final = "goflux.dead_letter.reason"


def error_type(exc: BaseException) -> str:
    """Return the ``error.type`` value for an exception: its fully qualified class name."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


class HeaderGetter(Getter[Mapping[str, str]]):
    """Reads propagation fields from NATS-style headers, in any casing.

    NATS headers keep the casing they were written with; Go services that use an HTTP
    header carrier write ``Traceparent``. The exact key is tried first, then a
    case-insensitive match.
    """

    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        """Return the value of ``key`` (any casing) as a one-item list, or None."""
        value = carrier.get(key)
        if value is None:
            lowered = key.lower()
            for name, candidate in carrier.items():
                if name.lower() == lowered:
                    value = candidate
                    break
            else:
                return None
        return [value]

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        """Return every header name."""
        return list(carrier.keys())


class HeaderSetter(Setter[MutableMapping[str, str]]):
    """Writes propagation fields into NATS-style headers with lowercase keys."""

    def set(self, carrier: MutableMapping[str, str], key: str, value: str) -> None:
        """Store ``value`` under the lowercased ``key`` (``traceparent``, ``tracestate``)."""
        carrier[key.lower()] = value


_GETTER: Final = HeaderGetter()
_SETTER: Final = HeaderSetter()


class Telemetry:
    """Tracing, metrics and context propagation shared by the transports.

    Pass providers explicitly (tests, multi-tenant setups) or leave them out to use the
    OpenTelemetry globals, resolved lazily so configuring them after constructing a
    transport still works.

    Args:
        tracer_provider: Source of the tracer; default: the global provider.
        meter_provider: Source of the meter; default: the global provider.
        propagator: Writes/reads trace context in headers; default: the global one
            (W3C ``traceparent``/``tracestate`` and baggage unless configured).
    """

    __slots__ = (
        "_consumed",
        "_dead_letters",
        "_dropped",
        "_meter_proxy",
        "_metering_on",
        "_operation_duration",
        "_process_duration",
        "_propagator",
        "_redeliveries",
        "_sent",
        "_settlements",
        "_tracer",
        "_tracer_proxy",
        "_tracing_on",
    )

    _default: Telemetry | None = None

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        propagator: TextMapPropagator | None = None,
    ) -> None:
        self._tracing_on = False
        self._metering_on = False
        tp = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        mp = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        self._tracer = tp.get_tracer(_SCOPE_NAME, __version__)
        # Decided once: a real tracer is on for good, a no-op one off for good; only
        # the global placeholder (ProxyTracer) needs a look on each call.
        self._tracer_proxy: trace.ProxyTracer | None = None
        if isinstance(self._tracer, trace.ProxyTracer):
            self._tracer_proxy = self._tracer
        elif not isinstance(self._tracer, trace.NoOpTracer):
            self._tracing_on = True
        self._propagator = propagator
        meter = mp.get_meter(_SCOPE_NAME, __version__)
        self._meter_proxy: metrics.Meter | None = None
        if hasattr(meter, "_real_meter"):  # the global placeholder
            self._meter_proxy = meter
        elif not isinstance(meter, metrics.NoOpMeter):
            self._metering_on = True
        self._sent = meter.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Number of messages producers attempted to send to the broker.",
        )
        self._consumed = meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Number of messages that were delivered to the application.",
        )
        self._operation_duration = meter.create_histogram(
            "messaging.client.operation.duration",
            unit="s",
            description="Duration of messaging operations initiated by a client.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._process_duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Duration of processing operation.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._settlements = meter.create_counter(
            SETTLEMENTS_METRIC,
            unit="{message}",
            description="Settlements sent by consumers, by outcome (ack, nak, term, in_progress).",
        )
        self._dead_letters = meter.create_counter(
            DEAD_LETTERS_METRIC,
            unit="{message}",
            description="Messages sent to a dead-letter destination, by reason.",
        )
        self._dropped = meter.create_counter(
            DROPPED_METRIC,
            unit="{message}",
            description="Messages dropped because a slow consumer's pending limits overflowed.",
        )
        self._redeliveries = meter.create_counter(
            REDELIVERIES_METRIC,
            unit="{message}",
            description="Deliveries of messages that had been delivered before.",
        )

    def record_settlement(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Count one settlement; ``attributes`` carry ``goflux.settlement.outcome``."""
        if self.metering:
            self._settlements.add(1, attributes)

    def record_dead_letter(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Count one dead letter; ``attributes`` carry ``goflux.dead_letter.reason``."""
        if self.metering:
            self._dead_letters.add(1, attributes)

    def record_dropped(self, attributes: Mapping[str, AttributeValue], count: int) -> None:
        """Count messages a slow consumer dropped (its pending limits overflowed)."""
        if self.metering:
            self._dropped.add(count, attributes)

    def record_redelivery(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Count one delivery of a message that had been delivered before."""
        if self.metering:
            self._redeliveries.add(1, attributes)

    @classmethod
    def default(cls) -> Telemetry:
        """Return the shared instance built on the OpenTelemetry globals."""
        if cls._default is None:
            cls._default = cls()
        return cls._default

    @property
    def tracing(self) -> bool:
        """Whether spans are recorded: a real tracer provider is configured.

        False for the no-op provider and while the global provider is still the
        placeholder (nothing configured yet); spans, trace propagation and context
        switches are then skipped, and only metrics are recorded. Checked on every
        call, so configuring a provider later takes effect at once.
        """
        if self._tracing_on:
            return True
        proxy = self._tracer_proxy
        if proxy is None:
            return False  # a no-op tracer given explicitly stays no-op
        if getattr(trace, "_TRACER_PROVIDER", proxy) is None:
            return False  # no global provider set yet (one attribute read: the hot path)
        if isinstance(proxy._tracer, trace.NoOpTracer):  # the global placeholder, still unset
            return False
        self._tracing_on = True  # a real tracer stays real
        return True

    @property
    def metering(self) -> bool:
        """Whether metrics are recorded: a real meter provider is configured.

        Like :attr:`tracing`, checked on every call: metrics start as soon as a
        provider is configured.
        """
        if self._metering_on:
            return True
        proxy = self._meter_proxy
        if proxy is None:
            return False  # a no-op meter given explicitly stays no-op
        # The global meter stays a placeholder until a provider is set.
        real = getattr(proxy, "_real_meter", proxy)
        if real is None or isinstance(real, metrics.NoOpMeter):
            return False
        self._metering_on = True
        return True

    @property
    def active(self) -> bool:
        """Whether anything is recorded at all (:attr:`tracing` or :attr:`metering`)."""
        if self._tracing_on or self._metering_on:
            return True  # the common case once configured: no property calls
        return self.tracing or self.metering

    @property
    def propagator(self) -> TextMapPropagator:
        """The propagator in use (the global one unless one was given)."""
        if self._propagator is not None:
            return self._propagator
        return propagate.get_global_textmap()

    def publish(
        self,
        system: str,
        subject: str,
        carrier: MutableMapping[str, str],
        *,
        message_id: str | None = None,
        server_address: str | None = None,
        server_port: int | None = None,
    ) -> PublishScope | NullScope:
        """Return the scope of one publish; entering it injects trace context into ``carrier``.

        Args:
            system: ``messaging.system`` value (``channel``, ``nats``, ``nats-jetstream``).
            subject: The publish subject.
            carrier: Outgoing transport headers; trace fields are written lowercase.
            message_id: The message ID, if set.
            server_address: Broker host, when known.
            server_port: Broker port, when known.

        Returns :data:`NULL_SCOPE` when nothing is recorded (:attr:`active` is False).
        """
        if not self.active:
            return NULL_SCOPE
        return PublishScope(self, system, subject, carrier, message_id, server_address, server_port)

    def request(
        self,
        system: str,
        subject: str,
        carrier: MutableMapping[str, str],
        *,
        message_id: str | None = None,
        server_address: str | None = None,
        server_port: int | None = None,
    ) -> PublishScope | NullScope:
        """Return the scope of one request: a CLIENT span ``send <subject>``.

        Like :meth:`publish`, but the span is a client span: the caller waits for the
        reply, and the responder's span becomes its child.
        """
        if not self.active:
            return NULL_SCOPE
        return PublishScope(
            self,
            system,
            subject,
            carrier,
            message_id,
            server_address,
            server_port,
            SpanKind.CLIENT,
        )

    def respond(
        self,
        system: str,
        subject: str,
        carrier: Mapping[str, str] | None,
        *,
        template: str | None = None,
        message_id: str | None = None,
        body_size: int | None = None,
        consumer_group: str | None = None,
    ) -> ProcessScope | NullScope:
        """Return the scope of answering one request: a SERVER span, child of the caller.

        Request/reply is synchronous, so unlike :meth:`process` the span continues the
        requester's trace as its child instead of linking to it.
        """
        if not self.active:
            return NULL_SCOPE
        return ProcessScope(
            self,
            system,
            subject,
            carrier,
            template,
            message_id,
            body_size,
            consumer_group,
            None,
            None,
            None,
            SpanKind.SERVER,
            True,
        )

    def process(
        self,
        system: str,
        subject: str,
        carrier: Mapping[str, str] | None,
        *,
        template: str | None = None,
        message_id: str | None = None,
        body_size: int | None = None,
        consumer_group: str | None = None,
        server_address: str | None = None,
        server_port: int | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> ProcessScope | NullScope:
        """Return the scope of processing one message; the span links to the producer.

        Args:
            system: ``messaging.system`` value.
            subject: The concrete subject of the message.
            carrier: Incoming transport headers holding the producer's trace context.
            template: The subscription pattern when it differs from ``subject`` (a
                wildcard); it then names the span, keeping span names low-cardinality.
            message_id: The message ID, if set.
            body_size: Size of the payload in bytes, if known.
            consumer_group: Queue group or consumer name, if any.
            server_address: Broker host, when known.
            server_port: Broker port, when known.
            attributes: More span attributes (transport specifics such as the stream
                sequence); not added to metrics.

        Returns :data:`NULL_SCOPE` when nothing is recorded (:attr:`active` is False).
        """
        if not self.active:
            return NULL_SCOPE
        return ProcessScope(
            self,
            system,
            subject,
            carrier,
            template,
            message_id,
            body_size,
            consumer_group,
            server_address,
            server_port,
            attributes,
        )


def _base_attributes(
    system: str,
    operation: str,
    subject: str,
    template: str | None,
    consumer_group: str | None,
    server_address: str | None,
    server_port: int | None,
) -> dict[str, AttributeValue]:
    attrs: dict[str, AttributeValue] = {
        SYSTEM: system,
        OPERATION_NAME: operation,
        DESTINATION: subject,
    }
    if template is not None:
        attrs[DESTINATION_TEMPLATE] = template
    if consumer_group is not None:
        attrs[CONSUMER_GROUP] = consumer_group
    if server_address is not None:
        attrs[SERVER_ADDRESS] = server_address
    if server_port is not None:
        attrs[SERVER_PORT] = server_port
    return attrs


def _end_span(span: trace.Span, exc: BaseException | None, kind: str | None) -> None:
    if span is trace.INVALID_SPAN:
        return
    if exc is not None and kind is not None:
        span.set_attribute(ERROR_TYPE, kind)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.record_exception(exc)
    span.end()


class PublishScope:
    """One publish operation: a PRODUCER span plus the send metrics.

    Use as a context manager; an exception leaving it marks the span and metrics with
    ``error.type``. Call :meth:`set_body_size` once the payload is encoded. Without a
    configured tracer provider no span is made (and nothing is injected).
    """

    __slots__ = (
        "_carrier",
        "_kind",
        "_message_id",
        "_server_address",
        "_server_port",
        "_span",
        "_start",
        "_subject",
        "_system",
        "_tel",
    )

    def __init__(
        self,
        tel: Telemetry,
        system: str,
        subject: str,
        carrier: MutableMapping[str, str],
        message_id: str | None,
        server_address: str | None,
        server_port: int | None,
        kind: SpanKind = SpanKind.PRODUCER,
    ) -> None:
        self._tel = tel
        self._kind = kind
        self._system = system
        self._subject = subject
        self._carrier = carrier
        self._message_id = message_id
        self._server_address = server_address
        self._server_port = server_port
        self._span: trace.Span = trace.INVALID_SPAN
        self._start = 0.0

    def _attributes(self) -> dict[str, AttributeValue]:
        return _base_attributes(
            self._system,
            "send",
            self._subject,
            None,
            None,
            self._server_address,
            self._server_port,
        )

    def __enter__(self) -> PublishScope:
        tel = self._tel
        if tel.tracing:
            span_attrs = self._attributes()
            span_attrs[OPERATION_TYPE] = "send"
            if self._message_id is not None:
                span_attrs[MESSAGE_ID] = self._message_id
            span = tel._tracer.start_span(
                f"send {self._subject}", kind=self._kind, attributes=span_attrs
            )
            self._span = span
            tel.propagator.inject(
                self._carrier, context=trace.set_span_in_context(span), setter=_SETTER
            )
        self._start = time.perf_counter()
        return self

    def set_body_size(self, size: int) -> None:
        """Record the encoded payload size on the span."""
        span = self._span
        if span is not trace.INVALID_SPAN:
            span.set_attribute(BODY_SIZE, size)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        elapsed = time.perf_counter() - self._start
        kind = error_type(exc) if exc is not None else None
        _end_span(self._span, exc, kind)
        tel = self._tel
        if tel.metering:
            attrs = self._attributes()
            if kind is not None:
                attrs[ERROR_TYPE] = kind
            tel._sent.add(1, attrs)
            tel._operation_duration.record(elapsed, attrs)


class ProcessScope:
    """Processing of one received message: a CONSUMER span linked to the producer.

    While the scope is entered its span is the current span. An exception leaving it
    marks the span and the process metrics with ``error.type``. Without a configured
    tracer provider no span is made and the trace context is not read.
    """

    __slots__ = (
        "_body_size",
        "_carrier",
        "_consumer_group",
        "_extra",
        "_failure",
        "_kind",
        "_message_id",
        "_parented",
        "_server_address",
        "_server_port",
        "_span",
        "_start",
        "_subject",
        "_system",
        "_tel",
        "_template",
        "_token",
    )

    def __init__(
        self,
        tel: Telemetry,
        system: str,
        subject: str,
        carrier: Mapping[str, str] | None,
        template: str | None,
        message_id: str | None,
        body_size: int | None,
        consumer_group: str | None,
        server_address: str | None,
        server_port: int | None,
        extra: Mapping[str, AttributeValue] | None = None,
        kind: SpanKind = SpanKind.CONSUMER,
        parented: bool = False,
    ) -> None:
        self._tel = tel
        self._kind = kind
        self._parented = parented
        self._failure: BaseException | None = None
        self._system = system
        self._subject = subject
        self._carrier = carrier
        self._template = template
        self._message_id = message_id
        self._body_size = body_size
        self._consumer_group = consumer_group
        self._server_address = server_address
        self._server_port = server_port
        self._extra = extra
        self._span: trace.Span = trace.INVALID_SPAN
        self._token: Token[Context] | None = None
        self._start = 0.0

    def _attributes(self) -> dict[str, AttributeValue]:
        return _base_attributes(
            self._system,
            "process",
            self._subject,
            self._template,
            self._consumer_group,
            self._server_address,
            self._server_port,
        )

    def __enter__(self) -> ProcessScope:
        tel = self._tel
        if tel.tracing:
            self._open_span(tel)
        self._start = time.perf_counter()
        return self

    def _open_span(self, tel: Telemetry) -> None:
        links: list[Link] | None = None
        parent = Context()
        if self._carrier:
            remote = tel.propagator.extract(self._carrier, getter=_GETTER)
            if self._parented:
                parent = remote  # synchronous request/reply: a child of the caller
            else:
                producer = trace.get_current_span(remote).get_span_context()
                if producer.is_valid:
                    links = [Link(producer)]
                # Keep what else travelled (baggage) but not the producer as parent.
                parent = trace.set_span_in_context(trace.INVALID_SPAN, remote)
        span_attrs = self._attributes()
        span_attrs[OPERATION_TYPE] = "process"
        if self._message_id is not None:
            span_attrs[MESSAGE_ID] = self._message_id
        if self._body_size is not None:
            span_attrs[BODY_SIZE] = self._body_size
        if self._extra:
            span_attrs.update(self._extra)
        name = f"process {self._template if self._template is not None else self._subject}"
        span = tel._tracer.start_span(
            name, context=parent, kind=self._kind, attributes=span_attrs, links=links
        )
        self._span = span
        self._token = otel_context.attach(trace.set_span_in_context(span, parent))

    @property
    def span(self) -> trace.Span:
        """The span (valid once entered, while tracing is configured)."""
        return self._span

    def fail(self, exc: BaseException) -> None:
        """Record a failure that was handled (no exception leaves the scope)."""
        self._failure = exc

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        elapsed = time.perf_counter() - self._start
        if exc is None:
            exc = self._failure
        kind = error_type(exc) if exc is not None else None
        if self._token is not None:
            otel_context.detach(self._token)
        _end_span(self._span, exc, kind)
        tel = self._tel
        if tel.metering:
            attrs = self._attributes()
            tel._consumed.add(1, attrs)  # delivery itself succeeded: no error.type
            if kind is not None:
                attrs = {**attrs, ERROR_TYPE: kind}
            tel._process_duration.record(elapsed, attrs)


class NullScope:
    """A scope that records nothing, for when telemetry is inactive (no allocation)."""

    __slots__ = ()

    def __enter__(self) -> NullScope:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def set_body_size(self, size: int) -> None:
        """Nothing to record."""

    @property
    def span(self) -> trace.Span:
        """No span: the invalid one."""
        return trace.INVALID_SPAN

    def fail(self, exc: BaseException) -> None:
        """Nothing to record."""


NULL_SCOPE: Final = NullScope()
"""Stands in for a scope when :attr:`Telemetry.active` is False."""
