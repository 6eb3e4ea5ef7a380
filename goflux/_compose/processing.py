"""Handle a stream of messages with bounded concurrency: :func:`process`."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from goflux._backoff import REDELIVERY_BACKOFF, Backoff, BackoffLike, as_backoff, failure_logged
from goflux._compose.deadletter import DeadLetter
from goflux._compose.settling import failure_delay, settle, settle_failure
from goflux._compose.streams import MessageStream
from goflux._errors import SettlementError
from goflux._interfaces import Handler
from goflux._message import Message

__all__ = ("ProcessStats", "process")

T = TypeVar("T")

logger = logging.getLogger("goflux._compose.processing")


@dataclass(slots=True)
class ProcessStats:
    """What :func:`process` did.

    Attributes:
        handled: Messages whose handler returned.
        failed: Messages whose handler raised (each was nak'd unless it settled itself).
    """

    handled: int = 0
    failed: int = 0


async def process(
    messages: AsyncIterable[Message[T]],
    handler: Handler[T],
    *,
    concurrency: int = 1,
    redelivery_backoff: BackoffLike | None = REDELIVERY_BACKOFF,
    dead_letter: DeadLetter | None = None,
) -> ProcessStats:
    """Run ``handler`` on every message of ``messages``, ``concurrency`` at a time.

    Settlement follows auto-ack: a handler that returns has its message acked, one that
    raises has it nak'd with a delay growing with its delivery count
    (``redelivery_backoff``; None redelivers at once), or dead-lettered (with
    ``dead_letter``) and terminated when the error is a :class:`~goflux.NonRetryable`;
    a message the handler (or middleware such as
    :func:`goflux.middleware.retry_ack`) settled itself is left alone. A failure is
    logged and counted and does not stop the others. At most ``concurrency``
    messages are taken from the stream at a time, so a bounded stream stays bounded.

    With a :class:`~goflux.MessageStream`, each handler runs in the context the message
    arrived in: the transport's consumer span is active, so publishes made in the
    handler continue its trace, as in a subscription handler.

    Returns when the stream ends (:meth:`MessageStream.stop`, or its subscription
    ended), after the running handlers finished. If ``process`` is cancelled, the
    running handlers are cancelled and their messages nak'd.

    Raises:
        ValueError: ``concurrency`` < 1.
        SubscribeError: The stream's subscription failed (after the running handlers
            finished).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    backoff = None if redelivery_backoff is None else as_backoff(redelivery_backoff)
    return await _Processor(handler, concurrency, backoff, dead_letter).run(messages)


class _Processor(Generic[T]):
    """The state of one :func:`process` call."""

    def __init__(
        self,
        handler: Handler[T],
        concurrency: int,
        backoff: Backoff | None,
        dead_letter: DeadLetter | None,
    ) -> None:
        self._handler = handler
        self._backoff = backoff
        self._dead_letter = dead_letter
        self._slots = asyncio.Semaphore(concurrency)
        self._running: set[asyncio.Task[None]] = set()
        self.stats = ProcessStats()

    async def _handle(self, message: Message[T]) -> None:
        stats = self.stats
        try:
            await self._handler(message)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # process itself is cancelled
                await settle(message, ack=False)
                raise
            stats.failed += 1
            logger.error("handler for message on %r was cancelled", message.subject)
            await settle(message, ack=False)
        except Exception as exc:
            stats.failed += 1
            delivery = message.delivery
            count = 1 if delivery is None else delivery.num_delivered
            if failure_logged(count, failure_delay(message, self._backoff)):
                logger.exception(
                    "handler failed for message on %r (delivery %d): %s: %s",
                    message.subject,
                    count,
                    type(exc).__name__,
                    exc,
                )
            await self._failed(message, exc)
        else:
            stats.handled += 1
            await settle(message, ack=True)
        finally:
            self._slots.release()

    async def _failed(self, message: Message[T], exc: Exception) -> None:
        """Settle a failure the handler left unsettled (see ``settle_failure``)."""
        try:
            await settle_failure(message, exc, backoff=self._backoff, dead_letter=self._dead_letter)
        except SettlementError as failure:
            logger.warning("could not settle message on %r: %s", message.subject, failure)

    async def _next(
        self, stream: MessageStream[T] | None, iterator: AsyncIterator[Message[T]] | None
    ) -> tuple[Message[T], contextvars.Context | None]:
        if iterator is not None:
            return await anext(iterator), None
        assert stream is not None
        entry = await stream.next_entry()
        assert entry is not None  # no deadline given
        return entry.message, entry.context

    async def run(self, messages: AsyncIterable[Message[T]]) -> ProcessStats:
        stream = messages if isinstance(messages, MessageStream) else None
        # A stream is read entry by entry, not through a loop of its own (a loop left
        # unfinished would close the stream).
        iterator = aiter(messages) if stream is None else None
        loop = asyncio.get_running_loop()
        running, slots = self._running, self._slots
        try:
            while True:
                await slots.acquire()
                try:
                    message, context = await self._next(stream, iterator)
                except BaseException:
                    slots.release()
                    raise
                task = loop.create_task(self._handle(message), context=context)
                running.add(task)
                task.add_done_callback(running.discard)
        except StopAsyncIteration:
            pass
        except asyncio.CancelledError:
            for task in running:
                task.cancel()
            if running:
                await asyncio.wait(running)
            raise
        except BaseException:  # the stream failed: let the running handlers finish
            if running:
                await asyncio.wait(running)
            raise
        if running:
            await asyncio.wait(running)
        return self.stats
