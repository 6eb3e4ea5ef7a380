"""Shared lifecycle plumbing for implementations of the interfaces."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from types import TracebackType
from typing import Generic, Self, TypeVar

from goflux._errors import PublishError, SubscribeError
from goflux._interfaces import Subscription
from goflux._subjects import validate_pattern

__all__ = (
    "AcloseOnExit",
    "CloseOnExit",
    "StopOnExit",
    "SubscriberLifecycle",
    "closed_publisher_error",
    "enter_handler_context",
    "in_handler_context",
)

SubscriptionT = TypeVar("SubscriptionT", bound=Subscription)

# The subscription whose handlers run in this context. Tasks inherit it, so a task a
# handler spawns is recognised too.
_HANDLING: ContextVar[object | None] = ContextVar("goflux_handling", default=None)


def enter_handler_context(subscription: object) -> None:
    """Mark the current task (and tasks it creates) as running ``subscription``'s handlers."""
    if _HANDLING.get() is not subscription:
        _HANDLING.set(subscription)


def in_handler_context(subscription: object) -> bool:
    """Whether the caller runs inside (or was spawned by) ``subscription``'s handler.

    A drain started from there must not wait for itself.
    """
    return _HANDLING.get() is subscription


def closed_publisher_error(subject: str, why: str = "publisher is closed") -> PublishError:
    """The error a publish to ``subject`` gets once its publisher (or connection) closed.

    It is permanent: publishing again through the same publisher cannot succeed.
    """
    return PublishError(f"cannot publish to {subject!r}: {why}", subject=subject, permanent=True)


class CloseOnExit:
    """Mixin: ``async with obj:`` opens ``obj``, returns it, and awaits ``obj.close()`` on exit.

    Opening is :meth:`_open`, which does nothing unless a subclass overrides it.
    """

    __slots__ = ()

    async def close(self) -> None:
        """Release resources; subclasses implement it."""
        raise NotImplementedError

    async def _open(self) -> None:
        """Get ready for use as the ``async with`` block starts (nothing by default)."""

    async def __aenter__(self) -> Self:
        await self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class AcloseOnExit(CloseOnExit):
    """Mixin for async iterators: as :class:`CloseOnExit`, closed by :meth:`aclose`."""

    __slots__ = ()

    async def aclose(self) -> None:
        """Stop iterating and release resources; subclasses implement it."""
        raise NotImplementedError

    async def close(self) -> None:
        """The same as :meth:`aclose`."""
        await self.aclose()


class StopOnExit:
    """Mixin for subscriptions: ``async with subscription:`` drains it on exit."""

    __slots__ = ()

    async def stop(self, timeout: float | None = None) -> None:
        """Drain and stop; subclasses implement it."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


class SubscriberLifecycle(CloseOnExit, Generic[SubscriptionT]):
    """What every subscriber does with its subscriptions: track, run, drain on close."""

    def __init__(self) -> None:
        self._subscriptions: set[SubscriptionT] = set()
        self._closed = False

    async def _start_subscription(
        self, subject: str, open_subscription: Callable[[], Awaitable[SubscriptionT]]
    ) -> SubscriptionT:
        """The start routine of every subscriber: check, open, and track a subscription.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: The subscriber is closed (before or while the subscription
                opened; one opened meanwhile is stopped), or ``open_subscription``
                raised it.
        """
        validate_pattern(subject)
        self._refuse_if_closed(subject)
        subscription = await open_subscription()
        if self._closed:
            await subscription.stop()
            self._refuse_if_closed(subject)
        # Stopped subscriptions are forgotten here, so the set stays small.
        self._subscriptions = {s for s in self._subscriptions if s.running}
        self._subscriptions.add(subscription)
        return subscription

    def _refuse_if_closed(self, subject: str) -> None:
        if self._closed:
            raise SubscribeError(f"cannot subscribe to {subject!r}: subscriber is closed")

    async def _run(self, subscription: SubscriptionT) -> None:
        """Wait until ``subscription`` stops (or the caller is cancelled), then drain it."""
        try:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # Cancelled while starting, but the cancellation was swallowed on the way
                # (Python 3.11's asyncio.wait_for does that when its future completes at
                # the same moment, and nats-py's flush uses it): honour it now.
                raise asyncio.CancelledError
            await subscription.wait()
        finally:
            await subscription.stop()

    async def close(self) -> None:
        """Drain and stop every subscription; later ``start`` calls raise."""
        self._closed = True
        await asyncio.gather(*(s.stop() for s in list(self._subscriptions) if s.running))
