"""The members of a :class:`goflux.Group`: subscriptions, responders, processors, tasks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, TypeVar

from goflux._backoff import REDELIVERY_BACKOFF, BackoffLike
from goflux._compose.deadletter import DeadLetter
from goflux._compose.endpoints import Endpoint
from goflux._compose.processing import process
from goflux._compose.readiness import Check
from goflux._compose.streams import MessageStream
from goflux._interfaces import Handler, Subscription

__all__ = (
    "Member",
    "ProcessMember",
    "SubscriptionMember",
    "TaskMember",
    "owned_connection_check",
)

T = TypeVar("T")


class Member(Protocol):
    """A part of a group: started, checked, stopped and described together."""

    name: str

    def endpoints(self) -> tuple[Endpoint, ...]:
        """The subjects it receives on (for describing the service)."""

    def check(self) -> Check:
        """Whether the member is doing its work now."""

    async def start(self) -> None:
        """Start; return once ready."""

    async def ended(self) -> None:
        """Return when the member has ended; raise what made it fail."""

    async def stop(self, timeout: float) -> None:
        """Stop gracefully within ``timeout`` seconds."""


class SubscriptionMember(Member):
    """A subscription of a handler (or a responder) to a subject."""

    def __init__(
        self,
        via: object,
        subject: str,
        start: Callable[[], Awaitable[Subscription]],
        endpoint: Endpoint,
    ) -> None:
        self.name = endpoint.member
        self._via = via
        self._start = start
        self._endpoint = endpoint
        self.subscription: Subscription | None = None

    def endpoints(self) -> tuple[Endpoint, ...]:
        return (self._endpoint,)

    async def start(self) -> None:
        self.subscription = await self._start()

    def check(self) -> Check:
        if self.subscription is None:
            return Check(self.name, False, "not started")
        if not self.subscription.running:
            return Check(self.name, False, "stopped")
        return _connection_check(self.name, self._via)

    async def ended(self) -> None:
        assert self.subscription is not None
        await self.subscription.wait()

    async def stop(self, timeout: float) -> None:
        if self.subscription is not None:
            await self.subscription.stop(timeout)


class ProcessMember(Member):
    """:func:`goflux.process` of a message stream."""

    def __init__(
        self,
        stream: MessageStream[T],
        handler: Handler[T],
        concurrency: int,
        endpoint: Endpoint,
        *,
        redelivery_backoff: BackoffLike | None = REDELIVERY_BACKOFF,
        dead_letter: DeadLetter | None = None,
    ) -> None:
        self.name = endpoint.member
        self._stream: MessageStream[Any] = stream
        self._handler: Handler[Any] = handler
        self._concurrency = concurrency
        self._redelivery_backoff = redelivery_backoff
        self._dead_letter = dead_letter
        self._endpoint = endpoint
        self._task: asyncio.Task[object] | None = None

    def endpoints(self) -> tuple[Endpoint, ...]:
        return (self._endpoint,)

    async def start(self) -> None:
        await self._stream.start()
        run = process(
            self._stream,
            self._handler,
            concurrency=self._concurrency,
            redelivery_backoff=self._redelivery_backoff,
            dead_letter=self._dead_letter,
        )
        self._task = asyncio.get_running_loop().create_task(run, name=self.name)

    def check(self) -> Check:
        if self._task is None:
            return Check(self.name, False, "not started")
        if self._task.done():
            return Check(self.name, False, "stopped")
        return Check(self.name, True, "running")

    async def ended(self) -> None:
        assert self._task is not None
        try:
            await asyncio.shield(self._task)
        finally:
            if self._task.done():
                await self._stream.close()

    async def stop(self, timeout: float) -> None:
        task = self._task
        # Intake stops, running handlers finish, the buffer is worked off; whatever is
        # left at the deadline is cancelled and handed back.
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout
        await self._stream.stop(timeout)
        if task is not None and not task.done():
            await asyncio.wait((task,), timeout=max(0.0, until - loop.time()))
            task.cancel()
            await asyncio.wait((task,))
        await self._stream.close()


class TaskMember(Member):
    """A task running an async function."""

    def __init__(
        self, fn: Callable[[], Awaitable[object]], name: str, on_stop: Literal["cancel", "wait"]
    ) -> None:
        self.name = name
        self._fn = fn
        self._on_stop = on_stop
        self._task: asyncio.Task[object] | None = None
        self._cancelled_by_group = False

    def endpoints(self) -> tuple[Endpoint, ...]:
        return ()

    async def start(self) -> None:
        async def run() -> object:
            return await self._fn()

        self._task = asyncio.get_running_loop().create_task(run(), name=self.name)

    def check(self) -> Check:
        if self._task is None:
            return Check(self.name, False, "not started")
        # A task that returned has done its work; only one that failed is not fine.
        if self._task.done() and not self._task.cancelled() and self._task.exception():
            return Check(self.name, False, "failed")
        return Check(self.name, True, "running" if not self._task.done() else "ended")

    async def ended(self) -> None:
        assert self._task is not None
        try:
            await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if not (self._task.cancelled() and self._cancelled_by_group):
                raise

    async def stop(self, timeout: float) -> None:
        task = self._task
        if task is None or task.done():
            return
        if self._on_stop == "wait":
            await asyncio.wait((task,), timeout=timeout)
            if task.done():
                return
        self._cancelled_by_group = True
        task.cancel()
        await asyncio.wait((task,))


def _connection_check(name: str, subscriber: object) -> Check:
    """A running subscription's check: fine unless its transport says it is disconnected."""
    connected = getattr(subscriber, "connected", None)
    if connected is False:
        return Check(name, False, "disconnected (reconnecting)")
    return Check(name, True, "running")


def owned_connection_check(resource: object) -> Check | None:
    """The check of an owned nats-py connection (``is_connected``), None for other resources."""
    connected = getattr(resource, "is_connected", None)
    if not isinstance(connected, bool):
        return None
    where = _configured_servers(resource)
    if connected:
        return Check(f"connection to {where}", True, "connected")
    reconnecting = getattr(resource, "is_reconnecting", False) is True
    return Check(f"connection to {where}", False, "reconnecting" if reconnecting else "closed")


def _configured_servers(client: object) -> str:
    """The servers a nats-py client was given (not those it discovered), credentials left out.

    The name of its check stays the same through reconnects and cluster gossip.
    """
    servers = list(getattr(client, "servers", None) or ())
    discovered = list(getattr(client, "discovered_servers", None) or ())
    given = [url for url in servers if url not in discovered] or servers
    names = [f"{url.scheme}://{url.hostname}:{url.port}" for url in given]
    return ", ".join(names) or "NATS"
