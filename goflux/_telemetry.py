"""OpenTelemetry for every transport: providers, instruments, and whether anything records.

Publishing opens a PRODUCER span ``send <subject>`` whose context is injected into the
message headers. Processing opens a CONSUMER span ``process <destination>`` that LINKS
to the producer's span context instead of being its child: delivery is decoupled in
time, and a link is the one structure that also fits batches. The consumer span is the
current span while the handler runs, so work the handler does nests under it. The
spans and their metrics are made by the scopes in :mod:`goflux._scopes`.

Metrics follow the conventions: ``messaging.client.sent.messages``,
``messaging.client.consumed.messages``, ``messaging.client.operation.duration`` and
``messaging.process.duration`` (seconds, with the conventions' bucket advice), plus
goflux's settlement, redelivery, drop and dead-letter counters. ``error.type`` is set
only when an operation fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from opentelemetry import metrics, propagate, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import TracerProvider
from opentelemetry.util.types import AttributeValue

from goflux._semconv import (
    DURATION_BUCKETS,
    GOFLUX_CONSUMER_DEAD_LETTERS,
    GOFLUX_CONSUMER_DROPPED,
    GOFLUX_CONSUMER_REDELIVERIES,
    GOFLUX_CONSUMER_SETTLEMENTS,
    MESSAGING_CLIENT_CONSUMED_MESSAGES,
    MESSAGING_CLIENT_OPERATION_DURATION,
    MESSAGING_CLIENT_SENT_MESSAGES,
    MESSAGING_PROCESS_DURATION,
)
from goflux._version import __version__

__all__ = ("Telemetry",)

_SCOPE_NAME: Final = "goflux"


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
        sent: ``messaging.client.sent.messages``.
        consumed: ``messaging.client.consumed.messages``.
        operation_duration: ``messaging.client.operation.duration``.
        process_duration: ``messaging.process.duration``.
        settlements: ``goflux.consumer.settlements``.
        redeliveries: ``goflux.consumer.redeliveries``.
        dropped: ``goflux.consumer.dropped``.
        dead_letters: ``goflux.consumer.dead_letters``.
    """

    __slots__ = (
        "_meter_proxy",
        "_metering_on",
        "_propagator",
        "_tracer_proxy",
        "_tracing_on",
        "consumed",
        "dead_letters",
        "dropped",
        "operation_duration",
        "process_duration",
        "redeliveries",
        "sent",
        "settlements",
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
        meter = mp.get_meter(_SCOPE_NAME, __version__)
        self._meter_proxy: metrics.Meter | None = None
        if hasattr(meter, "_real_meter"):  # the global placeholder
            self._meter_proxy = meter
        elif not isinstance(meter, metrics.NoOpMeter):
            self._metering_on = True
        self.sent = meter.create_counter(
            MESSAGING_CLIENT_SENT_MESSAGES,
            unit="{message}",
            description="Number of messages producers attempted to send to the broker.",
        )
        self.consumed = meter.create_counter(
            MESSAGING_CLIENT_CONSUMED_MESSAGES,
            unit="{message}",
            description="Number of messages that were delivered to the application.",
        )
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
        self.settlements = meter.create_counter(
            GOFLUX_CONSUMER_SETTLEMENTS,
            unit="{message}",
            description=(
                "Settlements sent by consumers, by outcome (ack, nak, term, in_progress, "
                "ack_unconfirmed)."
            ),
        )
        self.dead_letters = meter.create_counter(
            GOFLUX_CONSUMER_DEAD_LETTERS,
            unit="{message}",
            description="Messages sent to a dead-letter destination, by reason.",
        )
        self.dropped = meter.create_counter(
            GOFLUX_CONSUMER_DROPPED,
            unit="{message}",
            description="Messages dropped because a slow consumer's pending limits overflowed.",
        )
        self.redeliveries = meter.create_counter(
            GOFLUX_CONSUMER_REDELIVERIES,
            unit="{message}",
            description="Deliveries of messages that had been delivered before.",
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

    def record_settlement(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Count one settlement; ``attributes`` carry ``goflux.settlement.outcome``."""
        if self.metering:
            self.settlements.add(1, attributes)

    def record_dead_letter(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Count one dead letter; ``attributes`` carry ``goflux.dead_letter.reason``."""
        if self.metering:
            self.dead_letters.add(1, attributes)

    def record_dropped(self, attributes: Mapping[str, AttributeValue], count: int) -> None:
        """Count messages a slow consumer dropped (its pending limits overflowed)."""
        if self.metering:
            self.dropped.add(count, attributes)

    def record_redelivery(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Count one delivery of a message that had been delivered before."""
        if self.metering:
            self.redeliveries.add(1, attributes)

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
