"""Subscriptions as async iterators of messages, and what happens when a loop is left.

A :class:`MessageStream` is the handle users iterate; its state lives in a
:class:`~goflux._compose.feed.StreamFeed` that the subscription's handler keeps alive. A
stream left without ``async with`` must not keep its messages: Python calls nothing
on an iterator when a loop is left by ``break`` or an exception, so each ``async
for`` loop iterates a :class:`Loop` whose finalizer notices that the loop was left
before the stream ended, and the stream itself has a finalizer for when the last
reference to it goes. Either schedules :meth:`StreamFeed.close` on the feed's event
loop, which hands every unsettled message back (nak) at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from goflux._compose.feed import DEFAULT_BUFFER, Starter, StreamEntry, StreamFeed
from goflux._facts import Facts, facts_of
from goflux._interfaces import Handler, Subscriber, Subscription
from goflux._message import Message
from goflux._subjects import validate_pattern

__all__ = (
    "DEFAULT_BUFFER",
    "Loop",
    "MessageStream",
    "Starter",
    "StreamEntry",
    "Streaming",
    "abandon",
    "message_stream",
)

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 - what one step of a loop yields

logger = logging.getLogger("goflux._compose.streams")

# Closes of abandoned streams under way: the event loop keeps only weak references
# to tasks, and nobody else awaits these.
_CLOSING: set[asyncio.Task[None]] = set()


def abandon(feed: StreamFeed[Any], why: str) -> None:
    """Have ``feed`` closed on its event loop: its stream was left without closing it.

    Safe to call from a finalizer, in any thread; does nothing if there is nothing to
    close or the loop is gone.
    """
    loop = feed.loop
    if loop is None or loop.is_closed() or not feed.abandonable:
        return
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        loop.call_soon_threadsafe(_close_abandoned, feed, why)


def _close_abandoned(feed: StreamFeed[Any], why: str) -> None:
    if not feed.abandonable:  # closed, or entered with async with, meanwhile
        return
    held = feed.buffered + feed.unsettled
    logger.info(
        "stream of %r %s without being closed: closing it, %d received messages handed back",
        feed.subject,
        why,
        held,
    )
    task = asyncio.get_running_loop().create_task(
        feed.close(), name=f"goflux-stream-{feed.subject}-abandoned"
    )
    _CLOSING.add(task)
    task.add_done_callback(_closed)


def _closed(task: asyncio.Task[None]) -> None:
    _CLOSING.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.error("closing an abandoned stream failed", exc_info=task.exception())


class Loop(Generic[I]):
    """One ``async for`` loop over a stream: left early, it closes the stream.

    ``step`` takes the next item (raising ``StopAsyncIteration`` at the end). The
    loop keeps whatever ``step`` is bound to alive. When it is finalized after at
    least one step, without having seen the end, the loop was left by ``break``, an
    exception or cancellation: unless the stream is inside ``async with`` (whose exit
    closes it), the feed is closed (see :func:`abandon`).
    """

    __slots__ = ("_ended", "_feed", "_step", "_used")

    def __init__(self, step: Callable[[], Awaitable[I]], feed: StreamFeed[Any]) -> None:
        self._step = step
        self._feed = feed
        self._used = False
        self._ended = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> I:
        """The next item of the stream.

        Raises:
            StopAsyncIteration: The stream has ended.
            SubscribeError: The subscription failed.
        """
        self._used = True
        try:
            return await self._step()
        except StopAsyncIteration:
            self._ended = True
            raise

    def __del__(self) -> None:
        if self._used and not self._ended:
            abandon(self._feed, "was left by break, an exception or cancellation")


class MessageStream(Generic[T]):
    """An async iterator of the messages of one subscription, through a bounded buffer.

    Create it with ``subscriber.stream(subject, buffer=N)`` (or
    :func:`message_stream`). It subscribes when entered (``async with``) or on the
    first ``async for`` step::

        async with orders.stream("orders.>", buffer=100) as messages:
            async for message in messages:
                ...
                await message.ack()

    Every message keeps its acker: settle it as a handler in manual-ack mode would
    (:func:`goflux.process` does it for you). Until it is settled, the transport counts
    it as in flight (JetStream keeps it alive past ``ack_wait`` meanwhile, buffered or
    handed out). On transports without acknowledgement settling is a no-op.

    Ways to end it:

    - :meth:`stop` (from another task: a :class:`goflux.Group`, a signal handler) stops
      taking new messages; iteration goes on through what was already received and
      then ends. Messages still unsettled at the subscription's drain deadline are
      handed back to the broker.
    - :meth:`close` (leaving ``async with``) ends it at once: messages not settled yet,
      buffered or handed out, are nak'd for redelivery at once (on transports without
      acknowledgement, buffered ones are dropped, counted and logged).
    - Without ``async with``, leaving an ``async for`` loop over the stream before it
      ended (``break``, an exception, cancellation) closes it the same way, right
      after the loop is left; so does dropping the last reference to a started
      stream. Inside ``async with``, a loop may be left and the stream iterated
      again: the block's exit closes it.

    Iteration ends when the stream is stopped or closed, or its subscription ends (the
    subscriber was closed); if the subscription failed, the error is raised once the
    buffer is empty.
    """

    def __init__(
        self,
        start: Starter[T],
        subject: str,
        *,
        buffer: int = DEFAULT_BUFFER,
        source: object = None,
    ) -> None:
        if buffer < 1:
            raise ValueError(f"buffer must be >= 1, got {buffer}")
        feed = self._feed = StreamFeed(start, subject, buffer)
        self._source = source  # the subscriber, for describing the service
        weakref.finalize(self, abandon, feed, "was dropped").atexit = False

    def _facts(self) -> Facts | None:
        return facts_of(self._source)

    # ------------------------------------------------------------------ facts

    @property
    def subject(self) -> str:
        """The subject or pattern the stream subscribes to."""
        return self._feed.subject

    @property
    def subscription(self) -> Subscription | None:
        """The running subscription (None before the stream starts)."""
        return self._feed.subscription

    @property
    def buffered(self) -> int:
        """Messages received and not yet taken by the consumer."""
        return self._feed.buffered

    @property
    def unsettled(self) -> int:
        """Messages taken by the consumer that can be acknowledged and are not settled yet."""
        return self._feed.unsettled

    @property
    def dropped(self) -> int:
        """Messages without acknowledgement discarded by :meth:`close`."""
        return self._feed.dropped

    # -------------------------------------------------------------- lifecycle

    async def start(self) -> Self:
        """Subscribe, if not done yet; return once messages published from now on arrive.

        Raises:
            InvalidSubject: The subject is not a valid pattern.
            SubscribeError: The subscription could not start, or the stream is closed.
        """
        await self._feed.start()
        return self

    async def stop(self, timeout: float | None = None) -> None:
        """Stop taking messages; iteration ends after the ones already received.

        Returns once the subscription has drained: every message it received is
        settled by the consumer, or the drain deadline ``timeout`` has passed (the
        subscription then hands back what is still unsettled). Called from a task
        that iterates the stream (or from a handler of :func:`process`), it only
        starts the drain, since waiting there would wait for itself; do not await it
        from other tasks that hold messages of the stream unsettled.
        """
        await self._feed.stop(timeout)

    async def close(self) -> None:
        """End the stream now: hand back every unsettled message, stop the subscription.

        Buffered messages and messages handed out but not settled are nak'd (redelivered
        at once); on transports without acknowledgement the buffered ones are dropped
        and counted in :attr:`dropped`. A later settlement of a handed-back message
        raises :class:`~goflux.AlreadySettled`.
        """
        await self._feed.close()

    async def __aenter__(self) -> Self:
        self._feed.owned = True
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._feed.close()

    # -------------------------------------------------------- consumer side

    async def next_entry(self, deadline: float | None = None) -> StreamEntry[T] | None:
        """Take the next message with the context it arrived in (for :func:`process`).

        Returns None if ``deadline`` (event loop time) passes first.

        Raises:
            StopAsyncIteration: The stream has ended and its buffer is empty.
            SubscribeError: The subscription failed (once the buffer is empty).
        """
        return await self._feed.next_entry(deadline)

    def __aiter__(self) -> Loop[Message[T]]:
        """A loop over the stream; leaving it early closes the stream (see the class)."""
        return Loop(self.__anext__, self._feed)

    async def __anext__(self) -> Message[T]:
        """The next message; waits for one.

        Raises:
            StopAsyncIteration: The stream has ended and its buffer is empty.
            SubscribeError: The subscription failed (once the buffer is empty).
        """
        entry = await self._feed.next_entry()
        assert entry is not None  # no deadline given
        return entry.message


class Streaming(Generic[T]):
    """Mixin giving a subscriber ``stream(subject, buffer=N)``."""

    __slots__ = ()

    async def start(self, subject: str, handler: Handler[T]) -> Subscription:
        """Start a subscription (implemented by the subscriber)."""
        raise NotImplementedError

    def _stream_starter(self, subject: str) -> Starter[T]:
        """How a stream's subscription starts; transports may size it for streaming."""

        def start(handler: Handler[T]) -> Awaitable[Subscription]:
            return self.start(subject, handler)

        return start

    def stream(self, subject: str, *, buffer: int = DEFAULT_BUFFER) -> MessageStream[T]:
        """Messages on ``subject`` as an async iterator, through a buffer of ``buffer``.

        See :class:`MessageStream`. The subscription starts when the stream is entered
        or first iterated.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            ValueError: ``buffer`` < 1.
        """
        validate_pattern(subject)
        return MessageStream(self._stream_starter(subject), subject, buffer=buffer, source=self)


def message_stream(
    subscriber: Subscriber[T], subject: str, *, buffer: int = DEFAULT_BUFFER
) -> MessageStream[T]:
    """Messages on ``subject`` from any subscriber, as a :class:`MessageStream`.

    Same as ``subscriber.stream(subject, buffer=buffer)`` for goflux's subscribers. For
    another ``Subscriber`` implementation, messages that can be acknowledged are held
    by its handler until settled, so its handler concurrency bounds how many are out.

    Raises:
        InvalidSubject: ``subject`` is not a valid pattern.
        ValueError: ``buffer`` < 1.
    """
    if isinstance(subscriber, Streaming):
        stream: MessageStream[T] = subscriber.stream(subject, buffer=buffer)
        return stream
    validate_pattern(subject)

    def start(handler: Handler[T]) -> Awaitable[Subscription]:
        return subscriber.start(subject, handler)

    return MessageStream(start, subject, buffer=buffer, source=subscriber)
