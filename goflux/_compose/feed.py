"""The buffer between a subscription and the consumers of a message stream.

A :class:`StreamFeed` subscribes with a :class:`StreamHandler` that puts each message
into a buffer of ``buffer`` messages; a full buffer pushes back on the transport
instead of growing. Every message keeps its acker: the stream's consumer acks, naks or
terminates it as a handler would, and until then the transport counts it as in flight
(JetStream keeps it alive past ``ack_wait`` meanwhile). That takes one of two ways:

- A subscription that holds messages itself (JetStream's) calls
  :meth:`StreamHandler.hand_off`, which returns as soon as the message is buffered;
  the subscription keeps the message in its :class:`Holding` until it is settled.
  Nothing waits per message: no task, future or closure, which is what a stream
  holding thousands of messages would otherwise cost.
- Any other subscriber calls the handler, which for a message that can be
  acknowledged returns only once the consumer settled it (the subscriber keeps it in
  flight while its handler runs).

The feed holds no reference to the :class:`~goflux.MessageStream` users hold (the
subscription's handler keeps the feed alive, never the stream), so a stream nobody
references any more can be finalized and its feed closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar, runtime_checkable

from goflux._errors import SettlementError, SubscribeError
from goflux._interfaces import Handler, Subscription
from goflux._message import Message, Outcome, observe_settlement

__all__ = (
    "DEFAULT_BUFFER",
    "Holding",
    "LagSource",
    "Starter",
    "StreamEntry",
    "StreamFeed",
    "StreamHandler",
)

T = TypeVar("T")

logger = logging.getLogger("goflux._compose.streams")  # the name users know

DEFAULT_BUFFER = 64
"""Messages a stream holds for its consumer by default."""

Starter = Callable[[Handler[T]], Awaitable[Subscription]]
"""Starts the subscription feeding a stream, given the stream's internal handler."""


class StreamEntry(Generic[T]):
    """A buffered message and the context it arrived in.

    The context is a copy of the transport's as the message was handed to the stream:
    the consumer span is current in it (see :func:`goflux.process`).
    """

    __slots__ = ("context", "message")

    def __init__(self, message: Message[T], context: contextvars.Context) -> None:
        self.message = message
        self.context = context


class Holding(Protocol):
    """The messages a subscription handed to a stream and holds until they are settled.

    A holding subscription counts each as in flight, keeps it alive past ``ack_wait``
    and, at its drain deadline or when it stops, hands back (naks) what is still
    unsettled, buffered or handed out.
    """

    def __len__(self) -> int:
        """How many messages are held (buffered or handed out, not settled yet)."""
        ...

    async def hand_back(self) -> None:
        """Nak every held message now, for redelivery at once."""
        ...


@runtime_checkable
class LagSource(Protocol):
    """A subscription that reports its waiting messages as ``goflux.consumer.lag``.

    A stream's buffer holds messages received and waiting for the stream's consumer
    (the application's loop is its worker): the stream adds its buffer's length to its
    subscription's lag, under the same attributes.
    """

    def _watch_waiting(self, read: Callable[[], int]) -> Callable[[], None]:
        """Add ``read()`` to the subscription's lag at each collection; return the undo."""
        ...


class StreamHandler(Generic[T]):
    """The handler a stream subscribes with.

    Called as a handler (by any subscriber), it buffers the message and, if the message
    can be acknowledged, returns only once the stream's consumer settled it: the
    subscriber keeps it in flight while its handler runs.

    A subscription that holds messages itself calls :meth:`hand_off` instead and
    registers its :class:`Holding` with :meth:`held_by`; it must not settle or release
    the message when ``hand_off`` returns. (JetStream's subscription does this.)
    """

    __slots__ = ("_feed",)

    def __init__(self, feed: StreamFeed[T]) -> None:
        self._feed = feed

    def __call__(self, message: Message[T], /) -> Awaitable[None]:
        """Buffer ``message``; for one that can be acknowledged, wait until it is settled."""
        return self._feed._receive(message)

    def hand_off(self, message: Message[T]) -> Awaitable[bool]:
        """Buffer ``message``, waiting for room; return once it is buffered (True).

        Once the stream is closed nothing is buffered (False): the subscription hands
        the message back when it stops, as it does every message it holds.
        """
        return self._feed._hand_off(message)

    def held_by(self, holding: Holding) -> None:
        """Tell the stream where its subscription keeps the messages it handed off."""
        self._feed._holding = holding


def _wake_one(waiters: deque[asyncio.Future[None]]) -> None:
    while waiters:
        waiter = waiters.popleft()
        if not waiter.done():
            waiter.set_result(None)
            return


def _wake_all(waiters: deque[asyncio.Future[None]]) -> None:
    while waiters:
        waiter = waiters.popleft()
        if not waiter.done():
            waiter.set_result(None)


class StreamFeed(Generic[T]):
    """The state of one message stream: its subscription, buffer and handed-out messages.

    :class:`~goflux.MessageStream` documents the behaviour; this is what it delegates
    to. ``loop`` is the event loop the feed started on (None before it starts), and
    ``owned`` says whether a stream is inside ``async with``, which closes it on exit.

    Attributes:
        dropped: Messages without acknowledgement discarded by :meth:`close`.
        owned: A stream is inside ``async with`` (its exit closes the feed).
        loop: The event loop the feed started on (None before it starts).
    """

    def __init__(self, start: Starter[T], subject: str, buffer: int) -> None:
        self._start_subscription = start
        self._subject = subject
        self._size = buffer
        self._queue: deque[StreamEntry[T]] = deque()
        # Messages whose handler awaits their settlement, and of those the ones handed
        # out (dicts as ordered sets); messages handed off to a holding subscription are
        # in its Holding instead.
        self._waiting: dict[Message[T], None] = {}
        self._taken: dict[Message[T], None] = {}
        self._holding: Holding | None = None
        self._space: deque[asyncio.Future[None]] = deque()  # the handler, waiting for room
        self._items: deque[asyncio.Future[None]] = deque()  # consumers, waiting for messages
        self._subscription: Subscription | None = None
        self._opening: asyncio.Task[Subscription] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None
        self._stopper: asyncio.Task[None] | None = None
        self._consumers: weakref.WeakSet[asyncio.Task[object]] = weakref.WeakSet()
        # The consumer registered last: a stream read in a loop registers its task once
        # (WeakSet.add makes a weak reference with a callback on every call).
        self._last_consumer: weakref.ref[asyncio.Task[object]] | None = None
        self._stop_requested = False
        self._closed = False
        self._ended = False  # the subscription has stopped: nothing more arrives
        self._failure: BaseException | None = None
        self._unwatch: Callable[[], None] | None = None  # the buffer's lag source
        self.dropped = 0
        self.owned = False
        self.loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ facts

    @property
    def subject(self) -> str:
        """The subject or pattern the stream subscribes to."""
        return self._subject

    @property
    def subscription(self) -> Subscription | None:
        """The running subscription (None before the stream starts)."""
        return self._subscription

    @property
    def buffered(self) -> int:
        """Messages received and not yet taken by the consumer."""
        return len(self._queue)

    @property
    def unsettled(self) -> int:
        """Messages taken by the consumer that can be acknowledged and are not settled yet."""
        holding = self._holding
        if holding is None:
            return len(self._taken)
        # What the subscription holds is buffered or handed out (until a hand-back, which
        # settles the buffered ones too: next_entry skips them).
        return max(len(holding) - len(self._queue), 0)

    @property
    def abandonable(self) -> bool:
        """Whether closing would hand back or stop anything (started, open, not in use).

        False before the feed started, once it is closing, while a stream is inside
        ``async with`` (its exit closes the feed), and after its subscription ended
        with nothing left in the buffer or handed out.
        """
        if self.loop is None or self._closing is not None or self.owned:
            return False
        held = self._taken or (self._holding is not None and len(self._holding) > 0)
        return not (self._ended and not self._queue and not held)

    # -------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Subscribe, if not done yet; return once messages published from now on arrive.

        Raises:
            InvalidSubject: The subject is not a valid pattern.
            SubscribeError: The subscription could not start, or the feed is closed.
        """
        if self._subscription is not None or self._stop_requested:
            return  # stopped before it started: nothing to subscribe
        if self._closed:
            raise SubscribeError(f"stream of {self._subject!r} is closed")
        if self._opening is None:
            self.loop = asyncio.get_running_loop()
            self._opening = self.loop.create_task(
                self._open(), name=f"goflux-stream-{self._subject}-start"
            )
        await asyncio.shield(self._opening)

    async def _open(self) -> Subscription:
        subscription = await self._start_subscription(StreamHandler(self))
        self._subscription = subscription
        if isinstance(subscription, LagSource):  # read at collections only: no cost here
            self._unwatch = subscription._watch_waiting(self._queue.__len__)
        self._watcher = asyncio.get_running_loop().create_task(
            self._watch(subscription), name=f"goflux-stream-{self._subject}-watch"
        )
        return subscription

    async def _watch(self, subscription: Subscription) -> None:
        try:
            await subscription.wait()
        except Exception as exc:  # noqa: BLE001 - raised to the consumer instead
            self._failure = exc
        finally:
            self._ended = True
            self._stop_watching()
            _wake_all(self._items)

    def _stop_watching(self) -> None:
        """Take the buffer out of the subscription's lag (its subscription ended)."""
        unwatch, self._unwatch = self._unwatch, None
        if unwatch is not None:
            unwatch()

    async def stop(self, timeout: float | None = None) -> None:
        """Stop taking messages and drain (see :meth:`goflux.MessageStream.stop`)."""
        if self._opening is not None and self._subscription is None:
            with contextlib.suppress(Exception):  # the caller of start() saw the error
                await asyncio.shield(self._opening)  # let a start in progress finish first
        self._stop_requested = True
        subscription = self._subscription
        if subscription is None:
            self._ended = True
            _wake_all(self._items)
            return
        if self._stopper is None:
            self._stopper = asyncio.get_running_loop().create_task(
                subscription.stop(timeout), name=f"goflux-stream-{self._subject}-stop"
            )
        if asyncio.current_task() in self._consumers:
            return
        await asyncio.shield(self._stopper)

    async def close(self) -> None:
        """End the stream now: hand back every unsettled message, stop the subscription.

        Buffered messages and messages handed out but not settled are nak'd (redelivered
        at once); on transports without acknowledgement the buffered ones are dropped
        and counted in :attr:`dropped`. A later settlement of a handed-back message
        raises :class:`~goflux.AlreadySettled`.
        """
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(
                self._close(), name=f"goflux-stream-{self._subject}-close"
            )
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        self._closed = True
        if self._opening is not None and not self._opening.done():
            with contextlib.suppress(Exception):  # the caller of start() saw the error
                await self._opening
        self.dropped += sum(1 for entry in self._queue if not entry.message.acknowledgeable)
        self._queue.clear()
        self._stop_watching()
        _wake_all(self._space)
        _wake_all(self._items)
        if self._stopper is not None:
            # A drain is under way (intake has stopped) with its own deadline: hand
            # back what is held now rather than wait for it.
            held = list(self._waiting)
            await asyncio.gather(*(self._hand_back(message) for message in held))
            if self._holding is not None:
                await self._holding.hand_back()
        if self._subscription is not None:
            # A zero deadline cancels the handlers still holding messages, and the
            # transport hands those back (and what it holds for the stream), after it
            # stopped receiving (a nak before that could be redelivered to this very
            # subscription).
            await self._subscription.stop(0)
        leftovers = [message for message in self._taken if message.settled is None]
        await asyncio.gather(*(self._hand_back(message) for message in leftovers))
        if self._watcher is not None:
            await self._watcher
        if self.dropped:
            logger.warning(
                "stream of %r closed with %d received messages not consumed (dropped: the "
                "transport cannot redeliver them)",
                self._subject,
                self.dropped,
            )

    async def _hand_back(self, message: Message[T]) -> None:
        if message.settled is not None:
            return
        try:
            await message.nak()
        except SettlementError as exc:  # the transport settles it as failed instead
            logger.warning("could not hand back message on %r: %s", message.subject, exc)

    # --------------------------------------------------------- handler side

    async def _room(self) -> None:
        """Wait until the buffer has room or the feed is closed."""
        while len(self._queue) >= self._size and not self._closed:
            room = asyncio.get_running_loop().create_future()
            self._space.append(room)
            try:
                await room
            except asyncio.CancelledError:
                if len(self._queue) < self._size:
                    _wake_one(self._space)  # pass on a wake-up this handler got
                raise

    async def _hand_off(self, message: Message[T]) -> bool:
        """Buffer a message a holding subscription keeps (see :meth:`StreamHandler.hand_off`).

        It returns without suspending once it buffered the message, so the caller
        registers the message as held before the consumer can take it.
        """
        if len(self._queue) >= self._size:
            await self._room()
        if self._closed:
            return False  # the closing subscription hands it back
        self._queue.append(StreamEntry(message, contextvars.copy_context()))
        _wake_one(self._items)
        return True

    async def _receive(self, message: Message[T]) -> None:
        """The handler: buffer ``message``; if it can be acknowledged, wait until settled."""
        await self._room()
        if self._closed:
            if message.acknowledgeable:
                # The closing subscription cancels this at once and hands it back.
                await asyncio.get_running_loop().create_future()
            self.dropped += 1
            return
        entry = StreamEntry(message, contextvars.copy_context())
        if not message.acknowledgeable:
            self._queue.append(entry)
            _wake_one(self._items)
            return
        done: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()

        def settled(_: Message[object], outcome: Outcome | None) -> None:
            self._taken.pop(message, None)
            if done.done():
                return
            if outcome is None:
                done.set_exception(
                    SettlementError(f"settling message on {message.subject!r} failed")
                )
            else:
                done.set_result(outcome)

        observe_settlement(message, settled)
        self._queue.append(entry)
        self._waiting[message] = None
        _wake_one(self._items)
        try:
            await done
        except asyncio.CancelledError:
            # The transport gives up on it (drain deadline): it settles the message.
            observe_settlement(message, None)
            self._taken.pop(message, None)
            try:
                self._queue.remove(entry)
            except ValueError:
                pass
            else:
                _wake_one(self._space)
            raise
        finally:
            observe_settlement(message, None)
            self._waiting.pop(message, None)

    # -------------------------------------------------------- consumer side

    def _take(self) -> StreamEntry[T] | None:
        """The next buffered message to hand out, if any (it counts as taken from now)."""
        queue = self._queue
        while queue:
            entry = queue.popleft()
            _wake_one(self._space)
            message = entry.message
            if message.settled is not None:
                continue  # handed back while buffered (a drain deadline, a failure)
            if message in self._waiting:
                self._taken[message] = None
            return entry
        return None

    async def next_entry(self, deadline: float | None = None) -> StreamEntry[T] | None:
        """Take the next message with the context it arrived in (for :func:`process`).

        Returns None if ``deadline`` (event loop time) passes first.

        Raises:
            StopAsyncIteration: The stream has ended and its buffer is empty.
            SubscribeError: The subscription failed (once the buffer is empty).
        """
        if self._subscription is None and not self._closed:
            await self.start()
        consumer = asyncio.current_task()
        last = self._last_consumer
        if consumer is not None and (last is None or last() is not consumer):
            self._consumers.add(consumer)
            self._last_consumer = weakref.ref(consumer)
        queue = self._queue
        while True:
            if queue and (entry := self._take()) is not None:
                return entry
            if self._closed or self._ended:
                failure = self._failure
                if failure is not None and not self._closed:
                    raise SubscribeError(f"stream of {self._subject!r} failed: {failure}") from (
                        failure
                    )
                raise StopAsyncIteration
            waiter = asyncio.get_running_loop().create_future()
            self._items.append(waiter)
            try:
                if deadline is None:
                    await waiter
                else:
                    async with asyncio.timeout_at(deadline):
                        await waiter
            except (TimeoutError, asyncio.CancelledError) as exc:
                if waiter.done() and not waiter.cancelled() and queue:
                    _wake_one(self._items)  # woken, but leaving: let another take it
                waiter.cancel()
                if isinstance(exc, TimeoutError):
                    return None
                raise
