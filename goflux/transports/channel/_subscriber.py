"""Subscribing to an in-process bus."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Generic, TypeVar, cast

from opentelemetry.util.types import AttributeValue

from goflux._codecs import as_decode_error
from goflux._compose.streams import Streaming
from goflux._errors import DecodeError, SubscribeError
from goflux._facts import Facts
from goflux._interfaces import Handler
from goflux._lifecycle import (
    StopOnExit,
    SubscriberLifecycle,
    enter_handler_context,
    in_handler_context,
)
from goflux._message import Message
from goflux._otel.scopes import ProcessScopes
from goflux._otel.semconv import MESSAGING_DESTINATION_NAME, MESSAGING_SYSTEM
from goflux._otel.telemetry import Telemetry
from goflux._subjects import is_wildcard
from goflux.transports.channel._bus import Bus, Envelope, Route
from goflux.transports.channel._system import SYSTEM

__all__ = ("ChannelSubscription", "Subscriber")

T = TypeVar("T")

logger = logging.getLogger("goflux.transports.channel")

DEFAULT_DRAIN_TIMEOUT = 30.0


class ChannelSubscription(StopOnExit, Generic[T]):
    """A running subscription on a :class:`Bus`; handlers run one message at a time.

    Messages reach the handler in publish order. A failing handler is logged and
    recorded in telemetry, and the next message is processed.

    Attributes:
        handled: Messages the handler completed without raising.
        failed: Messages whose handler raised (or was cancelled by a drain deadline).
        undecodable: Messages the bus codec could not decode (handler not called).
        dropped: Messages left unhandled because the subscription ended before it
            reached them (a drain that ran out of time, or a failed delivery loop).
    """

    def __init__(
        self,
        bus: Bus[T],
        pattern: str,
        handler: Handler[T],
        *,
        queue: str | None,
        buffer: int,
        drain_timeout: float,
        telemetry: Telemetry,
    ) -> None:
        self._bus = bus
        self._pattern = pattern
        self._handler = handler
        self._queue = queue
        self._drain_timeout = drain_timeout
        self._scopes = ProcessScopes(
            telemetry,
            SYSTEM,
            template=pattern if is_wildcard(pattern) else None,
            consumer_group=queue,
        )
        self._route = Route(pattern, queue, buffer)
        self._telemetry = telemetry
        self._unwatch: list[Callable[[], None]] = []
        self._lag: dict[str, AttributeValue] = {
            MESSAGING_SYSTEM: SYSTEM,
            MESSAGING_DESTINATION_NAME: pattern,
        }
        self._draining = False
        self._expired = False  # the drain deadline passed: handle nothing more
        self._task: asyncio.Task[None] | None = None
        self._drainer: asyncio.Task[None] | None = None
        self.handled = 0
        self.failed = 0
        self.undecodable = 0
        self.dropped = 0

    def _start(self) -> asyncio.Task[None]:
        self._bus.add(self._route)
        route = self._route
        # goflux.consumer.lag, until it ends
        self._unwatch.append(self._telemetry.watch_lag(self._lag, lambda: route.pending))
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"goflux-channel-{self._pattern}"
        )
        return self._task

    def _watch_waiting(self, read: Callable[[], int]) -> Callable[[], None]:
        """Add ``read()`` (a message stream's buffer) to this subscription's lag."""
        unwatch = self._telemetry.watch_lag(self._lag, read)
        self._unwatch.append(unwatch)
        return unwatch

    @property
    def subject(self) -> str:
        """The subject or pattern subscribed to."""
        return self._pattern

    @property
    def running(self) -> bool:
        """True until the subscription has stopped."""
        return self._task is not None and not self._task.done()

    @property
    def pending(self) -> int:
        """Messages waiting for the handler (in the inbox or held for publishers)."""
        return self._route.pending

    async def _run(self) -> None:
        enter_handler_context(self)
        route = self._route
        try:
            while True:
                envelope = route.take()
                if envelope is None:
                    if self._draining:
                        return
                    await route.wait()
                    continue
                await self._process(envelope)
                if self._expired:
                    return  # a handler swallowed the deadline's cancel: stop anyway
        finally:
            # However the loop ends, leave the bus and release waiting publishers.
            for unwatch in self._unwatch:
                unwatch()
            self._bus.remove(route)
            left = route.close()
            if left:
                self.dropped += left
                logger.warning(
                    "subscription to %r ended with %d messages unhandled", self._pattern, left
                )

    async def _process(self, envelope: Envelope) -> None:
        codec = self._bus.codec
        try:
            with self._scopes.open(
                envelope.subject,
                envelope.trace,
                message_id=envelope.message_id,
                body_size=len(envelope.data) if envelope.data is not None else None,
            ):
                if codec is not None:
                    try:
                        payload = codec.decode(cast("bytes", envelope.value))
                    except Exception as caught:  # noqa: BLE001 - any codec failure: undecodable
                        self.undecodable += 1
                        error = as_decode_error(caught, codec, envelope.value)
                        raise error  # noqa: B904 - its cause is set
                else:
                    payload = envelope.value
                message: Message[T] = Message(
                    envelope.subject,
                    cast("T", payload),
                    headers=envelope.headers.copy() if envelope.headers else None,
                    id=envelope.message_id,
                    data=envelope.data,
                )
                await self._handler(message)
        except asyncio.CancelledError:
            self.failed += 1
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the subscription itself is being cancelled (drain deadline)
            # The handler cancelled something of its own and let it escape.
            logger.error("handler for message on %r was cancelled", envelope.subject)
        except DecodeError as exc:
            logger.exception("undecodable message on %r, skipped: %s", envelope.subject, exc)
        except Exception as exc:
            self.failed += 1
            logger.exception(
                "handler failed for message on %r: %s: %s",
                envelope.subject,
                type(exc).__name__,
                exc,
            )
        else:
            self.handled += 1

    async def stop(self, timeout: float | None = None) -> None:
        """Drain: take no new messages, handle those already published to it, then stop.

        Messages published before the drain began, including those whose publishers
        were waiting for room, are handled. A handler still running after ``timeout``
        seconds (default: the subscriber's drain timeout) is cancelled, and what is
        left is counted in :attr:`dropped`. The deadline holds even if the caller is
        cancelled. Called from the subscription's own handler, it starts the drain
        without waiting for it.
        """
        task = self._task
        if task is None:
            return
        if self._drainer is None:
            self._draining = True
            self._bus.remove(self._route)
            self._route.interrupt()
            deadline = self._drain_timeout if timeout is None else timeout
            self._drainer = asyncio.get_running_loop().create_task(
                self._enforce_deadline(task, deadline), name=f"goflux-drain-{self._pattern}"
            )
        if in_handler_context(self):
            return  # called from a handler (or a task it spawned): don't wait for itself
        await asyncio.shield(self._drainer)

    async def _enforce_deadline(self, task: asyncio.Task[None], deadline: float) -> None:
        done, _ = await asyncio.wait((task,), timeout=deadline)
        if done:
            return
        logger.warning("drain of %r timed out after %.3gs", self._pattern, deadline)
        self._expired = True
        task.cancel()
        done, _ = await asyncio.wait((task,), timeout=max(deadline, 1.0))
        if not done:
            # The handler ignores cancellation; stop waiting for it and account for
            # what it will never reach.
            left = self._route.close()
            self.dropped += left
            logger.error(
                "handler on %r ignores cancellation; abandoned it with %d messages unhandled",
                self._pattern,
                left,
            )

    async def wait(self) -> None:
        """Wait until the subscription stops.

        Raises:
            SubscribeError: The delivery loop failed, or was cancelled without ``stop()``.
        """
        task = self._task
        if task is None:
            return
        await asyncio.wait((task,))
        if task.cancelled():
            if self._drainer is None:
                raise SubscribeError(f"subscription to {self._pattern!r} was cancelled")
            return
        exc = task.exception()
        if exc is not None:
            raise SubscribeError(f"subscription to {self._pattern!r} failed: {exc}") from exc


class Subscriber(SubscriberLifecycle["ChannelSubscription[T]"], Streaming[T], Generic[T]):
    """Subscribes handlers to subjects on a :class:`Bus`.

    Args:
        bus: The bus to subscribe on.
        queue: Queue group name: subscriptions sharing it (and matching a message)
            compete, each message reaching one of them.
        buffer: Inbox size per subscription; default: the bus's.
        drain_timeout: Seconds a drain may take before handlers are cancelled.
        telemetry: Tracing and metrics; default: OpenTelemetry globals.

    Raises:
        ValueError: ``buffer`` < 1 or ``drain_timeout`` < 0.
    """

    def __init__(
        self,
        bus: Bus[T],
        *,
        queue: str | None = None,
        buffer: int | None = None,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        telemetry: Telemetry | None = None,
    ) -> None:
        if buffer is not None and buffer < 1:
            raise ValueError(f"buffer must be >= 1, got {buffer}")
        if drain_timeout < 0:
            raise ValueError(f"drain_timeout must be >= 0, got {drain_timeout}")
        if queue is not None and (not queue or any(c.isspace() for c in queue)):
            raise ValueError(f"queue group must be a non-empty name without spaces: {queue!r}")
        self._bus = bus
        self._queue = queue
        self._buffer = buffer if buffer is not None else bus.buffer
        self._drain_timeout = drain_timeout
        self._tel = Telemetry.or_default(telemetry)
        super().__init__()

    def _facts(self) -> Facts:
        return Facts("channel", queue=self._queue)

    async def start(self, subject: str, handler: Handler[T]) -> ChannelSubscription[T]:
        """Subscribe ``handler`` to ``subject``; messages published after this returns arrive.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: The subscriber is closed.
        """

        async def open_subscription() -> ChannelSubscription[T]:
            subscription = ChannelSubscription(
                self._bus,
                subject,
                handler,
                queue=self._queue,
                buffer=self._buffer,
                drain_timeout=self._drain_timeout,
                telemetry=self._tel,
            )
            subscription._start()
            return subscription

        return await self._start_subscription(subject, open_subscription)

    async def subscribe(self, subject: str, handler: Handler[T]) -> None:
        """Subscribe and run until cancelled or the subscriber is closed, then drain.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: The subscriber is closed.
        """
        await self._run(await self.start(subject, handler))
