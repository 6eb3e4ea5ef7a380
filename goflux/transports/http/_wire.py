"""Go goflux's HTTP wire: URLs, headers in and out, error bodies, ``Retry-After``.

- A message is ``POST {base_url}/{subject}``; the subject is escaped as Go's
  ``url.PathEscape`` escapes a path segment.
- User headers travel as ``X-Goflux-{name}``, the message ID as ``X-Message-ID``,
  trace context as W3C ``traceparent``/``tracestate``. HTTP header names carry no
  case, so a receiver names user headers in Go's canonical form (``X-Goflux-tenant-id``
  arrives as ``Tenant-Id``), as a Go goflux subscriber does.
- Errors are answered as Go's ``http.Error`` writes them: the text and a newline,
  ``text/plain; charset=utf-8``, ``X-Content-Type-Options: nosniff``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from email.utils import parsedate_to_datetime
from time import time
from typing import Final
from urllib.parse import quote, urlsplit

from starlette.types import Scope

from goflux._headers import Headers
from goflux._urls import redact_url
from goflux._wire import USER_HEADER_PREFIX

__all__ = (
    "ERROR_CONTENT_TYPE",
    "Incoming",
    "WireHeaders",
    "canonical",
    "check_base_path",
    "check_base_url",
    "error_body",
    "first_line",
    "incoming",
    "outgoing_headers",
    "parse_retry_after",
    "retry_after",
    "route_path",
    "target_url",
)

# Beside letters, digits and -._~, what Go's url.PathEscape leaves unescaped in a segment.
_GO_PATH_SAFE: Final = "$&+:=@"
_PREFIX: Final = USER_HEADER_PREFIX.lower().encode()  # b"x-goflux-"
_PREFIX_LEN: Final = len(_PREFIX)
_DETAIL_CHARS: Final = 200
ERROR_CONTENT_TYPE: Final = "text/plain; charset=utf-8"


def check_base_url(base_url: str) -> str:
    """Return ``base_url`` without a trailing ``/`` if it is an absolute http(s) URL.

    Raises:
        ValueError: It is not a str, not http or https, has no host, or has a query
            or fragment (the subject is appended as the last path segment).
    """
    if not isinstance(base_url, str):
        raise ValueError(f"base_url must be a str, got {type(base_url).__name__}")
    shown = redact_url(base_url)
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        raise ValueError(f"invalid base_url {shown!r}: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"invalid base_url {shown!r}: expected http://host[:port][/path] or https://..."
        )
    if parts.query or parts.fragment or base_url.endswith(("?", "#")):
        raise ValueError(
            f"invalid base_url {shown!r}: no query or fragment (the subject is appended "
            "to the path)"
        )
    return base_url.rstrip("/")


def check_base_path(base_path: str) -> str:
    """Return ``base_path`` as routes use it: ``""`` or ``/a/b`` (no trailing ``/``).

    Raises:
        ValueError: It is not a str, does not start with ``/`` (unless empty), or
            holds characters a path cannot (``?``, ``#``, whitespace).
    """
    if not isinstance(base_path, str):
        raise ValueError(f"base_path must be a str, got {type(base_path).__name__}")
    path = base_path.rstrip("/")
    if path and (
        not path.startswith("/") or any(c in path for c in "?#") or len(path.split()) != 1
    ):
        raise ValueError(
            f"invalid base_path {base_path!r}: expected '' or '/a/b' (no query, fragment "
            "or whitespace)"
        )
    return path


def target_url(base_url: str, subject: str) -> str:
    """``{base_url}/{subject}``, the subject escaped as Go's ``url.PathEscape`` does."""
    return f"{base_url}/{quote(subject, safe=_GO_PATH_SAFE)}"


def outgoing_headers(wire: dict[str, str], content_type: str) -> list[tuple[bytes, bytes]]:
    """The request headers for goflux's transport headers ``wire`` (see ``write_headers``).

    Repeated user headers stay repeated lines; values travel as UTF-8.
    """
    out = [(b"content-type", content_type.encode())]
    out.extend((name.encode(), value.encode()) for name, value in wire.items())
    return out


def canonical(name: str) -> str:
    """Go's canonical form of a header name: ``x-goflux-tenant-id`` is ``X-Goflux-Tenant-Id``."""
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


class WireHeaders(dict[str, str]):
    """Every header of a request by lowercase name (first value), and every line.

    ``lines`` keeps repeated lines, which :attr:`goflux.Message.wire_headers` reads.
    """

    __slots__ = ("lines",)

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, str]] = []


class Incoming:
    """What a request's headers carry for goflux.

    Attributes:
        headers: User headers (``X-Goflux-*``, prefix removed, canonical names), or None.
        message_id: ``X-Message-ID``, or None.
        wire: Every header (lowercase names), for trace extraction and
            ``Message.wire_headers``.
    """

    __slots__ = ("headers", "message_id", "raw_message_id", "wire")

    def __init__(
        self,
        headers: Headers | None,
        message_id: str | None,
        raw_message_id: bytes | None,
        wire: WireHeaders,
    ) -> None:
        self.headers = headers
        self.message_id = message_id
        self.raw_message_id = raw_message_id
        """The message ID's bytes as received (echoed in a reply unchanged)."""
        self.wire = wire


def _text(value: bytes) -> str:
    try:
        return value.decode()
    except UnicodeDecodeError:
        return value.decode("latin-1")  # what HTTP/1.1 allowed once (obs-text)


def incoming(raw: Iterable[tuple[bytes, bytes]]) -> Incoming:
    """Read an ASGI request's header lines (lowercase names, as servers hand them)."""
    pairs: list[tuple[str, str]] = []
    message_id: str | None = None
    raw_message_id: bytes | None = None
    wire = WireHeaders()
    lines = wire.lines
    for raw_name, raw_value in raw:
        name = raw_name.decode("latin-1").lower()
        value = _text(raw_value)
        lines.append((name, value))
        wire.setdefault(name, value)
        if raw_name[:_PREFIX_LEN].lower() == _PREFIX and len(raw_name) > _PREFIX_LEN:
            pairs.append((canonical(name[_PREFIX_LEN:]), value))
        elif message_id is None and name == "x-message-id" and value:
            message_id = value  # Go reads an empty one as none
            raw_message_id = raw_value
    headers = Headers._trusted(pairs) if pairs else None
    return Incoming(headers, message_id, raw_message_id, wire)


def error_body(text: str) -> bytes:
    """An error answer's body, as Go's ``http.Error`` writes it: one line of text."""
    return (" ".join(text.split()) + "\n").encode()


def first_line(body: bytes) -> str:
    """The first line of an answer's body, printable, at most 200 characters."""
    text = body[: 4 * _DETAIL_CHARS].decode("utf-8", "replace")
    line = text.strip().split("\n", 1)[0]
    line = "".join(c if c.isprintable() and c != "\ufffd" else " " for c in line)
    line = " ".join(line.split())
    return line if len(line) <= _DETAIL_CHARS else line[: _DETAIL_CHARS - 1] + "…"


def parse_retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` value asks to wait (delta-seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time())


def retry_after(delay: float) -> str:
    """The ``Retry-After`` value for a delay of ``delay`` seconds (whole seconds, rounded up)."""
    return str(math.ceil(delay))


def route_path(scope: Scope) -> str:
    """The request path below where the app is mounted (``root_path`` removed)."""
    path = str(scope["path"])
    root = str(scope.get("root_path", "") or "")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :]
    return path
