"""What every HTTP route shares: its lifecycle, the drain, and reading the body."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Final

from opentelemetry.trace import SpanKind
from starlette.types import Receive, Scope, Send

from goflux._lifecycle import StopOnExit, enter_handler_context, in_handler_context
from goflux._otel.scopes import NULL_SCOPE, NullScope, ProcessScope, ProcessScopes
from goflux._otel.semconv import HTTP_REQUEST_METHOD, URL_PATH
from goflux._otel.telemetry import Telemetry
from goflux._subjects import is_wildcard
from goflux.transports.http._answers import BodyRefused, check_encoding, read_body, send_error
from goflux.transports.http._router import Router
from goflux.transports.http._system import SYSTEM
from goflux.transports.http._wire import Incoming, check_base_path

__all__ = (
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_MAX_BODY_SIZE",
    "RouteOptions",
    "RouteOwner",
    "ServedRoute",
)

logger = logging.getLogger("goflux.transports.http")

DEFAULT_MAX_BODY_SIZE: Final = 1 << 20  # 1 MiB, as Go goflux
DEFAULT_BODY_TIMEOUT: Final = 30.0
DEFAULT_DRAIN_TIMEOUT: Final = 30.0
_RETRY_SOON: Final = {"retry-after": "1"}
# Stopping: a kept-alive client reconnects (to another worker, where there are several).
_GOING_AWAY: Final = {"retry-after": "1", "connection": "close"}
_CLOSE: Final = {"connection": "close"}


@dataclass(frozen=True, slots=True)
class RouteOptions:
    """What every route of a subscriber or responder is given.

    Raises:
        ValueError: One is out of range.
    """

    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        size = self.max_body_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"max_body_size must be an int >= 0, got {size!r}")
        if not self.body_timeout > 0:
            raise ValueError(f"body_timeout must be > 0 seconds, got {self.body_timeout}")
        if not self.drain_timeout >= 0:
            raise ValueError(f"drain_timeout must be >= 0 seconds, got {self.drain_timeout}")
        most = self.max_concurrency
        if most is not None and (isinstance(most, bool) or not isinstance(most, int) or most < 1):
            raise ValueError(f"max_concurrency must be an int >= 1 or None, got {most!r}")


class RouteOwner:
    """What a subscriber and a responder share: their routes' options, path and router."""

    _options: RouteOptions
    _base_path: str
    _tel: Telemetry
    _router: Router

    def _own_routes(
        self,
        base_path: str,
        options: RouteOptions,
        telemetry: Telemetry | None,
        router: Router | None,
    ) -> None:
        """Set up (the constructor's part).

        Raises:
            ValueError: ``base_path`` is no path.
        """
        self._options = options
        self._base_path = check_base_path(base_path)
        self._tel = Telemetry.or_default(telemetry)
        self._router = router if router is not None else Router()

    @property
    def app(self) -> Router:
        """The ASGI application serving the started subjects."""
        return self._router

    @property
    def base_path(self) -> str:
        """The path prefix of every route."""
        return self._base_path

    def _http_facts(self) -> dict[str, object]:
        """The HTTP settings worth describing (``Facts.http``)."""
        return {"basePath": self._base_path, "maxBodySize": self._options.max_body_size}


class ServedRoute(StopOnExit):
    """A subject served on a router until stopped; counts and drains its requests.

    Subclasses answer a request whose body was read (:meth:`_answer`). Once stopping,
    new requests are answered 503 at once; those in flight finish within the drain
    timeout, and are then cancelled (answered 503 too). With ``max_concurrency``, a
    request beyond that many in flight is answered 503 at once (``Retry-After: 1``).
    """

    def __init__(
        self,
        router: Router,
        base_path: str,
        subject: str,
        options: RouteOptions,
        telemetry: Telemetry,
        kind: SpanKind,
    ) -> None:
        self._scopes = ProcessScopes(
            telemetry,
            SYSTEM,
            template=subject if is_wildcard(subject) else None,
            kind=kind,
            parented=True,  # HTTP is synchronous: the sender waits, the span is its child
        )
        self._router = router
        self._base_path = base_path
        self._subject = subject
        self._max_body_size = options.max_body_size
        self._body_timeout = options.body_timeout
        self._drain_timeout = options.drain_timeout
        self._max_concurrency = options.max_concurrency
        self._tasks: set[asyncio.Task[object]] = set()
        self._cancelled: set[asyncio.Task[object]] = set()  # by the drain deadline
        self._idle: asyncio.Event | None = None
        self._stopping = False
        self._stopped = asyncio.Event()
        self._stop_task: asyncio.Task[None] | None = None
        self.received = 0
        """Requests that reached the route (whatever their answer)."""
        self.refused = 0
        """Requests answered before their body was taken (413, 408, 415, 503: stopping, busy)."""

    @property
    def base_path(self) -> str:
        """The path prefix (``""`` or ``/a/b``)."""
        return self._base_path

    @property
    def subject(self) -> str:
        """The subject pattern served."""
        return self._subject

    @property
    def path(self) -> str:
        """Where the route is served: ``{base_path}/{subject}``."""
        return f"{self._base_path}/{self._subject}"

    @property
    def running(self) -> bool:
        """True until the route starts stopping."""
        return not self._stopping

    @property
    def in_flight(self) -> int:
        """Requests being answered now."""
        return len(self._tasks)

    async def wait(self) -> None:
        """Return once the route has stopped."""
        await self._stopped.wait()

    async def serve(self, scope: Scope, receive: Receive, send: Send, subject: str) -> None:
        """Answer one POST for the concrete ``subject`` (called by the router)."""
        self.received += 1
        if self._stopping:
            self.refused += 1
            await send_error(scope, receive, send, 503, f"{self.path} is stopping", _GOING_AWAY)
            return
        most = self._max_concurrency
        if most is not None and len(self._tasks) >= most:
            self.refused += 1
            await send_error(
                scope,
                receive,
                send,
                503,
                f"{self.path} is busy: {most} requests in flight",
                _RETRY_SOON,
            )
            return
        task: asyncio.Task[object] | None = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        enter_handler_context(self)
        try:
            try:
                check_encoding(scope)
                body = await read_body(scope, receive, self._max_body_size, self._body_timeout)
            except BodyRefused as exc:
                self.refused += 1
                headers = {**(exc.headers or {}), **(_CLOSE if exc.close else {})}
                await send_error(scope, receive, send, exc.status, exc.text, headers or None)
                return
            await self._answer(scope, receive, send, subject, body)
        except asyncio.CancelledError:
            if task not in self._cancelled:
                raise  # the server's own cancellation (it is shutting down)
            task.uncancel()
            with contextlib.suppress(Exception):
                await send_error(scope, receive, send, 503, f"{self.path} stopped", _GOING_AWAY)
        finally:
            self._tasks.discard(task)
            self._cancelled.discard(task)
            if self._idle is not None and not self._busy():
                self._idle.set()

    async def _answer(
        self, scope: Scope, receive: Receive, send: Send, subject: str, body: bytes
    ) -> None:
        raise NotImplementedError

    def _scope(
        self, scope: Scope, subject: str, wire: Incoming, body: bytes
    ) -> ProcessScope | NullScope:
        """The span and metrics of answering one request (nothing built while inactive)."""
        if not self._scopes.telemetry.active:
            return NULL_SCOPE
        return self._scopes.open(
            subject,
            wire.wire,
            message_id=wire.message_id,
            body_size=len(body),
            attributes={HTTP_REQUEST_METHOD: "POST", URL_PATH: scope["path"]},
        )

    def _busy(self) -> bool:
        """Whether requests other than the caller's own are in flight."""
        current = asyncio.current_task()
        return any(task is not current for task in self._tasks)

    async def stop(self, timeout: float | None = None) -> None:
        """Stop taking requests (503 from now on) and let those in flight finish.

        Requests still running after ``timeout`` seconds (default: the drain
        timeout) are cancelled and answered 503. Called from one of this route's
        own handlers, it does not wait for that one.
        """
        if self._stop_task is None:
            self._stopping = True
            wait = self._drain_timeout if timeout is None else timeout
            self._stop_task = asyncio.get_running_loop().create_task(self._drain(wait))
        if in_handler_context(self):
            return  # the drain waits for the caller's handler; do not wait for it here
        await asyncio.shield(self._stop_task)

    async def _drain(self, timeout: float) -> None:
        try:
            if self._tasks:
                self._idle = asyncio.Event()
                try:
                    await asyncio.wait_for(self._idle.wait(), timeout)
                except TimeoutError:
                    left = set(self._tasks)
                    logger.warning(
                        "%d request(s) on %s still running after the %ss drain: cancelled",
                        len(left),
                        self.path,
                        timeout,
                    )
                    self._cancelled |= left
                    for task in left:
                        task.cancel()
                    self._idle.clear()
                    if self._tasks:
                        await self._idle.wait()
        finally:
            self._stopped.set()
