"""Identity of the JetStream transport in telemetry."""

from typing import Final

__all__ = ("SYSTEM",)

SYSTEM: Final = "nats-jetstream"
"""The ``messaging.system`` value, as Go goflux's JetStream transport reports it."""
