"""Server URLs made safe to show: credentials embedded in them are masked."""

from __future__ import annotations

__all__ = ("http_url", "redact_url", "unbracket")


def redact_url(url: str) -> str:
    """Return ``url`` with embedded credentials masked: ``nats://***@host:4222``.

    Works on a comma-separated list of URLs too. The user information of each URL
    runs from its ``://`` to the last ``@`` before the next URL's ``://``, so a
    password holding ``,``, ``/``, ``#`` or ``?`` is masked whole. Anything printed,
    logged or raised about a server goes through this, so a password or token given
    in ``NATS_URL`` never reaches a log, an exception or a terminal.
    """
    parts = url.split("://")
    if len(parts) < 2:  # no scheme: "user:secret@host:4222" or a bare host
        at = url.rfind("@")
        return f"***@{url[at + 1 :]}" if at >= 0 else url
    masked = [parts[0]]
    for index, part in enumerate(parts[1:], start=1):
        # The text up to the next URL's scheme belongs to this URL (its tail holds
        # ",scheme" when another URL follows).
        body, tail = part, ""
        if index < len(parts) - 1:
            comma = part.rfind(",")
            body, tail = (part[:comma], part[comma:]) if comma >= 0 else (part, "")
        at = body.rfind("@")
        masked.append(f"***@{body[at + 1 :]}{tail}" if at >= 0 else part)
    return "://".join(masked)


def http_url(host: str, port: int) -> str:
    """``http://host:port``, an IPv6 address in brackets (``http://[::1]:8080``)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def unbracket(host: str) -> str:
    """A host as sockets take it: ``[::1]`` (as URLs write it) is ``::1``."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host
