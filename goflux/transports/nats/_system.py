"""Identity of the core NATS transport in telemetry."""

from typing import Final

__all__ = ("SYSTEM",)

SYSTEM: Final = "nats"
"""The ``messaging.system`` value, as Go goflux's NATS transport reports it."""
