"""Spans and metrics of single operations: one publish, one processed message.

A publisher builds its :class:`PublishScopes` once, a subscription its
:class:`ProcessScopes`: each holds what all operations of its owner share (the
telemetry, ``messaging.system``, the destination template, the consumer group, the
server, the span kind) and opens one scope per operation. A scope is a context manager:
entering it starts the span (a PRODUCER span injects its context into the outgoing
headers; a CONSUMER span links to the producer), leaving it ends the span and records
the metrics, with ``error.type`` when an exception leaves it. While the telemetry
records nothing, ``open`` returns :data:`NULL_SCOPE` and costs a flag check.

What costs per message is kept to what the conventions ask for. Metric attributes are
built once per owner (and per subject a publisher sends to), and the counters add to
running totals (:mod:`goflux._otel.tally`); the one SDK call per operation is its duration
histogram. When the tracer's sampler decides on the parent alone (the SDK's own
samplers), a span starts with its name and kind only, and its attributes and links
are added once it is known to be recorded: a sampled-out message costs the sampler's
decision and, when its headers carry nothing but W3C trace context, no extraction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, MutableMapping
from contextvars import Token
from types import TracebackType
from typing import Final, Literal

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from goflux._otel.semconv import (
    ERROR_TYPE,
    MESSAGING_CONSUMER_GROUP_NAME,
    MESSAGING_DESTINATION_NAME,
    MESSAGING_DESTINATION_TEMPLATE,
    MESSAGING_MESSAGE_BODY_SIZE,
    MESSAGING_MESSAGE_ID,
    MESSAGING_OPERATION_NAME,
    MESSAGING_OPERATION_TYPE,
    MESSAGING_SYSTEM,
    SERVER_ADDRESS,
    SERVER_PORT,
    error_type,
)
from goflux._otel.tally import Count
from goflux._otel.telemetry import Telemetry
from goflux._subject_template import destination_template

__all__ = (
    "NULL_SCOPE",
    "HeaderGetter",
    "HeaderSetter",
    "NullScope",
    "ProcessScope",
    "ProcessScopes",
    "PublishScope",
    "PublishScopes",
    "SpanFacts",
)


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


SpanFacts = Mapping[str, AttributeValue] | Callable[[], Mapping[str, AttributeValue]]
"""Span attributes, or a function building them (called only for a recorded span)."""

_GETTER: Final = HeaderGetter()
_SETTER: Final = HeaderSetter()
_ROOT: Final = Context()  # a consumer span's parent: none (it links to the producer)
_TRACE_CONTEXT: Final = TraceContextTextMapPropagator()
_INVALID: Final = trace.INVALID_SPAN
_SUBJECTS_KEPT: Final = 1000  # subjects a publisher keeps metric attributes for


def _shared_attributes(
    system: str,
    operation: str,
    *,
    template: str | None = None,
    consumer_group: str | None = None,
    server_address: str | None = None,
    server_port: int | None = None,
) -> dict[str, AttributeValue]:
    attrs: dict[str, AttributeValue] = {
        MESSAGING_SYSTEM: system,
        MESSAGING_OPERATION_NAME: operation,
    }
    if template is not None:
        attrs[MESSAGING_DESTINATION_TEMPLATE] = template
    if consumer_group is not None:
        attrs[MESSAGING_CONSUMER_GROUP_NAME] = consumer_group
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


class _Metrics:
    """The metric attributes of one destination and its counter's running total.

    Attributes:
        attributes: For a successful operation.
        count: The counter's total for ``attributes`` (``sent`` or ``consumed``).
    """

    __slots__ = ("_failed", "attributes", "count")

    def __init__(self, attributes: dict[str, AttributeValue], count: Count) -> None:
        self.attributes = attributes
        self.count = count
        self._failed: dict[str, dict[str, AttributeValue]] = {}

    def failed(self, kind: str) -> dict[str, AttributeValue]:
        """The attributes of an operation that failed with ``error.type`` ``kind``."""
        found = self._failed.get(kind)
        if found is None:
            found = self._failed[kind] = {**self.attributes, ERROR_TYPE: kind}
        return found


class PublishScopes:
    """The publish scopes of one publisher (or requester): what they all share.

    Args:
        telemetry: Where spans and metrics go.
        system: The ``messaging.system`` value (``go_channel``, ``nats``,
            ``nats-jetstream``, ``http``).
        server_address: Broker host, when known.
        server_port: Broker port, when known.
        kind: PRODUCER for a publish; CLIENT for a request, whose caller waits for the
            reply (the responder's span becomes its child).
    """

    __slots__ = ("_by_subject", "attributes", "kind", "telemetry")

    def __init__(
        self,
        telemetry: Telemetry,
        system: str,
        *,
        server_address: str | None = None,
        server_port: int | None = None,
        kind: SpanKind = SpanKind.PRODUCER,
    ) -> None:
        self.telemetry = telemetry
        self.kind = kind
        self.attributes = _shared_attributes(
            system, "send", server_address=server_address, server_port=server_port
        )
        self._by_subject: dict[str, _Metrics] = {}

    def metrics(self, subject: str) -> _Metrics:
        """The metric attributes of publishing to ``subject`` (kept for many subjects)."""
        found = self._by_subject.get(subject)
        if found is None:
            attrs = {**self.attributes, MESSAGING_DESTINATION_NAME: subject}
            found = _Metrics(attrs, self.telemetry.counters.sent.count(attrs))
            if len(self._by_subject) < _SUBJECTS_KEPT:
                self._by_subject[subject] = found
        return found

    def open(
        self, subject: str, carrier: MutableMapping[str, str], *, message_id: str | None = None
    ) -> PublishScope | NullScope:
        """The scope of one publish to ``subject``; entering it injects trace context.

        Args:
            subject: The publish subject.
            carrier: Outgoing transport headers; trace fields are written lowercase.
            message_id: The message ID, if set.

        Returns :data:`NULL_SCOPE` when nothing is recorded.
        """
        if not self.telemetry.active:
            return NULL_SCOPE
        return PublishScope(self, subject, carrier, message_id=message_id)


class PublishScope:
    """One publish: a PRODUCER (or CLIENT) span plus the send metrics.

    Use as a context manager; an exception leaving it marks the span and metrics with
    ``error.type``. Call :meth:`set_body_size` once the payload is encoded. Without a
    configured tracer provider no span is made (and nothing is injected).
    """

    __slots__ = ("_carrier", "_message_id", "_scopes", "_span", "_start", "_subject")

    def __init__(
        self,
        scopes: PublishScopes,
        subject: str,
        carrier: MutableMapping[str, str],
        *,
        message_id: str | None,
    ) -> None:
        self._scopes = scopes
        self._subject = subject
        self._carrier = carrier
        self._message_id = message_id
        self._span: trace.Span = trace.INVALID_SPAN
        self._start = 0.0

    def _span_attributes(self) -> dict[str, AttributeValue]:
        attrs = {
            **self._scopes.attributes,
            MESSAGING_DESTINATION_NAME: self._subject,
            MESSAGING_OPERATION_TYPE: "send",
        }
        if self._message_id is not None:
            attrs[MESSAGING_MESSAGE_ID] = self._message_id
        return attrs

    def __enter__(self) -> PublishScope:
        scopes = self._scopes
        tel = scopes.telemetry
        if tel.tracing:
            name = f"send {self._subject}"
            if tel.parent_only_sampling:  # attributes only for a span that is recorded
                span = tel.tracer.start_span(name, kind=scopes.kind)
                if span.is_recording():
                    span.set_attributes(self._span_attributes())
            else:
                span = tel.tracer.start_span(
                    name, kind=scopes.kind, attributes=self._span_attributes()
                )
            self._span = span
            tel.propagator.inject(
                self._carrier, context=trace.set_span_in_context(span), setter=_SETTER
            )
        self._start = time.perf_counter()
        return self

    @property
    def recording(self) -> bool:
        """Whether the publish has a span that is recorded (sampled in)."""
        return self._span.is_recording()

    def set_body_size(self, size: int) -> None:
        """Record the encoded payload size on the span."""
        span = self._span
        if span is not trace.INVALID_SPAN:
            span.set_attribute(MESSAGING_MESSAGE_BODY_SIZE, size)

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Add span attributes (transport specifics); only worth it while :attr:`recording`."""
        span = self._span
        if span is not trace.INVALID_SPAN:
            span.set_attributes(attributes)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        elapsed = time.perf_counter() - self._start
        kind = error_type(exc) if exc is not None else None
        _end_span(self._span, exc, kind)
        scopes = self._scopes
        tel = scopes.telemetry
        if tel.metering:
            metrics = scopes.metrics(self._subject)
            if kind is None:
                metrics.count.value += 1
                tel.operation_duration.record(elapsed, metrics.attributes)
            else:
                attrs = metrics.failed(kind)
                tel.counters.sent.count(attrs).value += 1
                tel.operation_duration.record(elapsed, attrs)


class ProcessScopes:
    """The process scopes of one subscription (or responder): what they all share.

    Args:
        telemetry: Where spans and metrics go.
        system: The ``messaging.system`` value.
        template: The subscription pattern when it is a wildcard; it then names the
            spans, keeping span names low-cardinality, and stands for the destination
            in the metrics (the conventions leave ``messaging.destination.name`` out of
            metrics unless it has low cardinality).
        consumer_group: Queue group or consumer name, if any.
        server_address: Broker host, when known.
        server_port: Broker port, when known.
        kind: CONSUMER for a delivered message; SERVER for a request being answered.
        parented: Make the span a child of the remote caller instead of linking to it
            (synchronous request/reply).
        operation: ``"process"`` (a handler runs in the scope) or ``"receive"`` (a
            message handed to the caller of a one-shot read).
    """

    __slots__ = (
        "_by_subject",
        "_templated",
        "attributes",
        "consumer_group",
        "kind",
        "operation",
        "parented",
        "telemetry",
        "template",
    )

    def __init__(
        self,
        telemetry: Telemetry,
        system: str,
        *,
        template: str | None = None,
        consumer_group: str | None = None,
        server_address: str | None = None,
        server_port: int | None = None,
        kind: SpanKind = SpanKind.CONSUMER,
        parented: bool = False,
        operation: Literal["process", "receive"] = "process",
    ) -> None:
        if template is not None:  # a SubjectTemplate's pattern: the template's text
            template = destination_template(template)
        self.telemetry = telemetry
        self.template = template
        self.consumer_group = consumer_group
        self.kind = kind
        self.parented = parented
        self.operation = operation
        self.attributes = _shared_attributes(
            system,
            operation,
            template=template,
            consumer_group=consumer_group,
            server_address=server_address,
            server_port=server_port,
        )
        self._by_subject: dict[str, _Metrics] = {}
        self._templated: _Metrics | None = None  # a wildcard's: one for every subject

    def metrics(self, subject: str) -> _Metrics:
        """The metric attributes of a message received on ``subject``."""
        templated = self._templated
        if templated is not None:
            return templated
        found = self._by_subject.get(subject)
        if found is None:
            attrs = dict(self.attributes)
            if self.template is None:
                attrs[MESSAGING_DESTINATION_NAME] = subject
            # As Go goflux: consumed messages are counted as received, the handler's
            # duration is the processing's.
            received = {**attrs, MESSAGING_OPERATION_NAME: "receive"}
            found = _Metrics(attrs, self.telemetry.counters.consumed.count(received))
            if self.template is not None:
                self._templated = found
            elif len(self._by_subject) < _SUBJECTS_KEPT:
                self._by_subject[subject] = found
        return found

    def open(
        self,
        subject: str,
        carrier: Mapping[str, str] | None,
        *,
        message_id: str | None = None,
        body_size: int | None = None,
        attributes: SpanFacts | None = None,
    ) -> ProcessScope | NullScope:
        """The scope of processing one message received on ``subject``.

        Args:
            subject: The concrete subject of the message.
            carrier: Incoming transport headers holding the producer's trace context.
            message_id: The message ID, if set.
            body_size: Size of the payload in bytes, if known.
            attributes: More span attributes (transport specifics such as the stream
                sequence), or a function returning them, called only for a span that
                is recorded; not added to metrics.

        Returns :data:`NULL_SCOPE` when nothing is recorded.
        """
        if not self.telemetry.active:
            return NULL_SCOPE
        return ProcessScope(self, subject, carrier, message_id, body_size, attributes)


def _carries(carrier: Mapping[str, str], field: str) -> bool:
    """Whether ``carrier`` has the header ``field`` (lowercase), in any casing."""
    if field in carrier:
        return True
    size = len(field)
    for name in carrier:  # noqa: SIM110 - cheaper than any() over a generator, per message
        if len(name) == size and name.lower() == field:
            return True
    return False


class ProcessScope:
    """Processing of one received message: a CONSUMER span linked to the producer.

    While the scope is entered its span is the current span. An exception leaving it
    marks the span and the process metrics with ``error.type``. Without a configured
    tracer provider no span is made and the trace context is not read.
    """

    __slots__ = (
        "_body_size",
        "_carrier",
        "_extra",
        "_failure",
        "_message_id",
        "_scopes",
        "_span",
        "_start",
        "_subject",
        "_token",
    )

    def __init__(
        self,
        scopes: ProcessScopes,
        subject: str,
        carrier: Mapping[str, str] | None,
        message_id: str | None,
        body_size: int | None,
        attributes: SpanFacts | None,
    ) -> None:
        self._scopes = scopes
        self._subject = subject
        self._carrier = carrier
        self._message_id = message_id
        self._body_size = body_size
        self._extra = attributes
        self._failure: BaseException | None = None
        self._span: trace.Span = trace.INVALID_SPAN
        self._token: Token[Context] | None = None
        self._start = 0.0

    def __enter__(self) -> ProcessScope:
        if self._scopes.telemetry.tracing:
            self._open_span()
        self._start = time.perf_counter()
        return self

    def _span_attributes(self) -> dict[str, AttributeValue]:
        scopes = self._scopes
        attrs = {
            **scopes.attributes,
            MESSAGING_DESTINATION_NAME: self._subject,
            MESSAGING_OPERATION_TYPE: scopes.operation,
        }
        if self._message_id is not None:
            attrs[MESSAGING_MESSAGE_ID] = self._message_id
        if self._body_size is not None:
            attrs[MESSAGING_MESSAGE_BODY_SIZE] = self._body_size
        extra = self._extra
        if extra is not None:
            attrs.update(extra() if callable(extra) else extra)
        return attrs

    def _open_span(self) -> None:
        scopes = self._scopes
        tel = scopes.telemetry
        template = scopes.template
        name = f"{scopes.operation} {template if template is not None else self._subject}"
        carrier = self._carrier
        if not scopes.parented and tel.parent_only_sampling:
            # The sampler looks at the parent only, and a consumer span has none: decide
            # first, then read the producer's context for the link if it is recorded.
            # Baggage (or another propagator's fields) must reach the handler either way.
            remote = parent = _ROOT
            only_span = False  # the carrier holds the producer's span context and no more
            if carrier:
                if tel.w3c_trace_context_only and not _carries(carrier, "baggage"):
                    only_span = True
                else:
                    remote = tel.propagator.extract(carrier, getter=_GETTER)
                    parent = trace.set_span_in_context(_INVALID, remote)
            span = tel.tracer.start_span(name, context=parent, kind=scopes.kind)
            if span.is_recording():
                if only_span and carrier:
                    remote = _TRACE_CONTEXT.extract(carrier, getter=_GETTER)
                producer = trace.get_current_span(remote).get_span_context()
                if producer.is_valid:
                    span.add_link(producer)
                span.set_attributes(self._span_attributes())
        else:
            links: list[Link] | None = None
            parent = _ROOT
            if carrier:
                remote = tel.propagator.extract(carrier, getter=_GETTER)
                if scopes.parented:
                    parent = remote  # synchronous request/reply: a child of the caller
                else:
                    producer = trace.get_current_span(remote).get_span_context()
                    if producer.is_valid:
                        links = [Link(producer)]
                    # Keep what else travelled (baggage) but not the producer as parent.
                    parent = trace.set_span_in_context(_INVALID, remote)
            span = tel.tracer.start_span(
                name,
                context=parent,
                kind=scopes.kind,
                attributes=self._span_attributes(),
                links=links,
            )
        self._span = span
        self._token = otel_context.attach(trace.set_span_in_context(span, parent))

    @property
    def span(self) -> trace.Span:
        """The span (valid once entered, while tracing is configured)."""
        return self._span

    @property
    def recording(self) -> bool:
        """Whether the scope has a span that is recorded (sampled in)."""
        return self._span.is_recording()

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Add span attributes (transport specifics); only worth it while :attr:`recording`."""
        self._span.set_attributes(attributes)

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
        scopes = self._scopes
        tel = scopes.telemetry
        if tel.metering:
            metrics = scopes._templated or scopes.metrics(self._subject)
            metrics.count.value += 1  # delivery itself succeeded: no error.type
            attrs = metrics.attributes if kind is None else metrics.failed(kind)
            tel.process_duration.record(elapsed, attrs)


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

    @property
    def recording(self) -> bool:
        """Never recording."""
        return False

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Nothing to record."""

    def fail(self, exc: BaseException) -> None:
        """Nothing to record."""


NULL_SCOPE: Final = NullScope()
"""Stands in for a scope when the telemetry records nothing."""
