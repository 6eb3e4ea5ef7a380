"""Identity of the channel transport in telemetry."""

from typing import Final

__all__ = ("SYSTEM",)

SYSTEM: Final = "channel"
"""The ``messaging.system`` attribute value of the in-process channel transport."""
