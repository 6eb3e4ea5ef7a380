"""Composition: what application code builds from publishers and subscribers.

Streams (``feed``, ``streams``), processors (``processing``, ``batches``,
``settling``), topics, pipes, middleware chains, dead letters, and the service
``group`` with its members, readiness and endpoints. Imports the core and
telemetry, never a transport.
"""

__all__ = ()
