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
from goflux.service._health import ASGIApp
from goflux.service._options import RunOptions

__all__ = ("HttpServer", "listen_tcp", "serve_probes")

if TYPE_CHECKING:
    import uvicorn

logger = logging.getLogger("goflux.run")


def _quiet_server(app: ASGIApp) -> uvicorn.Server:
    """Uvicorn serving ``app`` without its signal handlers and logging setup.

    The process that embeds it handles signals and logging. uvicorn (the ``service``
    extra) is imported here, on first use, so that importing :mod:`goflux.service` or
    :mod:`goflux.asgi` needs no ASGI server.
    """
    require("uvicorn", "service", "an HTTP server (the health probes, asyncapi --serve)")
    import uvicorn  # noqa: PLC0415 - see above

    class QuietServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(
        app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=1
    )
    return QuietServer(config)


def listen_tcp(host: str, port: int, backlog: int = 128) -> socket.socket:
    """A listening TCP socket on ``host:port`` whose connections send without delay.

    asyncio turns Nagle's algorithm off (``TCP_NODELAY``) only on sockets that say they
    are TCP (``proto`` 6), and an accepted socket copies its listener's ``proto``,
    which ``socket.create_server`` leaves at 0. uvicorn writes an answer's head and
    body apart: with Nagle on, the body then waits for the client's delayed ACK, about
    40 ms on Linux, on every request of a kept-alive connection after its first.

    Raises:
        OSError: The address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, port), family=family, backlog=backlog)
    return socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, fileno=listener.detach())


class HttpServer:
    """An ASGI app served by uvicorn on ``host:port`` in the current event loop.

    The socket is bound on enter, so requests are accepted (queued) from then on and
    a port in use fails at once; port 0 picks a free one (see :attr:`port`).

    Raises:
        OSError: The address cannot be bound.
    """

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        self._app = app
        self._host = host
        self._port = port
        self._socket: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        """The bound port."""
        assert self._socket is not None, "the server is not started"
        port: int = self._socket.getsockname()[1]
        return port

    async def __aenter__(self) -> Self:
        server = _quiet_server(self._app)  # first: without uvicorn, nothing is bound
        self._socket = listen_tcp(self._host, self._port)
        self._server = server
        self._task = asyncio.get_running_loop().create_task(
            self._server.serve(sockets=[self._socket]), name="goflux-health-server"
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
    logger.info("health probes on http://%s:%d (/livez, /readyz)", host, server.port)
