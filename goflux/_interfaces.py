"""The interfaces application code is written against.

They are Protocols, generic with the variance their direction implies: a publisher
*consumes* values (``Publisher[T]`` is contravariant, so a ``Publisher[object]`` can
stand in for a ``Publisher[Order]``), a subscriber *produces* them (covariant).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Protocol, Self, TypeAlias, TypeVar

from goflux._headers import HeadersLike
from goflux._message import Message
from goflux._receipt import PublishReceipt

__all__ = (
    "Closeable",
    "GenericMiddleware",
    "GenericPublisherMiddleware",
    "Handler",
    "Middleware",
    "Publisher",
    "PublisherMiddleware",
    "RequestHandler",
    "Requester",
    "Responder",
    "Subscriber",
    "Subscription",
)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)
Req = TypeVar("Req")
Resp = TypeVar("Resp")
Req_co = TypeVar("Req_co", covariant=True)
Req_contra = TypeVar("Req_contra", contravariant=True)
Resp_co = TypeVar("Resp_co", covariant=True)
Resp_contra = TypeVar("Resp_contra", contravariant=True)


class Handler(Protocol[T_contra]):
    """Processes one message: ``async def handle(msg: Message[T]) -> None``.

    Returning means success; raising means failure (transports with acknowledgement
    nak the message, middleware may decide otherwise).
    """

    def __call__(self, message: Message[T_contra], /) -> Awaitable[None]:
        """Process ``message``; raise to report failure."""
        ...


RequestHandler: TypeAlias = Callable[[Req], Awaitable[Resp]]
"""Answers one request: ``async def handle(request: Req) -> Resp``."""


class Middleware(Protocol[T]):
    """Wraps a handler in another handler (retry, ack policy, timeouts, ...)."""

    def __call__(self, handler: Handler[T], /) -> Handler[T]:
        """Return a handler that wraps ``handler``."""
        ...


class _Closing(Protocol):
    """``close()`` and the exit half of ``async with`` (the entry half is typed per protocol).

    The protocols below declare ``__aenter__`` returning their own protocol type rather
    than ``Self``: with ``Self``, mypy cannot infer a generic call on a constructor,
    such as ``retry_publish()(jetstream.Publisher(js, codec))``. Implementations still
    return ``Self``; a protocol that extends one of these re-declares ``__aenter__``
    to keep its own type in ``async with``.
    """

    async def close(self) -> None:
        """Drain and release resources; later use raises."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class Closeable(_Closing, Protocol):
    """Something with resources to release; ``async with`` closes it on exit.

    Closing drains: publishers stop accepting work, subscribers and responders stop
    taking messages and let in-flight handlers finish. The caller owns connections.
    """

    async def __aenter__(self) -> Closeable: ...


class Subscription(Protocol):
    """A running subscription, returned once the transport has registered interest.

    Use it as an async context manager or call :meth:`stop`, which drains: no new
    messages are taken, in-flight handlers finish within the deadline.
    """

    @property
    def subject(self) -> str:
        """The subject or pattern subscribed to."""
        ...

    @property
    def running(self) -> bool:
        """True until the subscription has stopped."""
        ...

    async def stop(self, timeout: float | None = None) -> None:
        """Drain and stop; handlers still running after ``timeout`` seconds are cancelled."""
        ...

    async def wait(self) -> None:
        """Wait until the subscription stops; raise the error that stopped it, if any."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class Publisher(_Closing, Protocol[T_contra]):
    """Publishes typed values to subjects; a :class:`Closeable`."""

    async def __aenter__(self) -> Publisher[T_contra]: ...

    async def publish(
        self,
        subject: str,
        value: T_contra,
        /,
        *,
        headers: HeadersLike | None = None,
        message_id: str | None = None,
    ) -> PublishReceipt | None:
        """Encode and publish ``value`` to ``subject``.

        Returns:
            The broker's receipt on transports that confirm storage (JetStream), else None.

        Raises:
            InvalidSubject: ``subject`` is not a valid publish subject.
            EncodeError: ``value`` cannot be encoded.
            PublishError: The transport failed to publish.
        """
        ...


class Subscriber(_Closing, Protocol[T_co]):
    """Delivers typed messages from subjects to handlers; a :class:`Closeable`."""

    async def __aenter__(self) -> Subscriber[T_co]: ...

    async def start(self, subject: str, handler: Handler[T_co]) -> Subscription:
        """Subscribe and return once the subscription is ready to receive.

        A message published after this returns reaches ``handler``.

        Raises:
            InvalidSubject: ``subject`` is not a valid subscription pattern.
            SubscribeError: The subscriber is closed or the transport refused.
        """
        ...

    async def subscribe(self, subject: str, handler: Handler[T_co]) -> None:
        """Subscribe and run until cancelled or the subscriber is closed, then drain."""
        ...


class Requester(_Closing, Protocol[Req_contra, Resp_co]):
    """Sends typed requests and returns typed replies; a :class:`Closeable`."""

    async def __aenter__(self) -> Requester[Req_contra, Resp_co]: ...

    async def request(
        self,
        subject: str,
        request: Req_contra,
        /,
        *,
        headers: HeadersLike | None = None,
        timeout: float | None = None,
    ) -> Resp_co:
        """Send ``request`` to ``subject`` and return the decoded reply.

        Raises:
            RequestTimeout: No reply within the timeout.
            NoResponders: Nobody serves ``subject``.
            RemoteError: The responder's handler failed.
        """
        ...


class Responder(_Closing, Protocol[Req_co, Resp_contra]):
    """Serves typed requests on a subject with a request handler; a :class:`Closeable`."""

    async def __aenter__(self) -> Responder[Req_co, Resp_contra]: ...

    async def start(
        self, subject: str, handle: Callable[[Req_co], Awaitable[Resp_contra]]
    ) -> Subscription:
        """Start serving ``subject``; return once requests can reach ``handle``."""
        ...

    async def serve(self, subject: str, handle: Callable[[Req_co], Awaitable[Resp_contra]]) -> None:
        """Serve ``subject`` until cancelled or closed, then drain."""
        ...


class PublisherMiddleware(Protocol[T]):
    """Wraps a publisher in another publisher (retries, header forwarding, ...).

    The wrapper owns the publisher it wraps: closing the wrapper closes it.
    """

    def __call__(self, publisher: Publisher[T], /) -> Publisher[T]:
        """Return a publisher that wraps ``publisher``."""
        ...


class GenericMiddleware(Protocol):
    """Handler middleware that works for every payload type (goflux's own middleware).

    It is a :class:`Middleware` of any ``T``: applied to a ``Handler[Order]`` it returns
    a ``Handler[Order]``, and it composes with typed middleware in :func:`goflux.chain`.
    """

    def __call__(self, handler: Handler[T], /) -> Handler[T]:
        """Return a handler that wraps ``handler``."""
        ...


class GenericPublisherMiddleware(Protocol):
    """Publisher middleware that works for every payload type (goflux's own middleware).

    It is a :class:`PublisherMiddleware` of any ``T``: applied to a ``Publisher[Order]``
    it returns a ``Publisher[Order]`` that owns the original.
    """

    def __call__(self, publisher: Publisher[T], /) -> Publisher[T]:
        """Return a publisher that wraps ``publisher``."""
        ...
