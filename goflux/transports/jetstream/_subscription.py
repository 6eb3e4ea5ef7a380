"""A running JetStream subscription: workers, processing, settlement and drain.

The pull engine (:mod:`._pull`) delivers each taken message here with a
:class:`~._acker.JetStreamAcker`. Workers (started on demand, up to ``concurrency``)
decode it, run the handler inside a CONSUMER span, and settle what the handler left
unsettled: auto-ack on return, nak on failure, or nothing in manual mode. Every
settlement goes through the message and its acker, which gives the in-flight room
back to the engine. A keep-alive task sends in-progress signals for messages held
longer than half the consumer's ``ack_wait``. Confirmed acks (``confirm_acks``, or
``ack(confirm=True)``) are kept in flight together by the subscription's
:class:`~._confirm.Confirmations`; a drain waits for them.

A message stream's subscription runs no handler: a worker hands each message to the
stream's buffer and keeps it in :class:`~._held.HeldMessages` until the stream's
consumer settles it (see :class:`JetStreamSubscription`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Generic, Protocol, TypeVar

import nats.errors
from nats.js import JetStreamContext
from opentelemetry.util.types import AttributeValue

from goflux._backoff import failure_logged, redelivery_delay
from goflux._codecs import Codec, as_decode_error
from goflux._compose.feed import StreamHandler
from goflux._compose.inflight import TEXT_LIMIT, Slot
from goflux._compose.poison import PoisonGuard, current_guard
from goflux._errors import (
    DecodeError,
    PermissionDenied,
    SettlementError,
    SubscribeError,
    is_non_retryable,
)
from goflux._headers import Headers
from goflux._interfaces import Handler
from goflux._lifecycle import StopOnExit, enter_handler_context, in_handler_context
from goflux._message import Message, received
from goflux._otel.scopes import NULL_SCOPE, NullScope, ProcessScope, ProcessScopes
from goflux._otel.semconv import (
    MESSAGING_CONSUMER_GROUP_NAME,
    MESSAGING_DESTINATION_NAME,
    MESSAGING_DESTINATION_TEMPLATE,
    MESSAGING_NATS_DELIVERY_COUNT,
    MESSAGING_NATS_STREAM,
    MESSAGING_NATS_STREAM_SEQUENCE,
    MESSAGING_SYSTEM,
)
from goflux._otel.telemetry import Telemetry
from goflux._subject_template import destination_template
from goflux._subjects import is_wildcard
from goflux._wire import read_headers
from goflux.transports._natspy import connection, received_headers
from goflux.transports._refusals import closed_reason
from goflux.transports.jetstream._ack_batch import AckBatch
from goflux.transports.jetstream._acker import (
    JetStreamAcker,
    Ledger,
    ack_tokens,
    delivery_count,
    first_delivery_prefix,
)
from goflux.transports.jetstream._backlog import Backlog
from goflux.transports.jetstream._confirm import Confirmations
from goflux.transports.jetstream._consumers import Binding
from goflux.transports.jetstream._held import HeldMessages
from goflux.transports.jetstream._options import SubscriberOptions
from goflux.transports.jetstream._poison import crash_key, quarantine
from goflux.transports.jetstream._pull import PullEngine
from goflux.transports.jetstream._system import SYSTEM
from goflux.transports.jetstream._undecodable import reject

__all__ = ("JetStreamSubscription", "started")

T = TypeVar("T")
P = TypeVar("P")

_new_acker = JetStreamAcker.__new__
logger = logging.getLogger("goflux.transports.jetstream")

# Messages a worker handles inline between two looks at whether telemetry records.
_RECHECK = 64
# Seconds of one event-loop step after which a worker lets the loop run once it has
# handled a pull's worth of messages (see _let_the_loop_run): longer than a round trip
# to the server. A shorter step (a small window of quick handlers) is not worth it.
_LONG_STEP = 0.0002


class _MessageFactory(Protocol):
    """Builds a received message (with its acker, or without for ordered mode)."""

    def __call__(
        self,
        subject: str,
        payload: P,
        headers: Headers | None,
        message_id: str | None,
        data: bytes,
        acker: JetStreamAcker,
        wire: Mapping[str, str] | bytes | None,
        /,
    ) -> Message[P]: ...


def _unacknowledged(
    subject: str,
    payload: P,
    headers: Headers | None,
    message_id: str | None,
    data: bytes,
    acker: JetStreamAcker,
    wire: Mapping[str, str] | bytes | None,
) -> Message[P]:
    """A message of a consumer without acknowledgement (ordered mode): settling is a no-op.

    Its delivery facts are read from the reply subject when first asked for.
    """
    return received(subject, payload, headers, message_id, data, None, wire, acker)


class JetStreamSubscription(StopOnExit, Generic[T]):
    """A running pull subscription on a JetStream consumer.

    The subscription of a message stream (``Subscriber.stream``) hands each message to
    the stream's buffer instead of running a handler, and holds it until the stream's
    consumer settles it: it keeps its in-flight room, gets in-progress signals like a
    running handler's message, and is handed back (nak'd) if still unsettled at the
    drain deadline or when the subscription stops or fails. Its CONSUMER span ends once
    the message is buffered; it stays current in the context the stream hands out with
    the message (:func:`goflux.process` runs the handler in it). ``handled`` counts the
    messages the stream buffered (not those arriving once it closed, which are handed
    back), ``failed`` those whose hand-off was cancelled.

    Attributes:
        handled: Messages whose handler returned (or that were handed to a stream).
        failed: Messages whose handler raised (or was cancelled by a drain deadline).
        undecodable: Messages that could not be decoded (terminated, never redelivered).
        redelivered: Deliveries of messages that had been delivered before.
    """

    # (Slots: its attributes are read per message, and cheaper so than from a dict.)
    __slots__ = (
        "__weakref__",
        "_ack_wait",
        "_acknowledged",
        "_acks",
        "_auto_ack",
        "_backlog",
        "_codec",
        "_confirm_all",
        "_confirmations",
        "_done",
        "_drainer",
        "_draining",
        "_engine",
        "_failure",
        "_finishing",
        "_first_delivery",
        "_guard",
        "_handler",
        "_held",
        "_holder",
        "_idle",
        "_keeper",
        "_ledger",
        "_loop",
        "_make",
        "_nc",
        "_options",
        "_pattern",
        "_ready",
        "_redeliveries",
        "_running",
        "_scopes",
        "_tel",
        "_unwatch",
        "_worker_limit",
        "_workers",
        "failed",
        "handled",
        "redelivered",
        "undecodable",
    )

    def __init__(
        self,
        js: JetStreamContext,
        codec: Codec[T],
        handler: Handler[T],
        *,
        pattern: str,
        binding: Binding,
        options: SubscriberOptions,
        telemetry: Telemetry,
    ) -> None:
        consumer = binding.consumer
        self._loop = asyncio.get_running_loop()
        self._nc = connection(js)
        self._codec = codec
        self._handler = handler
        self._pattern = pattern
        self._ack_wait = binding.ack_wait
        self._options = options
        self._tel = telemetry
        self._acknowledged = consumer.acknowledges
        # A message stream's handler: messages are handed to it and held here until the
        # stream's consumer settles them (messages without acks need no holding).
        self._holder: StreamHandler[T] | None = None
        self._held = HeldMessages()
        if isinstance(handler, StreamHandler) and consumer.acknowledges:
            self._holder = handler
            handler.held_by(self._held)
        # A stream's consumer settles its messages, as a handler does in manual mode.
        self._auto_ack = self._holder is None and consumer.acknowledges and not options.manual_ack
        self._make: _MessageFactory = received if consumer.acknowledges else _unacknowledged
        # In a `goflux run` worker: in-flight slots and the crash record (_work_guarded).
        self._guard = current_guard() if consumer.acknowledges and self._holder is None else None
        self._engine = PullEngine(
            js,
            consumer,
            binding.limits,
            max_in_flight=options.max_in_flight,
            workers=1 if self._holder is not None else options.concurrency,
            paced=self._holder is None,
            deliver=self._enqueue,
            fail=self._finish,
            priority=binding.priority,
            handed_back=self._handed_back,
        )
        self._scopes = self._process_scopes(consumer.name)
        base: dict[str, AttributeValue] = {
            MESSAGING_SYSTEM: SYSTEM,
            MESSAGING_CONSUMER_GROUP_NAME: consumer.name,
            MESSAGING_DESTINATION_TEMPLATE: destination_template(pattern),
        }
        self._confirmations = (
            Confirmations(self._nc, timeout=options.confirm_timeout, where=consumer.name)
            if consumer.acknowledges
            else None
        )
        self._confirm_all = options.confirm_acks and self._confirmations is not None
        self._ledger = Ledger(
            telemetry,
            base,
            self._engine.release,
            self._confirmations,
            confirm_all=self._confirm_all,
            destination=pattern,
        )
        # Auto-acks (and an ordered consumer's freed room) of one loop step go out together.
        self._acks = AckBatch(self._nc, self._ledger)
        self._redeliveries = telemetry.redelivery_count(base)
        # The gauges' sources, watched from the start until the subscription finishes:
        # goflux.consumer.lag reads len(_ready), goflux.consumer.pending the pending
        # count in the ack subject of the last message delivered (or the server's).
        self._backlog = Backlog(
            js, stream=consumer.stream, consumer=lambda: self._engine.consumer.name
        )
        self._unwatch: list[Callable[[], None]] = []
        self._ready: deque[JetStreamAcker] = deque()  # taken, not started
        # How the reply subject of a first delivery starts (learnt from the last one).
        self._first_delivery = "\0"
        self._idle: list[asyncio.Future[None]] = []  # workers waiting for a message
        # Messages whose handler runs (a dict as an ordered set: item assignment and
        # deletion are cheaper than set methods on the hot path).
        self._running: dict[JetStreamAcker, None] = {}
        self._workers: list[asyncio.Task[None]] = []
        # A message stream's subscription has one worker: it hands messages to the
        # stream's buffer in the order received (see _wake).
        self._worker_limit = 1 if self._holder is not None else options.concurrency
        self._keeper: asyncio.Task[None] | None = None
        self._drainer: asyncio.Task[None] | None = None
        self._draining = False
        self._finishing = False
        self._failure: BaseException | None = None
        self._done = self._loop.create_future()
        self.handled = 0
        self.failed = 0
        self.undecodable = 0
        self.redelivered = 0

    # ------------------------------------------------------------------ facts

    @property
    def subject(self) -> str:
        """The subject pattern subscribed to."""
        return self._pattern

    @property
    def consumer(self) -> str:
        """The consumer's name (generated for an ephemeral consumer)."""
        return self._engine.consumer.name

    @property
    def pending_at_start(self) -> int | None:
        """Messages the consumer had to deliver when ordered mode created it, else None."""
        pending = getattr(self._engine.consumer, "pending_at_start", None)
        return pending if isinstance(pending, int) else None

    @property
    def stream(self) -> str:
        """The stream consumed."""
        return self._engine.consumer.stream

    @property
    def running(self) -> bool:
        """True until the subscription has stopped."""
        return not self._done.done()

    @property
    def outstanding(self) -> int:
        """Messages received and not yet settled (never more than ``max_in_flight``)."""
        return self._engine.outstanding

    @property
    def unconfirmed(self) -> int:
        """Acks sent for confirmation that the server never confirmed (given up)."""
        return self._ledger.unconfirmed

    # -------------------------------------------------------------- lifecycle

    def _watch(self) -> None:
        """Report the waiting messages and the consumer's backlog to the gauges."""
        tel = self._tel
        ready = self._ready
        lag = self._lag_attributes()
        pending = dict(lag)
        if self._acknowledged:  # an ordered consumer's name changes as it is recreated
            pending[MESSAGING_CONSUMER_GROUP_NAME] = self._engine.consumer.name
        self._unwatch += [
            tel.watch_lag(lag, ready.__len__),
            tel.watch_pending(pending, self._backlog.read),
        ]

    def _lag_attributes(self) -> dict[str, AttributeValue]:
        """The attributes of this subscription's ``goflux.consumer.lag``."""
        return {MESSAGING_SYSTEM: SYSTEM, MESSAGING_DESTINATION_NAME: self._pattern}

    def _watch_waiting(self, read: Callable[[], int]) -> Callable[[], None]:
        """Add ``read()`` (a message stream's buffer) to this subscription's lag."""
        unwatch = self._tel.watch_lag(self._lag_attributes(), read)
        self._unwatch.append(unwatch)
        return unwatch

    async def _begin(self) -> None:
        self._watch()
        if self._confirm_all and self._confirmations is not None:
            await self._confirmations.open()  # its inbox is ready before the first ack
        await self._engine.start()
        if self._acknowledged and self._options.keep_alive and self._ack_wait > 0:
            self._keeper = self._loop.create_task(
                self._keep_alive(), name=f"goflux-jetstream-{self.consumer}-keep-alive"
            )

    async def stop(self, timeout: float | None = None) -> None:
        """Drain: stop pulling, then finish what was received, within a deadline.

        No message is asked for any more; the handlers go on through the messages
        received (at most ``max_in_flight``, what the open pull requests still bring
        included), in order, so a drain that meets its deadline leaves nothing
        unacknowledged at the server and nothing to redeliver. After ``timeout``
        seconds (default: the subscriber's drain timeout) handlers still running are
        cancelled, and their messages and those not started are nak'd (redelivered
        at once to another subscriber; the server counts them as pending
        acknowledgement until then). A message stream's subscription likewise goes on
        handing what it received to the stream, and waits for the stream's consumer
        to settle it; what is unsettled at the deadline is nak'd. An ephemeral
        consumer created for the subscription is deleted. The deadline holds even if
        the caller is cancelled.
        """
        if self._drainer is None and self._done.done():
            return  # it has ended already (failed): nothing left to drain
        if self._drainer is None:
            self._draining = True  # from now on no new message starts
            deadline = self._options.drain_timeout if timeout is None else timeout
            self._drainer = self._loop.create_task(
                self._drain(deadline), name=f"goflux-jetstream-{self.consumer}-drain"
            )
        if in_handler_context(self):
            return  # called from a handler (or a task it spawned): the drain waits for it
        await asyncio.shield(self._drainer)

    async def _drain(self, deadline: float) -> None:
        self._draining = True
        self._backlog.close()  # no request once stopping began (the consumer may go)
        until = self._loop.time() + deadline
        try:
            await self._engine.stop_pulling(deadline)
            self._wake(everyone=True)
            self._work_off_arrivals()
            if self._workers:
                _, pending = await asyncio.wait(
                    self._workers, timeout=max(until - self._loop.time(), 0.0)
                )
                if pending:
                    # A zero deadline (a closing message stream) cancels on purpose.
                    logger.log(
                        logging.WARNING if deadline > 0 else logging.DEBUG,
                        "drain of %r timed out after %.3gs; cancelling %d handlers",
                        self.consumer,
                        deadline,
                        len(pending),
                    )
                    for task in pending:
                        task.cancel()
                    await asyncio.wait(pending)
            # From here on what still arrives (an inbox whose drain timed out) is nak'd
            # on arrival: no worker would take it any more.
            self._engine.stop_taking()
            await self._hand_back_ready()  # what the workers left at the deadline
            await self._drain_held(deadline, until)
            await self._engine.give_up_pin()
            if self._confirmations is not None:
                await self._confirmations.settled()  # each is bounded by its attempts
        finally:
            await self._finish(None)

    def _work_off_arrivals(self) -> None:
        """Start workers for what arrived while pulling stopped, where too few still run.

        A worker that found nothing ready once the drain began has ended; what the open
        pull requests brought after that is worked off like what came before, up to
        ``concurrency`` at a time (a message stream's one worker hands it on in order).
        """
        if self._finishing:
            return  # failed meanwhile: no handler runs after the end
        ready, workers = self._ready, self._workers
        running = sum(1 for worker in workers if not worker.done())
        for _ in range(min(len(ready), self._worker_limit) - running):
            self._start_worker()

    async def _hand_back_ready(self) -> None:
        """Nak what was received and not started, for redelivery at once."""
        while self._ready:
            await self._hand_back(self._ready.popleft())

    async def _drain_held(self, deadline: float, until: float) -> None:
        """Wait until a stream's consumer settled what it holds; then hand the rest back."""
        held = self._held
        if not held:
            return
        await held.wait(until - self._loop.time())
        if held:
            logger.log(
                logging.WARNING if deadline > 0 else logging.DEBUG,
                "drain of %r timed out after %.3gs; handing back %d unsettled messages "
                "of its stream",
                self.consumer,
                deadline,
                len(held),
            )
            await held.hand_back()

    async def _finish(self, failure: BaseException | None) -> None:
        if self._finishing:
            return
        self._finishing = True
        self._draining = True
        self._backlog.close()  # before the engine deletes an ephemeral consumer
        current = asyncio.current_task()
        for task in (self._keeper, *self._workers):
            if task is not None and task is not current and not task.done():
                task.cancel()
        try:
            await self._held.hand_back()  # nothing held after a drain; a failure hands back
            self._acks.flush()  # the last step's acks counted, their room given back
            if self._confirmations is not None:
                await self._confirmations.close()
            await self._engine.close(failed=failure is not None)
        finally:  # also when closing cancelled the task it ran in (the inbox's callbacks)
            for unwatch in self._unwatch:
                unwatch()
            self._failure = failure
            self._done.set_result(None)

    async def wait(self) -> None:
        """Wait until the subscription stops.

        Raises:
            PermissionDenied: The server refused the subscription's pull requests,
                acknowledgements, inbox or credentials (at start or after a config
                reload).
            SubscribeError: The subscription failed (for example, its consumer was
                deleted or the connection closed).
        """
        await asyncio.shield(self._done)
        if isinstance(self._failure, PermissionDenied):
            raise self._failure
        if self._failure is not None:
            raise SubscribeError(
                f"subscription to {self.consumer!r} on {self.stream!r} failed: {self._failure}"
            ) from self._failure

    # -------------------------------------------------------------- keep-alive

    async def _keep_alive(self) -> None:
        """Reset ``ack_wait`` of messages held longer than half of it.

        That is messages queued, running, or handed to a stream and not settled yet.

        It runs until the subscription has finished (which cancels it), through a
        drain too: a handler the drain waits for must not be redelivered meanwhile.
        """
        half = self._ack_wait / 2
        while not self._finishing:
            await asyncio.sleep(self._ack_wait / 4)
            now = self._loop.time()
            stale = [
                acker
                for acker in self._running
                if not acker.released and now - acker.last_progress > half
            ]
            for acker in self._ready:  # oldest first: stop at the first fresh one
                if now - acker.last_progress <= half:
                    break
                stale.append(acker)
            if self._held:
                stale.extend(self._held.stale(now, half))
            for acker in stale:
                with contextlib.suppress(SettlementError):
                    await acker.in_progress()

    # ------------------------------------------------------------- processing

    def _enqueue(
        self,
        subject: str,
        reply: str,
        data: bytes,
        headers: bytes | dict[str, str] | None,
        arrival: float,
    ) -> None:
        """Take a message from the engine: queue it (its acker holds it) and wake a worker.

        Its ``headers`` may be a header block, read when the message is handled: what
        the handler gets (:func:`read_headers`) and, while telemetry records, the trace
        context.
        """
        # A consumer without acks (ordered) never redelivers, and a first delivery's reply
        # starts with what the last one's did: no need to split the reply to count it.
        first = not self._acknowledged or reply.startswith(self._first_delivery)
        # JetStreamAcker(...) as its __init__ would build it, its fields stored here:
        # the class call costs about 1,000 CPU instructions a message more.
        acker = _new_acker(JetStreamAcker)
        acker._nc = self._nc
        acker.reply = reply
        acker._ledger = self._ledger
        acker.last_progress = arrival
        acker.released = False
        acker.deferred = False
        acker.message_subject = subject
        acker.data = data
        acker.headers = headers
        if first:
            acker.num_delivered = 1
        else:
            acker.num_delivered = delivered = delivery_count(reply)
            if delivered > 1:
                self._count_redelivery()
            else:
                self._first_delivery = first_delivery_prefix(reply)
        backlog = self._backlog  # the pending count in its reply: goflux.consumer.pending
        backlog.reply = reply
        backlog.delivered_at = arrival
        self._ready.append(acker)
        if self._idle or len(self._workers) < self._worker_limit:
            self._wake()  # (else every worker is busy, and each takes from _ready next)

    def _handed_back(self, reply: str, sent: bool) -> None:
        """The engine naked the message of ``reply`` on arrival (closed, a retired inbox).

        Counted here: a nak that could not be sent counts with ``goflux.ack.error`` true;
        the arrival counts as a redelivery either way.
        """
        if sent:
            self._ledger.record("nak")
        else:
            self._ledger.record_failed("nak")
        with contextlib.suppress(ValueError):  # (the engine admits ack subjects only)
            tokens, offset = ack_tokens(reply)
            if int(tokens[offset + 2]) > 1:
                self._count_redelivery()

    def _wake(self, *, everyone: bool = False) -> None:
        """Wake an idle worker (or all); start another if none is idle and room is left.

        Workers start on demand, up to ``concurrency``: a subscription may allow
        thousands, and an idle worker still costs memory. A message stream's has one:
        its worker only hands messages to the stream's buffer, in the order received
        (several would overtake each other while one waits for room).
        """
        idle = self._idle
        while idle:
            waiter = idle.pop()
            if not waiter.done():
                waiter.set_result(None)
                if not everyone:
                    return
        if not everyone and not self._draining and len(self._workers) < self._worker_limit:
            self._start_worker()

    def _start_worker(self) -> None:
        workers = self._workers
        name = f"goflux-jetstream-{self.consumer}-{len(workers)}"
        workers.append(self._loop.create_task(self._work(), name=name))

    async def _work(self) -> None:
        enter_handler_context(self)
        if self._guard is not None:
            await self._work_guarded(self._guard)
        elif self._holder is None and (self._auto_ack or not self._acknowledged):
            try:
                await self._work_inline()
            finally:  # (a worker that ends, draining, does not wait: see _idle_until_woken)
                if self._acks.deferred:
                    self._acks.flush()
        else:
            ready = self._ready
            countdown = 1  # (the first message is timed)
            # A stream's hand-off waits on the stream's consumer, not on a handler: its
            # time is back-pressure, not a pace to size the pulls by.
            paced = self._holder is None
            # Messages handled since the worker last waited or let the loop run, and
            # when that was (see _let_the_loop_run).
            window, clock, streak = self._engine.window, self._loop.time, 0
            resumed = clock()
            # Through a drain too, what was received is worked off (or handed to a stream).
            while not self._draining or ready:
                if not ready:
                    streak = 0
                    await self._idle_until_woken()
                    resumed = clock()
                    continue
                if streak >= window.threshold:
                    streak = 0
                    if clock() - resumed >= _LONG_STEP:
                        await self._let_the_loop_run()
                        resumed = clock()
                        continue
                streak += 1
                countdown -= 1
                if countdown or not paced:
                    await self._process(ready.popleft())
                else:
                    countdown = _RECHECK
                    await self._process_timed(ready.popleft())

    async def _process_timed(self, acker: JetStreamAcker) -> None:
        """:meth:`_process`, timed: the pull window follows the handlers' pace."""
        loop = self._loop
        started = loop.time()
        await self._process(acker)
        self._engine.window.paced(loop.time() - started)

    async def _let_the_loop_run(self) -> None:
        """Send the acks and the pull request the messages handled so far allow; let the loop run.

        Handlers that return without waiting on anything run back to back in one step
        of the event loop, and nothing reaches the socket before the step ends: a read
        of a few hundred small messages (a subscriber's connection reads up to 256 KiB
        at a time) was handled whole before its first ack, or the pull request its
        freed room allows, was sent. The server, its requests used up, sat idle while
        the client worked, then the client waited on the server. So a worker whose
        step has run longer than a round trip to the server (``_LONG_STEP``) and that
        has handled a pull's worth of messages (the window's threshold) since it last
        waited gives their room back, queues the pull request that room allows behind
        their acks, and lets the loop run once: nats-py's writer sends both in one
        write, and the server delivers the next messages while the rest are handled.
        Two subscribers of 100 B messages on one durable: 1.12-1.21 times the
        messages a second, and less spread between runs. A shorter step (a small
        window of quick handlers) is left whole: cut, it would send a pull request
        for every message or two.
        """
        self._acks.flush()  # (counts the acks, gives their room back)
        if self._nc.is_connected:  # (else the pull engine's own task handles what happened)
            await self._engine.pull()  # (queued behind the acks, if the room allows one)
        await asyncio.sleep(0)

    async def _idle_until_woken(self) -> None:
        """Wait as an idle worker until :meth:`_wake` wakes this one.

        Acks and freed room deferred to this moment (see :meth:`AckBatch.free`) are
        counted and given back first.
        """
        if self._acks.deferred:
            self._acks.flush()
        waiter = self._loop.create_future()
        self._idle.append(waiter)
        await waiter

    async def _work_inline(self) -> None:  # noqa: PLR0912, PLR0915 - inline on purpose (docstring)
        """``_work`` for a handler acked when it returns, or of a consumer without acks.

        While telemetry records nothing, each message runs inline here: what
        :meth:`_process` does, without a coroutine of its own per message. Whether
        telemetry records is looked at after each wake and every ``_RECHECK`` messages
        in between, so a provider configured meanwhile is soon in use; every
        ``_RECHECK``-th message (and the first, and while the handlers' pace holds the
        pull window small, the first after each wake) goes through
        :meth:`_process_timed`, so the pull window learns the handler's pace.
        """
        ready, tel, acknowledged = self._ready, self._tel, self._acknowledged
        decode, handler = self._codec.decode, self._handler
        running, acks, window = self._running, self._acks, self._engine.window
        # The first message is timed (the window starts from its pace), then every
        # _RECHECK-th, and the first after each wake while the pace holds the window
        # small; whether telemetry records is looked at then and after each wake.
        countdown, inline = 1, not tel.active
        # The last message handled, let go of before the worker waits (see below).
        acker: JetStreamAcker | None = None
        message: Message[T] | None = None
        payload: T | None = None
        data: bytes | None = None
        raw_headers: bytes | Mapping[str, str] | None = None
        headers: Headers | None = None
        message_id: str | None = None
        # Messages handled since the worker last waited or let the loop run, and when
        # that was (see _let_the_loop_run).
        clock, streak = self._loop.time, 0
        resumed = clock()
        while not self._draining or ready:
            if not ready:
                # Nothing of the last message (up to max_payload of bytes, its headers
                # and decoded value) is held while waiting, however long that takes.
                acker = message = payload = data = raw_headers = headers = message_id = None
                streak = 0
                await self._idle_until_woken()
                resumed = clock()
                inline, countdown = not tel.active, 1 if window.held_by_pace else countdown
                continue
            if streak >= window.threshold:
                streak = 0
                if clock() - resumed >= _LONG_STEP:
                    await self._let_the_loop_run()
                    resumed = clock()
                    continue
            streak += 1
            acker = ready.popleft()
            countdown -= 1
            if not countdown:
                inline, countdown = not tel.active, _RECHECK
                await self._process_timed(acker)
                continue
            if not inline:
                await self._process(acker)
                continue
            subject, data, raw_headers = acker.message_subject, acker.data, acker.headers
            headers, message_id = read_headers(raw_headers) if raw_headers else (None, None)
            try:
                payload = decode(data)
            except Exception as caught:  # noqa: BLE001 - any codec failure: undecodable
                await self._settle_undecodable(acker, caught, headers, message_id)
                continue
            if acknowledged:  # (held while it runs: the keep-alive looks here)
                message = received(subject, payload, headers, message_id, data, acker, raw_headers)
                running[acker] = None
            else:  # nothing to settle; the acker builds the delivery facts if asked for
                message = received(
                    subject, payload, headers, message_id, data, None, raw_headers, acker
                )
            try:
                await handler(message)
            except asyncio.CancelledError:
                running.pop(acker, None)
                if await self._after_cancellation(message, acker):
                    raise
                continue
            except Exception as exc:  # noqa: BLE001 - logged by _after_failure
                running.pop(acker, None)
                await self._after_failure(message, acker, exc)
                continue
            self.handled += 1
            # With nothing left ready this worker waits next, and gives the room back
            # itself before it does (not ready: deferred), without a callback per step.
            if not acknowledged:
                acks.free(acker, not ready)  # nothing to send: the room is free
                continue
            del running[acker]
            if message.settled is None and not acks.ack(acker, message, not ready):
                await self._auto_ack_slowly(message, acker)

    async def _work_guarded(self, guard: PoisonGuard) -> None:  # noqa: PLR0912, PLR0915 - one loop (docstring)
        """``_work`` in a ``goflux run`` worker: what runs is kept where the supervisor sees it.

        A message's reply subject stays in the loop's in-flight slot while its handler
        runs (written here as :meth:`Slot.hold` and :meth:`Slot.clear` would: about
        2,300 CPU instructions a message, against 3,200 with the calls); a redelivered
        one is looked up in the crash record, and handled alone or quarantined
        (:meth:`_suspected`). While a suspect runs alone, the loop starts nothing: its
        messages wait in ``_ready`` (kept alive).
        """
        slot = guard.in_flight.claim()
        text, size = slot.text, slot.size
        ready = self._ready
        countdown = 1  # every _RECHECK-th message is timed (the pull window's pace)
        acker: JetStreamAcker | None = None
        # Messages handled since the worker last waited or let the loop run, and when
        # that was (see _let_the_loop_run).
        window, clock, streak = self._engine.window, self._loop.time, 0
        resumed = clock()
        try:
            while not self._draining or ready:
                if not ready:
                    acker = None  # (its bytes are not held while waiting)
                    streak = 0
                    await self._idle_until_woken()
                    resumed = clock()
                    continue
                if guard.gate is not None:
                    await guard.passage()
                    continue
                if streak >= window.threshold:
                    streak = 0
                    if clock() - resumed >= _LONG_STEP:
                        await self._let_the_loop_run()
                        resumed = clock()
                        continue
                streak += 1
                acker = ready.popleft()
                if acker.num_delivered > 1 and await self._suspected(acker, guard, slot):
                    continue
                data = acker.reply.encode()
                length = len(data)
                if length <= TEXT_LIMIT:
                    text[:length] = data
                    size[0] = length
                exiting = False
                countdown = countdown - 1 or _RECHECK
                process = self._process_timed if countdown == _RECHECK else self._process
                try:
                    await process(acker)
                except (SystemExit, KeyboardInterrupt):
                    exiting = True  # the process ends with the message held: a crash
                    raise
                finally:
                    if not exiting:
                        size[0] = 0
                    if guard.waiting:
                        guard.left()
        except (SystemExit, KeyboardInterrupt):
            raise  # the slot keeps what it holds for the supervisor to read
        except BaseException:
            slot.free()
            raise
        slot.free()

    async def _suspected(self, acker: JetStreamAcker, guard: PoisonGuard, slot: Slot) -> bool:
        """Settle a redelivered message that was running when a worker died; False if not one.

        At the record's ``quarantine_after`` crashes it is quarantined (dead-lettered
        if configured, terminated) without reaching the handler; below, it is handled
        alone, so that another crash counts it and no bystander.
        """
        name = crash_key(acker.reply)
        entry = None if name is None else guard.record.lookup(name.key)
        if name is None or entry is None:
            return False
        limit = guard.record.quarantine_after
        if limit and entry.crashes >= limit:
            raw, data = acker.headers, acker.data
            headers, message_id = read_headers(raw) if raw else (None, None)
            letter = self._make(acker.message_subject, data, headers, message_id, data, acker, raw)
            await quarantine(
                letter,
                acker,
                name,
                entry,
                dead_letter=self._options.dead_letter,
                settle=self._send_or_release,
            )
            return True
        running = self._running
        running[acker] = None  # kept alive while it waits for its turn
        try:
            async with guard.alone():
                slot.hold(acker.reply)
                try:
                    await self._process(acker)
                except (SystemExit, KeyboardInterrupt):
                    raise  # the process ends with the message held: a crash
                except BaseException:
                    slot.clear()
                    raise
                slot.clear()
        finally:
            running.pop(acker, None)
        return True

    def _process_scopes(self, consumer: str) -> ProcessScopes:
        """The process scopes of messages ``consumer`` delivers."""
        pattern = self._pattern
        return ProcessScopes(
            self._tel,
            SYSTEM,
            template=pattern if is_wildcard(pattern) else None,
            consumer_group=consumer,
        )

    def _scope(self, acker: JetStreamAcker, message_id: str | None) -> ProcessScope | NullScope:
        """The processing scope while telemetry is active (the caller checks that)."""
        scopes = self._scopes
        consumer = self._engine.consumer.name
        if scopes.consumer_group != consumer:  # ordered mode replaced its consumer
            scopes = self._scopes = self._process_scopes(consumer)

        return scopes.open(
            acker.message_subject,
            received_headers(acker.headers),
            message_id=message_id,
            body_size=len(acker.data),
            attributes=partial(self._span_facts, acker) if self._tel.tracing else None,
        )

    def _span_facts(self, acker: JetStreamAcker) -> dict[str, AttributeValue]:
        """A message's JetStream span attributes (built only for a span that is recorded)."""
        return {
            MESSAGING_NATS_STREAM: self.stream,
            MESSAGING_NATS_STREAM_SEQUENCE: acker.stream_sequence,
            MESSAGING_NATS_DELIVERY_COUNT: acker.num_delivered,
        }

    def _count_redelivery(self) -> None:
        """One delivery of a message delivered before (counted on arrival)."""
        self.redelivered += 1
        if self._tel.metering:
            self._redeliveries.value += 1

    async def _process(self, acker: JetStreamAcker) -> None:
        raw_headers = acker.headers
        headers, message_id = read_headers(raw_headers) if raw_headers else (None, None)
        data = acker.data
        message: Message[T] | None = None
        try:
            with self._scope(acker, message_id) if self._tel.active else NULL_SCOPE:
                try:
                    payload = self._codec.decode(data)
                except Exception as caught:  # noqa: BLE001 - any codec failure: undecodable
                    error = await self._undecodable(acker, caught, headers, message_id)
                    raise error  # noqa: B904 - its cause is set
                message = self._make(
                    acker.message_subject, payload, headers, message_id, data, acker, raw_headers
                )
                running = self._running
                running[acker] = None
                try:
                    holder = self._holder
                    if holder is None:
                        await self._handler(message)
                    else:
                        # Buffered once this returns, and not taken by the stream's
                        # consumer before it is held (nothing suspends in between).
                        # Not buffered (the stream closed): held, to be handed back.
                        buffered = await holder.hand_off(message)
                        self._held.add(message, acker)
                        if not buffered:
                            return
                finally:
                    del running[acker]
        except asyncio.CancelledError:
            if await self._after_cancellation(message, acker):
                raise
            return
        except Exception as exc:  # noqa: BLE001 - logged by _after_failure
            await self._after_failure(message, acker, exc)
            return
        self.handled += 1
        if self._auto_ack and message.settled is None:  # the hot path
            if not self._acks.ack(acker, message):  # queued (not with confirm_acks)
                await self._auto_ack_slowly(message, acker)
        else:
            await self._settle_after(message, acker, failed=False)

    async def _auto_ack_slowly(self, message: Message[T], acker: JetStreamAcker) -> None:
        """Auto-ack where it cannot be sent at once: confirmed, or the connection is busy."""
        if self._confirm_all:
            acker.deferred = True  # the worker goes on; the room waits for the reply
        try:
            await message.ack()
        except SettlementError as exc:
            self._unsettled(acker, exc)

    async def _undecodable(
        self,
        acker: JetStreamAcker,
        caught: Exception,
        headers: Headers | None,
        message_id: str | None,
    ) -> DecodeError:
        """Count and reject a message ``caught`` says cannot be decoded; return the error."""
        data = acker.data
        exc = as_decode_error(caught, self._codec, data)
        self.undecodable += 1
        letter = self._make(
            acker.message_subject, data, headers, message_id, data, acker, acker.headers
        )
        await self._reject(letter, acker, exc)
        return exc

    async def _settle_undecodable(
        self,
        acker: JetStreamAcker,
        caught: Exception,
        headers: Headers | None,
        message_id: str | None,
    ) -> None:
        """:meth:`_undecodable`, with what _process does if rejecting fails or is cancelled.

        Raises:
            asyncio.CancelledError: The worker itself is cancelled (a drain deadline).
        """
        try:
            await self._undecodable(acker, caught, headers, message_id)
        except asyncio.CancelledError:
            if await self._after_cancellation(None, acker):
                raise
        except Exception as exc:  # noqa: BLE001 - logged by _after_failure
            await self._after_failure(None, acker, exc)

    async def _after_failure(
        self, message: Message[T] | None, acker: JetStreamAcker, exc: Exception
    ) -> None:
        """Count, log and settle a failure (called while ``exc`` is being handled)."""
        if message is None and isinstance(exc, DecodeError):
            return  # rejected (and logged) before any handler ran
        self.failed += 1
        naks = (  # this failure is settled here (not by the handler, nor by the user)
            message is not None
            and message.settled is None
            and self._acknowledged
            and not self._options.manual_ack
        )
        if naks and message is not None and is_non_retryable(exc):
            await reject(
                message,
                acker,
                exc,
                dead_letter=self._options.dead_letter,
                acknowledged=True,
                settle=self._send_or_release,
                reason="non_retryable",
            )
            return
        delivery = acker.num_delivered
        delay = redelivery_delay(self._options.redelivery_backoff, delivery) if naks else None
        if naks:
            logged = failure_logged(delivery, delay)
        else:  # a nak the handler sent may be immediate; else ack_wait bounds the pace
            logged = message is None or message.settled != "nak" or failure_logged(delivery, None)
        if logged:
            logger.error(
                "handler failed for message %s on %r (delivery %d%s): %s: %s",
                acker.stream_sequence,
                acker.message_subject,
                delivery,
                _redelivery(delay) if naks else "",
                type(exc).__name__,
                exc,
                exc_info=exc,
            )
        else:
            logger.debug(
                "handler failed for message %s on %r (delivery %d): %s: %s",
                acker.stream_sequence,
                acker.message_subject,
                delivery,
                type(exc).__name__,
                exc,
            )
        if message is not None:
            await self._settle_after(message, acker, failed=True, delay=delay)

    async def _after_cancellation(self, message: Message[T] | None, acker: JetStreamAcker) -> bool:
        """Settle after a cancellation; True if the worker itself is cancelled (re-raise)."""
        self.failed += 1
        worker = asyncio.current_task()
        drained = worker is not None and worker.cancelling() > 0
        delay = None
        if not drained:  # a cancellation of the handler's own escaped it: a failure
            delivery = acker.num_delivered
            if message is not None and message.settled is None and self._acknowledged:
                delay = redelivery_delay(self._options.redelivery_backoff, delivery)
            if failure_logged(delivery, delay):
                logger.error(
                    "handler for message %s on %r was cancelled (delivery %d%s)",
                    acker.stream_sequence,
                    acker.message_subject,
                    delivery,
                    _redelivery(delay) if delay is not None else "",
                )
        if message is not None:
            # A drain deadline hands the message back for redelivery at once; a
            # handler's own cancellation is a failure like any other (a delayed nak).
            await self._settle_after(message, acker, failed=True, force_nak=drained, delay=delay)
        elif not acker.released:  # cancelled while rejecting: hand it back at once
            await self._hand_back(acker)
        return drained

    async def _settle_after(
        self,
        message: Message[T],
        acker: JetStreamAcker,
        *,
        failed: bool,
        force_nak: bool = False,
        delay: float | None = None,
    ) -> None:
        """Settle what the handler left unsettled: auto-ack/nak, or free its room (manual).

        A failed message is naked with ``delay`` (None: redelivered at once). A message
        handed to a stream stays held (and keeps its room) until settled.
        """
        if not self._acknowledged:  # nothing to send: the room is free
            acker.release()
            return
        if message.settled is not None or (self._holder is not None and not failed):
            return
        if self._options.manual_ack and not force_nak:
            if not failed:
                logger.warning(
                    "handler returned without settling message on %r (manual_ack); "
                    "the server redelivers it after ack_wait unless it is settled later",
                    message.subject,
                )
            acker.release()  # a later settlement will not free the room again
            return
        await self._send_or_release(acker, message.nak(delay) if failed else message.ack())

    async def _hand_back(self, acker: JetStreamAcker) -> None:
        """Nak a message that will not be processed, so it is redelivered at once."""
        if self._acknowledged:
            await self._send_or_release(acker, acker.nak(None))
        else:
            acker.release()

    async def _send_or_release(self, acker: JetStreamAcker, sending: Awaitable[None]) -> None:
        """Send a settlement; if that fails, give its in-flight room back all the same.

        The server redelivers the message after ack_wait.
        """
        try:
            await sending
        except SettlementError as exc:
            self._unsettled(acker, exc)

    def _unsettled(self, acker: JetStreamAcker, exc: SettlementError) -> None:
        """A settlement could not be sent: log it and give its in-flight room back."""
        logger.warning(
            "could not settle message %s (%s); the server redelivers it after ack_wait",
            acker.stream_sequence,
            exc,
        )
        acker.release()

    async def _reject(
        self, letter: Message[bytes], acker: JetStreamAcker, exc: DecodeError
    ) -> None:
        """Give up an undecodable message (see :func:`._undecodable.reject`)."""
        await reject(
            letter,
            acker,
            exc,
            dead_letter=self._options.dead_letter,
            acknowledged=self._acknowledged,
            settle=self._send_or_release,
        )


def _redelivery(delay: float | None) -> str:
    """How a failed message was handed back, for a log line."""
    return "; nak'd for redelivery at once" if not delay else f"; nak'd with a {delay:.1f}s delay"


async def started(subscription: JetStreamSubscription[T]) -> JetStreamSubscription[T]:
    """Start ``subscription``; return it once its first pull request is at the server.

    If it fails, or the caller is cancelled, the consumer is removed if it was
    created for the subscription.

    Raises:
        PermissionDenied: The server refused the pull inbox or the pull requests.
        SubscribeError: The connection failed.
    """
    try:
        await subscription._begin()
    except PermissionDenied as exc:
        await subscription._finish(exc)
        raise
    except (nats.errors.Error, TimeoutError, SettlementError) as exc:
        await subscription._finish(exc)
        nc = subscription._nc
        reason = closed_reason(nc) if nc.is_closed else ""
        raise SubscribeError(
            f"cannot subscribe to {subscription.subject!r}: {exc}{reason}"
        ) from exc
    except asyncio.CancelledError as exc:  # the caller gave up: leave no inbox or consumer
        await asyncio.shield(subscription._finish(exc))
        raise
    return subscription
