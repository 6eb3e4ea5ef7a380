"""Run a goflux service inside an ASGI app (FastAPI, Starlette): :class:`ServiceLifespan`.

::

    life = ServiceLifespan(orders_service)  # async def orders_service(group) -> Orders
    app = FastAPI(lifespan=life)
    app.mount("/health", life.health)  # /health/livez, /health/readyz
    app.mount("/hooks", life.http)  # the group's HTTP subscribers and responders


    @app.post("/orders")
    async def create(order: Order) -> dict[str, int]:
        receipt = await life.resources.publisher.publish("orders.created", order)
        return {"sequence": receipt.sequence}

The lifespan calls the service with a fresh :class:`~goflux.Group` when the app
starts, starts the group (subscriptions are up before the first request is served),
and drains it when the app shuts down. What the service returns (typed publishers,
state) is :attr:`ServiceLifespan.resources` for the HTTP handlers, and the routes
of its HTTP subscribers and responders (:mod:`goflux.transports.http`) are
:attr:`ServiceLifespan.http`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar

from goflux._compose.group import Group
from goflux._compose.readiness import Readiness
from goflux._errors import GofluxError
from goflux.service._gate import RoutesGate
from goflux.service._health import ASGIApp, health_app
from goflux.service._routes import http_members

__all__ = ("ServiceLifespan", "ServiceNotRunning")

R = TypeVar("R")

logger = logging.getLogger("goflux.asgi")


class ServiceNotRunning(GofluxError, RuntimeError):
    """The service's resources were asked for outside the app's lifespan."""


class ServiceLifespan(Generic[R]):
    """An ASGI lifespan that runs a goflux service with the app.

    Pass it as ``lifespan=`` to FastAPI or Starlette. On startup it builds a
    :class:`~goflux.Group`, awaits ``service(group)`` and starts the group; a failure
    of either fails the app's startup (the server exits with it), after closing what
    the service owned. On shutdown it drains the group within ``drain_timeout``. A
    member failing while the app runs is logged and makes :meth:`readiness` false
    (the app keeps serving; a probe on :attr:`health` reports it).

    :attr:`http` serves the group's HTTP routes (its HTTP subscribers and
    responders) while the app runs: mount it (``app.mount("/hooks", life.http)``).

    Args:
        service: An async function that fills the group and returns what HTTP
            handlers need (typed publishers, for instance).
        drain_timeout: Seconds the drain may take at shutdown.
    """

    def __init__(
        self, service: Callable[[Group], Awaitable[R]], *, drain_timeout: float = 30.0
    ) -> None:
        self._service = service
        self._drain_timeout = drain_timeout
        self._group: Group | None = None
        self._resources: R | None = None
        self._running = False
        self.health: ASGIApp = health_app(self.readiness)
        """An ASGI app for probes: ``/livez`` and ``/readyz`` (mount it anywhere)."""
        self._routes = RoutesGate(f"{self._name} is not running")
        self.http: ASGIApp = self._routes
        """An ASGI app serving the HTTP routes of the group's HTTP subscribers and
        responders (:func:`goflux.transports.http.app_of`); mount it anywhere.

        It answers once the group has started; 503 (with ``Retry-After``) before the
        app's startup and from its shutdown on, while the group drains the requests in
        flight; 404 for every path when the group has no HTTP member."""

    @property
    def resources(self) -> R:
        """What the service returned, while the app runs.

        Raises:
            ServiceNotRunning: Before startup or after shutdown (during the drain at
                shutdown they are still there, for handlers finishing their work).
        """
        if not self._running:
            raise ServiceNotRunning(
                f"{self._name} is not running: "
                "its resources exist between the app's startup and shutdown"
            )
        return self._resources  # type: ignore[return-value]  # set while running

    @property
    def _name(self) -> str:
        return getattr(self._service, "__qualname__", "the service")

    @property
    def group(self) -> Group | None:
        """The running group (None outside the lifespan)."""
        return self._group

    def readiness(self) -> Readiness:
        """The group's readiness; ``state="new"`` while the app is not started."""
        if self._group is None:
            return Readiness("new")
        return self._group.readiness()

    def __call__(self, app: object) -> contextlib.AbstractAsyncContextManager[None]:
        """The lifespan context for ``app`` (FastAPI / Starlette call this)."""
        return self._lifespan()

    @contextlib.asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[None]:
        if self._group is not None:
            raise RuntimeError("this ServiceLifespan is already running an app")
        group = self._group = Group(drain_timeout=self._drain_timeout, signals=())
        try:
            try:
                self._resources = await self._service(group)
                app = _app_of(group)
                await group.start()
            except BaseException:
                await group.stop()
                raise
            self._running = True
            self._routes.open(app)
            try:
                yield
            finally:
                self._routes.close(f"{self._name} is stopping")
                try:
                    await group.stop()  # handlers still draining may use the resources
                finally:
                    self._running = False
                    self._routes.close(f"{self._name} is not running")
                if group.failure is not None:
                    logger.error(
                        "the service failed while the app ran: %s: %s",
                        type(group.failure).__name__,
                        group.failure,
                    )
        finally:
            self._group = None
            self._resources = None


def _app_of(group: Group) -> ASGIApp | None:
    """The app of ``group``'s HTTP routes, None without an HTTP member.

    Raises:
        SubscribeError: Two members on different routers serve the same path.
    """
    if not http_members(group):
        return None  # and goflux.transports.http (httpx, Starlette) is not imported
    from goflux.transports.http import app_of  # noqa: PLC0415 - needs goflux[http]

    return app_of(group)
