"""Shared lifecycle plumbing for implementations of the interfaces."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from goflux.errors import SubscribeError
from goflux.interfaces import Subscription

__all__ = ("CloseOnExit", "StopOnExit", "SubscriberLifecycle")

SubscriptionT = TypeVar("SubscriptionT", bound=Subscription)


class CloseOnExit:
    """Mixin: ``async with obj:`` returns ``obj`` and awaits ``obj.close()`` on exit."""

    __slots__ = ()

    async def close(self) -> None:
        """Release resources; subclasses implement it."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


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

    def _refuse_if_closed(self, subject: str) -> None:
        if self._closed:
            raise SubscribeError(f"cannot subscribe to {subject!r}: subscriber is closed")

    def _track(self, subscription: SubscriptionT, done: asyncio.Future[Any]) -> None:
        """Remember ``subscription`` until ``done`` completes (it has stopped)."""
        self._subscriptions.add(subscription)
        done.add_done_callback(lambda _: self._subscriptions.discard(subscription))

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
        await asyncio.gather(*(s.stop() for s in list(self._subscriptions)))
