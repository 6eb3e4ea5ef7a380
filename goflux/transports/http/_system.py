"""The ``messaging.system`` value of the HTTP transport."""

from typing import Final

__all__ = ("SYSTEM",)

SYSTEM: Final = "http"
"""What the HTTP transport reports as ``messaging.system`` (as Go goflux does)."""
