"""HTTP routes behind a gate: served while the service runs, else 503 (:class:`RoutesGate`)."""

from __future__ import annotations

import asyncio
from typing import Final

from goflux.service._health import ASGIApp, Receive, Scope, Send, answer_lifespan

__all__ = ("RETRY_AFTER", "RoutesGate")

RETRY_AFTER: Final = 1
"""Seconds a caller answered 503 by a closed gate is told to wait (``Retry-After``)."""

DISCARDED_AT_MOST: Final = 16 << 20
"""Most bytes of a refused request's body read into the void before the answer.

A client that writes its whole body before it reads (httpx, Go's net/http) gets the
503 and not a reset connection: a connection closed with unread data is reset.
"""
DISCARD_TIMEOUT: Final = 5.0
"""Seconds a refused request's body may take to arrive before the answer goes anyway."""

NO_ROUTES: Final = (
    "the service serves no HTTP routes: its group has no HTTP subscriber or responder"
)


class RoutesGate:
    """An ASGI app: the routes it was opened with while open, 503 while closed.

    Closed (before the service runs, and from its drain on), every request is
    answered 503 with ``Retry-After`` and ``Connection: close``, so that a client's
    retry opens a new connection, which may reach another worker; its body (up to
    16 MiB, within 5 s) is read and dropped first, so that the client, still writing
    it, reads the answer rather than a reset. Opened without an
    app (the service has no HTTP routes), it answers 404. Requests that passed the
    gate are not its business: the routes drain them. Lifespan events are answered
    here (the service's lifecycle is not the routes'); WebSocket connections are
    refused.

    Args:
        closed: What a closed gate answers (one line: ``orders is not running``).
    """

    def __init__(self, closed: str) -> None:
        self._app: ASGIApp | None = None
        self._open = False
        self._closed = closed

    @property
    def is_open(self) -> bool:
        """Whether requests reach the routes."""
        return self._open

    def open(self, app: ASGIApp | None) -> None:
        """Let requests through to ``app`` (None: answer 404, there are no routes)."""
        self._app = app
        self._open = True

    def close(self, why: str) -> None:
        """Answer 503 with ``why`` from now on."""
        self._open = False
        self._closed = why

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection."""
        kind = scope["type"]
        if kind == "lifespan":
            await answer_lifespan(receive, send)
        elif kind == "http":
            if not self._open:
                why = self._closed
                await _discard_body(scope, receive)
                headers = [(b"retry-after", str(RETRY_AFTER).encode()), (b"connection", b"close")]
                await _send_text(send, 503, why, headers)
            elif self._app is None:
                await _send_text(send, 404, NO_ROUTES, [])
            else:
                await self._app(scope, receive, send)
        elif kind == "websocket":  # the routes take POSTs only; 1013: try again later
            await send({"type": "websocket.close", "code": 1003 if self._open else 1013})


async def _discard_body(scope: Scope, receive: Receive) -> None:
    """Read the request's body and drop it: at most :data:`DISCARDED_AT_MOST` bytes."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length" and value.isdigit() and int(value) > DISCARDED_AT_MOST:
            return  # far too much to wait for: the answer goes at once
    read = 0
    try:
        async with asyncio.timeout(DISCARD_TIMEOUT):
            while read <= DISCARDED_AT_MOST:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client left
                read += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return
    except TimeoutError:
        return


async def _send_text(
    send: Send, status: int, text: str, headers: list[tuple[bytes, bytes]]
) -> None:
    """Answer as Go's ``http.Error`` does: one line of plain text."""
    body = (" ".join(text.split()) + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"x-content-type-options", b"nosniff"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
