"""Telemetry: the OpenTelemetry providers, spans and metrics of every operation.

``telemetry`` (:class:`goflux.Telemetry`: providers, the counters shared per meter,
the duration histograms), ``scopes`` (one span and its metrics per publish or
process), ``semconv`` (every attribute key and metric name), ``tally`` (running totals
that observable counters report). Imports only the core modules beside this folder.
"""

__all__ = ()
