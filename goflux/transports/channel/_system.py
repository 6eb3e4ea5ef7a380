"""Identity of the channel transport in telemetry."""

from typing import Final

__all__ = ("SYSTEM",)

SYSTEM: Final = "go_channel"
"""The ``messaging.system`` attribute value of the in-process channel transport.

Go goflux's channel transport reports ``go_channel``; goflux reports the same, so that
one dashboard filters both.
"""
