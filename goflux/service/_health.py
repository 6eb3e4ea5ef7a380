"""Health probes as a plain ASGI app: ``/livez`` and ``/readyz`` with JSON details."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Protocol

__all__ = ("ASGIApp", "HealthReport", "answer_lifespan", "health_app", "http_app", "send_response")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
"""An ASGI 3 application."""


class HealthReport(Protocol):
    """What ``/readyz`` reports: :class:`goflux.Readiness` is one."""

    @property
    def ready(self) -> bool:
        """Whether to answer 200 (else 503)."""
        ...

    def as_dict(self) -> dict[str, object]:
        """The JSON body."""
        ...


def health_app(
    readiness: Callable[[], HealthReport],
    *,
    liveness: Callable[[], Mapping[str, object]] | None = None,
) -> ASGIApp:
    """An ASGI app answering ``GET /livez`` and ``GET /readyz`` (and ``HEAD``).

    ``/livez`` answers 200 while the process serves requests at all (with
    ``liveness()``'s details, if given). ``/readyz`` answers 200 when
    ``readiness().ready``, else 503, with the report as JSON either way. Mounted under
    a prefix (``app.mount("/health", ...)``), the paths are relative to it. Other
    paths get 404, other methods 405.
    """

    async def app(scope: Scope, send: Send) -> None:
        path = scope["path"]
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        path = path.rstrip("/") or "/"
        if path not in ("/livez", "/readyz"):
            await _answer(send, 404, {"error": f"no such probe {path!r}; try /livez or /readyz"})
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _answer(send, 405, {"error": "probes answer GET and HEAD"})
            return
        head = scope["method"] == "HEAD"
        if path == "/livez":
            await _answer(send, 200, {"live": True, **(liveness() if liveness else {})}, head)
            return
        report = readiness()
        await _answer(send, 200 if report.ready else 503, report.as_dict(), head)

    return http_app(app)


def http_app(handle: Callable[[Scope, Send], Awaitable[None]]) -> ASGIApp:
    """An ASGI app answering HTTP requests with ``handle(scope, send)``.

    Lifespan events are answered (nothing to start or stop); other scopes are ignored.
    """

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
        elif scope["type"] == "http":
            await handle(scope, send)

    return app


async def answer_lifespan(receive: Receive, send: Send) -> None:
    """Answer an ASGI lifespan's startup and shutdown: there is nothing to start or stop."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _answer(send: Send, status: int, body: Mapping[str, object], head: bool = False) -> None:
    data = json.dumps(body, separators=(",", ":")).encode()
    await send_response(send, status, data, "application/json", head=head)


async def send_response(
    send: Send, status: int, data: bytes, content_type: str, *, head: bool = False
) -> None:
    """Send one whole HTTP response (no caching) through ASGI ``send``."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(data)).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b"" if head else data})
