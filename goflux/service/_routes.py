"""A worker's HTTP routes (``--http-port``): bound at once, served once its group runs."""

from __future__ import annotations

import logging
import socket
from types import TracebackType
from typing import TYPE_CHECKING, Self

from goflux._compose.group import Group
from goflux._errors import GofluxError
from goflux._facts import facts_of
from goflux._urls import http_url
from goflux.service._gate import RoutesGate
from goflux.service._http import HttpServer, listen
from goflux.service._options import RunOptions

if TYPE_CHECKING:
    from goflux.transports.http import Router

__all__ = ("NoRoutes", "WorkerRoutes", "bind_routes", "http_members", "warn_unserved")

logger = logging.getLogger("goflux.run")

DRAINING = "the service is draining: try again"
"""What a draining worker answers a new request (503)."""


class NoRoutes(GofluxError, ValueError):
    """``--http-port`` was given, but the service's group has no HTTP routes to serve."""


def http_members(group: Group) -> tuple[str, ...]:
    """The names of ``group``'s members that take their messages over HTTP."""
    return tuple(
        endpoint.member
        for endpoint in group.endpoints
        if endpoint.action == "receive"
        and (facts := facts_of(endpoint.via)) is not None
        and facts.transport == "http"
    )


def warn_unserved(group: Group, spec: str) -> None:
    """Warn that ``group``'s HTTP members are unreachable: ``goflux run`` has no port for them."""
    members = http_members(group)
    if members:
        logger.warning(
            "%s takes messages over HTTP (%s), but nothing serves its routes: "
            "give goflux run --http-port",
            spec,
            ", ".join(members),
        )


def bind_routes(options: RunOptions) -> socket.socket:
    """The listening socket of the HTTP routes: ``options.http_host:http_port``.

    Raises:
        OSError: The address cannot be bound; the message names it.
    """
    host, port = options.http_host, options.http_port
    assert port is not None
    try:
        return listen(host, port)
    except OSError as exc:
        raise OSError(f"cannot serve the HTTP routes on {host}:{port}: {exc}") from exc


class WorkerRoutes:
    """The HTTP routes of a worker's group, on a socket that listens before the group fills.

    On enter the socket is bound (or taken over from the supervisor, ``http_fd``): a
    port in use fails before anything starts, and from then on connections wait in
    the kernel's backlog. :meth:`prepare` finds the group's app once the service has
    filled the group; :meth:`serve` starts taking connections once the group has
    started, so no request meets a route that is not there yet; :meth:`drain` makes
    new requests 503 (``Retry-After``, ``Connection: close``) while those in flight
    finish with the group's drain. Exit stops the server.

    Args:
        options: ``http_host`` and ``http_port`` say where.
        http_fd: A listening socket inherited from the supervisor (shared by every
            worker); None: bind one here.

    Raises:
        OSError: On enter: the address cannot be bound (the message names it).
    """

    def __init__(self, options: RunOptions, http_fd: int | None = None) -> None:
        self._options = options
        self._fd = http_fd
        self._socket: socket.socket | None = None
        self._gate = RoutesGate("the service is starting")
        self._server: HttpServer | None = None
        self._app: Router | None = None

    @property
    def url(self) -> str:
        """Where the routes are served: ``http://host:port`` (the bound port)."""
        assert self._socket is not None, "not entered"
        host, port = self._socket.getsockname()[:2]
        return http_url(host, port)

    async def __aenter__(self) -> Self:
        if self._fd is not None:
            self._socket = socket.socket(fileno=self._fd)
        else:
            self._socket = bind_routes(self._options)
            logger.info("HTTP routes on %s (taken once the service has started)", self.url)
        return self

    def prepare(self, group: Group, spec: str) -> None:
        """Find the app of ``group``'s HTTP routes (before the group starts).

        Raises:
            NoRoutes: The group has no HTTP member.
            SubscribeError: Two members on different routers serve the same path.
        """
        if not http_members(group):
            raise NoRoutes(
                f"{spec} has no HTTP routes for --http-port to serve: "
                "its group has no HTTP subscriber or responder (goflux.transports.http)"
            )
        from goflux.transports.http import app_of  # noqa: PLC0415 - needs goflux[http]

        app = app_of(group)
        if app is None:
            raise NoRoutes(
                f"{spec} has no HTTP routes for --http-port to serve: "
                "its HTTP members serve themselves (no goflux router)"
            )
        self._app = app

    async def serve(self) -> None:
        """Take connections from now on: the group has started."""
        assert self._socket is not None, "not entered"
        assert self._app is not None, "not prepared"
        self._gate.open(self._app)
        self._server = await HttpServer.on(self._gate, self._socket).__aenter__()
        paths = ", ".join(f"POST {route.base_path}/{route.subject}" for route in self._app.routes)
        logger.info("serving HTTP routes: %s", paths)

    def drain(self) -> None:
        """Answer new requests 503 from now on (those in flight go on)."""
        self._gate.close(DRAINING)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.drain()
        if self._server is not None:
            await self._server.__aexit__(exc_type, exc, tb)
        if self._socket is not None:
            self._socket.close()
