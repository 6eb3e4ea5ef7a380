"""OpenTelemetry for every transport: providers, instruments, and whether anything records.

Publishing opens a PRODUCER span ``send <subject>`` whose context is injected into the
message headers. Processing opens a CONSUMER span ``process <destination>`` that LINKS
to the producer's span context instead of being its child: delivery is decoupled in
time, and a link is the one structure that also fits batches. The consumer span is the
current span while the handler runs, so work the handler does nests under it. The
spans and their metrics are made by the scopes in :mod:`goflux._otel.scopes`.

Metrics follow the conventions: ``messaging.client.sent.messages``,
``messaging.client.consumed.messages``, ``messaging.client.operation.duration`` and
``messaging.process.duration`` (seconds, with the conventions' bucket advice), plus
Go goflux's ``goflux.processor.ack.outcome`` and ``goflux.consumer.lag`` under Go's
names, and goflux's own pending, settlement, redelivery, drop and dead-letter signals.
``error.type`` is set only when an operation fails. The gauges read their levels when a
reader collects (:mod:`goflux._otel.levels`). The counters are observable counters
over running totals kept in Python (:mod:`goflux._otel.tally`), shared by every
:class:`Telemetry` on the same meter provider: a message costs an integer increment per
counter, and a reader still sees exact totals. The durations are histograms, recorded per operation.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final

from opentelemetry import metrics, propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.metrics import MeterProvider
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from goflux._otel.levels import Levels
from goflux._otel.semconv import (
    DURATION_BUCKETS,
    GOFLUX_CONSUMER_DEAD_LETTERS,
    GOFLUX_CONSUMER_DROPPED,
    GOFLUX_CONSUMER_LAG,
    GOFLUX_CONSUMER_PENDING,
    GOFLUX_CONSUMER_REDELIVERIES,
    GOFLUX_CONSUMER_SETTLEMENTS,
    GOFLUX_PROCESSOR_ACK_OUTCOME,
    MESSAGING_CLIENT_CONSUMED_MESSAGES,
    MESSAGING_CLIENT_OPERATION_DURATION,
    MESSAGING_CLIENT_SENT_MESSAGES,
    MESSAGING_PROCESS_DURATION,
)
from goflux._otel.tally import Count, Tally
from goflux._version import __version__

__all__ = ("Counters", "Telemetry")

_SCOPE_NAME: Final = "goflux"

# Samplers of the SDK that decide from the parent context and the trace ID alone, never
# from a span's name, attributes or links: for them a span's attributes and links can
# be added after the decision, only to the spans that are recorded.
_SDK_SAMPLING: Final = "opentelemetry.sdk.trace.sampling"
_PARENT_ONLY_SAMPLERS: Final = frozenset(
    {"StaticSampler", "TraceIdRatioBased", "ParentBased", "ParentBasedTraceIdRatio"}
)
_PARENT_BASED_DELEGATES: Final = (
    "_root",
    "_remote_parent_sampled",
    "_remote_parent_not_sampled",
    "_local_parent_sampled",
    "_local_parent_not_sampled",
)


def _decides_on_parent_only(sampler: object) -> bool:
    """Whether ``sampler`` is one of the SDK's that ignore name, attributes and links."""
    cls = type(sampler)
    if cls.__module__ != _SDK_SAMPLING or cls.__name__ not in _PARENT_ONLY_SAMPLERS:
        return False
    delegates = [getattr(sampler, name, None) for name in _PARENT_BASED_DELEGATES]
    return all(_decides_on_parent_only(d) for d in delegates if d is not None)


def _reads_w3c_only(propagator: TextMapPropagator) -> bool:
    """Whether ``propagator`` reads W3C trace context and baggage and nothing else."""
    if type(propagator) in (TraceContextTextMapPropagator, W3CBaggagePropagator):
        return True
    if type(propagator) is CompositePropagator:
        return all(_reads_w3c_only(p) for p in getattr(propagator, "_propagators", [None]))
    return False


class Counters:
    """goflux's counters and gauges on one meter: observable instruments over running totals.

    One set exists per meter (:meth:`of`), so that every :class:`Telemetry` on a
    provider adds to the same totals and reports through the same gauges: the SDK
    keeps the first observable instrument of a name on a meter and ignores the
    callbacks of a second one (and no callback can be removed).

    Attributes:
        sent: Totals of ``messaging.client.sent.messages``.
        consumed: Totals of ``messaging.client.consumed.messages``.
        ack_outcomes: Totals of ``goflux.processor.ack.outcome`` (Go goflux's).
        settlements: Totals of ``goflux.consumer.settlements`` (deprecated).
        redeliveries: Totals of ``goflux.consumer.redeliveries``.
        dropped: Totals of ``goflux.consumer.dropped``.
        dead_letters: Totals of ``goflux.consumer.dead_letters``.
        lag: The sources of ``goflux.consumer.lag`` (Go goflux's).
        pending: The sources of ``goflux.consumer.pending``.
        instruments: The observable instruments, by metric name.
    """

    __slots__ = (
        "__weakref__",
        "ack_outcomes",
        "consumed",
        "dead_letters",
        "dropped",
        "instruments",
        "lag",
        "pending",
        "redeliveries",
        "sent",
        "settlements",
    )

    def __init__(self, meter: metrics.Meter) -> None:
        self.sent = Tally()
        self.consumed = Tally()
        self.ack_outcomes = Tally()
        self.settlements = Tally()
        self.redeliveries = Tally()
        self.dropped = Tally()
        self.dead_letters = Tally()
        self.lag = Levels()
        self.pending = Levels(max)  # two subscriptions of one consumer see one backlog
        counters = (
            (
                self.sent,
                MESSAGING_CLIENT_SENT_MESSAGES,
                "{message}",
                "Number of messages producers attempted to send to the broker.",
            ),
            (
                self.consumed,
                MESSAGING_CLIENT_CONSUMED_MESSAGES,
                "{message}",
                "Number of messages that were delivered to the application.",
            ),
            (  # Go goflux's name, description and unit (none)
                self.ack_outcomes,
                GOFLUX_PROCESSOR_ACK_OUTCOME,
                "",
                "Number of message acknowledgment outcomes by action",
            ),
            (
                self.settlements,
                GOFLUX_CONSUMER_SETTLEMENTS,
                "{message}",
                "Settlements sent by consumers, by outcome (ack, nak, term, in_progress, "
                "ack_unconfirmed). Deprecated: use goflux.processor.ack.outcome.",
            ),
            (
                self.dead_letters,
                GOFLUX_CONSUMER_DEAD_LETTERS,
                "{message}",
                "Messages sent to a dead-letter destination, by reason.",
            ),
            (
                self.dropped,
                GOFLUX_CONSUMER_DROPPED,
                "{message}",
                "Messages dropped because a slow consumer's pending limits overflowed.",
            ),
            (
                self.redeliveries,
                GOFLUX_CONSUMER_REDELIVERIES,
                "{message}",
                "Deliveries of messages that had been delivered before.",
            ),
        )
        self.instruments: dict[str, object] = {
            name: meter.create_observable_counter(
                name, callbacks=[tally.observe], unit=unit, description=description
            )
            for tally, name, unit, description in counters
        }
        gauges = (
            (  # Go goflux's name, description and unit (none)
                self.lag,
                GOFLUX_CONSUMER_LAG,
                "",
                "Number of messages waiting in the subscriber buffer",
            ),
            (
                self.pending,
                GOFLUX_CONSUMER_PENDING,
                "{message}",
                "Messages a JetStream consumer has yet to deliver (its num_pending, as of "
                "the last delivery, or asked of the server when none came for 5 s).",
            ),
        )
        for levels, name, unit, description in gauges:
            self.instruments[name] = meter.create_observable_gauge(
                name, callbacks=[levels.observe], unit=unit, description=description
            )

    @classmethod
    def of(cls, provider: MeterProvider, meter: metrics.Meter) -> Counters:
        """The counters of ``meter`` (made on it the first time), ``provider``'s.

        The global placeholder's meters all share one set, and the provider set
        globally later takes that set over: the placeholder's counters are created on
        its meter when it is set.
        """
        known = _KNOWN
        with known.lock:
            if hasattr(meter, "_real_meter"):  # the global placeholder's
                if known.placeholder is None:
                    known.placeholder = cls(meter)
                return known.placeholder
            try:
                found = known.by_meter.get(meter)
            except TypeError:  # a meter that cannot be weakly referenced: its own set
                return cls(meter)
            if found is None:
                placeholder = known.placeholder
                if placeholder is not None and provider is metrics.get_meter_provider():
                    found = placeholder  # its counters went to this meter when it was set
                else:
                    found = cls(meter)
                known.by_meter[meter] = found
            return found


class _Known:
    """Every :class:`Counters` made: by meter, and the global placeholder's."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_meter: weakref.WeakKeyDictionary[Any, Counters] = weakref.WeakKeyDictionary()
        self.placeholder: Counters | None = None


_KNOWN: Final = _Known()


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

    Attributes:
        tracer: Starts the spans (scope ``goflux``).
        counters: The running totals behind the counters (shared per meter provider).
        operation_duration: ``messaging.client.operation.duration``.
        process_duration: ``messaging.process.duration``.
    """

    __slots__ = (
        "_checked_propagator",
        "_meter_proxy",
        "_metering_on",
        "_parent_only",
        "_propagator",
        "_tracer_proxy",
        "_tracing_on",
        "_w3c_only",
        "counters",
        "operation_duration",
        "process_duration",
        "tracer",
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
        self._parent_only: bool | None = None  # decided once tracing is on
        tp = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        mp = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        self.tracer = tp.get_tracer(_SCOPE_NAME, __version__)
        # Decided once: a real tracer is on for good, a no-op one off for good; only
        # the global placeholder (ProxyTracer) needs a look on each call.
        self._tracer_proxy: trace.ProxyTracer | None = None
        if isinstance(self.tracer, trace.ProxyTracer):
            self._tracer_proxy = self.tracer
        elif not isinstance(self.tracer, trace.NoOpTracer):
            self._tracing_on = True
        self._propagator = propagator
        self._checked_propagator: TextMapPropagator | None = None
        self._w3c_only = False
        meter = mp.get_meter(_SCOPE_NAME, __version__)
        self._meter_proxy: metrics.Meter | None = None
        if hasattr(meter, "_real_meter"):  # the global placeholder
            self._meter_proxy = meter
        elif not isinstance(meter, metrics.NoOpMeter):
            self._metering_on = True
        self.counters = Counters.of(mp, meter)
        self.operation_duration = meter.create_histogram(
            MESSAGING_CLIENT_OPERATION_DURATION,
            unit="s",
            description="Duration of messaging operations initiated by a client.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.process_duration = meter.create_histogram(
            MESSAGING_PROCESS_DURATION,
            unit="s",
            description="Duration of processing operation.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )

    @classmethod
    def default(cls) -> Telemetry:
        """Return the shared instance built on the OpenTelemetry globals."""
        if cls._default is None:
            cls._default = cls()
        return cls._default

    @classmethod
    def or_default(cls, telemetry: Telemetry | None) -> Telemetry:
        """Return ``telemetry``, or the shared default (:meth:`default`) when it is None."""
        return telemetry if telemetry is not None else cls.default()

    def settlement_count(self, attributes: Mapping[str, AttributeValue]) -> Count:
        """The running total of settlements with ``attributes`` (add to it while metering)."""
        return self.counters.settlements.count(attributes)

    def redelivery_count(self, attributes: Mapping[str, AttributeValue]) -> Count:
        """The running total of redeliveries with ``attributes`` (add to it while metering)."""
        return self.counters.redeliveries.count(attributes)

    def ack_outcome_count(self, attributes: Mapping[str, AttributeValue]) -> Count:
        """The running total of ack outcomes with ``attributes`` (add to it while metering)."""
        return self.counters.ack_outcomes.count(attributes)

    def watch_lag(
        self, attributes: Mapping[str, AttributeValue], read: Callable[[], int | None]
    ) -> Callable[[], None]:
        """Report ``read()`` as ``goflux.consumer.lag`` at each collection; returns the undo.

        ``read`` returns the messages received and waiting for a worker; it runs on
        the reader's thread (a length read is safe there). Call the function returned
        when the subscription closes.
        """
        return self.counters.lag.watch(attributes, read)

    def watch_pending(
        self, attributes: Mapping[str, AttributeValue], read: Callable[[], int | None]
    ) -> Callable[[], None]:
        """Report ``read()`` as ``goflux.consumer.pending`` at each collection; returns the undo.

        ``read`` returns None while there is nothing to report yet.
        """
        return self.counters.pending.watch(attributes, read)

    def record_settlement(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Count one settlement; ``attributes`` carry ``goflux.settlement.outcome``."""
        if self.metering:
            self.counters.settlements.add(attributes)

    def record_dead_letter(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Count one dead letter; ``attributes`` carry ``goflux.dead_letter.reason``."""
        if self.metering:
            self.counters.dead_letters.add(attributes)

    def record_dropped(self, attributes: Mapping[str, AttributeValue], count: int) -> None:
        """Count messages a slow consumer dropped (its pending limits overflowed)."""
        if self.metering:
            self.counters.dropped.add(attributes, count)

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
    def parent_only_sampling(self) -> bool:
        """Whether the tracer's sampler decides on the parent and trace ID alone.

        True for the SDK's own samplers (always on/off, trace ID ratio, parent-based
        over those): a span's attributes and links are then only worth building once
        the span is known to be recorded. False for any other sampler, and while
        nothing traces.
        """
        decided = self._parent_only
        if decided is not None:
            return decided
        if not self.tracing:
            return False
        tracer = self._tracer_proxy._tracer if self._tracer_proxy is not None else self.tracer
        sampler = getattr(tracer, "sampler", None)
        self._parent_only = sampler is not None and _decides_on_parent_only(sampler)
        return self._parent_only

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
        # While nothing is configured (the other common case, checked per message):
        # one attribute read each, no property call.
        tracer = self._tracer_proxy
        if (
            tracer is not None
            and getattr(trace, "_TRACER_PROVIDER", tracer) is not None
            and self.tracing
        ):
            return True
        meter = self._meter_proxy
        if meter is not None and getattr(meter, "_real_meter", meter) is not None:
            return self.metering
        return False

    @property
    def w3c_trace_context_only(self) -> bool:
        """Whether the propagator reads W3C ``traceparent``/``tracestate`` and baggage only.

        Then headers without a ``baggage`` field carry nothing but the producer's span
        context, which only a recorded consumer span needs (for its link).
        """
        propagator = self.propagator
        if propagator is not self._checked_propagator:
            self._w3c_only = _reads_w3c_only(propagator)
            self._checked_propagator = propagator
        return self._w3c_only

    @property
    def propagator(self) -> TextMapPropagator:
        """The propagator in use (the global one unless one was given)."""
        if self._propagator is not None:
            return self._propagator
        return propagate.get_global_textmap()
