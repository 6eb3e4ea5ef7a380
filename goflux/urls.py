"""Server URLs made safe to show: credentials embedded in them are masked."""

from __future__ import annotations

__all__ = ("redact_url",)


def redact_url(url: str) -> str:
    """Return ``url`` with embedded credentials masked: ``nats://***@host:4222``.

    Several comma-separated URLs are masked one by one. Anything printed, logged or
    raised about a server goes through this, so a password or token given in
    ``NATS_URL`` never reaches a log, an exception or a terminal.
    """
    if "," in url:
        return ",".join(redact_url(part) for part in url.split(","))
    scheme, separator, rest = url.rpartition("://")
    if "@" not in rest:
        return url
    return f"{scheme}{separator}***@{rest.rsplit('@', 1)[1]}"
