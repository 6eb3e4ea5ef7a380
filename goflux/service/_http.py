"""Serve an ASGI app from inside a running event loop: :class:`HttpServer` (uvicorn)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Self

from goflux._extras import require
from goflux._urls import http_url
from goflux.service._health import ASGIApp
from goflux.service._options import RunOptions

__all__ = ("KEEP_ALIVE_SECONDS", "HttpServer", "listen", "serve_probes")

if TYPE_CHECKING:
    import uvicorn

logger = logging.getLogger("goflux.run")

_BACKLOG = 2048  # uvicorn's default: connections the kernel holds until a server takes them
# Seconds an idle keep-alive connection stays open. Longer than the clients keep theirs
# (Go's transport 90 s, httpx 5 s, Node 4-5 s): a client must be the side that drops an
# idle connection, or a request it sends as the server closes it is lost in between
# (a ReadError, the request maybe handled). uvicorn's own default is 5 s, httpx's too.
# Go's http.Server, serving Go goflux, keeps idle connections without a limit.
KEEP_ALIVE_SECONDS = 120


def _quiet_server(app: ASGIApp) -> uvicorn.Server:
    """Uvicorn serving ``app`` without its signal handlers and logging setup.

    Idle keep-alive connections stay open :data:`KEEP_ALIVE_SECONDS`.

    The process that embeds it handles signals and logging. uvicorn (the ``service``
    extra) is imported here, on first use, so that importing :mod:`goflux.service` or
    :mod:`goflux.asgi` needs no ASGI server.
    """
    require(
        "uvicorn", "service", "an HTTP server (the health probes, --http-port, asyncapi --serve)"
    )
    import uvicorn  # noqa: PLC0415 - see above

    class QuietServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
    return QuietServer(config)


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening (port 0: a free one).

    Connections are accepted by the kernel into its backlog from now on; they wait
    there until a server takes them.

    Raises:
        OSError: The address cannot be bound (a port in use, an unknown address).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0 as socket.create_server leaves it: asyncio sets TCP_NODELAY on
    # the accepted connections only when their proto says TCP. Without it, a response
    # sent in two writes (headers, then body) waits for the client's delayed ACK: 40 ms.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


class HttpServer:
    """An ASGI app served by uvicorn on ``host:port`` in the current event loop.

    The socket is bound on enter, so requests are accepted (queued) from then on and
    a port in use fails at once; port 0 picks a free one (see :attr:`port`).
    :meth:`on` serves on a socket that is already listening (bound earlier, or
    inherited from a supervisor) instead.

    Raises:
        OSError: The address cannot be bound.
    """

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        self._app = app
        self._host = host
        self._port = port
        self._socket: socket.socket | None = None
        self._given: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def on(cls, app: ASGIApp, sock: socket.socket) -> HttpServer:
        """A server of ``app`` on the listening ``sock`` (which it closes on exit)."""
        host, port = sock.getsockname()[:2]
        server = cls(app, host, port)
        server._given = sock
        return server

    @property
    def port(self) -> int:
        """The bound port."""
        assert self._socket is not None, "the server is not started"
        port: int = self._socket.getsockname()[1]
        return port

    async def __aenter__(self) -> Self:
        server = _quiet_server(self._app)  # first: without uvicorn, nothing is bound
        self._socket = self._given or listen(self._host, self._port)
        self._server = server
        self._task = asyncio.get_running_loop().create_task(
            self._server.serve(sockets=[self._socket]), name="goflux-http-server"
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await asyncio.wait((self._task,))
        if self._socket is not None:
            self._socket.close()


async def serve_probes(stack: contextlib.AsyncExitStack, app: ASGIApp, options: RunOptions) -> None:
    """Serve the health probes ``app`` as ``options`` say, until ``stack`` closes.

    Raises:
        OSError: The address cannot be bound; the message names it.
    """
    host, port = options.health_host, options.health_port
    assert port is not None
    try:
        server = await stack.enter_async_context(HttpServer(app, host, port))
    except OSError as exc:
        raise OSError(f"cannot serve the health probes on {host}:{port}: {exc}") from exc
    logger.info("health probes on %s (/livez, /readyz)", http_url(host, server.port))
