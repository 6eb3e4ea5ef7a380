"""A running core NATS subscription: dispatch, slow-consumer accounting, drain."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription
from opentelemetry.util.types import AttributeValue

from goflux._errors import PermissionDenied, SubscribeError
from goflux._lifecycle import StopOnExit, enter_handler_context, in_handler_context
from goflux._otel.semconv import (
    MESSAGING_CONSUMER_GROUP_NAME,
    MESSAGING_DESTINATION_NAME,
    MESSAGING_DESTINATION_TEMPLATE,
    MESSAGING_SYSTEM,
)
from goflux._otel.telemetry import Telemetry
from goflux._subject_template import destination_template
from goflux.transports._natspy import (
    callback_task,
    drain,
    flush,
    forget,
    let_go,
    pending_queue,
    subscription_id,
)
from goflux.transports._refusals import Refusal, closed_reason, refusals
from goflux.transports.nats._system import SYSTEM

__all__ = (
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_PENDING_BYTES",
    "DEFAULT_PENDING_MESSAGES",
    "CoreSubscription",
    "DispatchOptions",
)

logger = logging.getLogger("goflux.transports.nats")

DEFAULT_PENDING_MESSAGES = 65_536
DEFAULT_PENDING_BYTES = 64 * 1024 * 1024
DEFAULT_DRAIN_TIMEOUT = 30.0
_SETTLE_TIMEOUT = 5.0  # seconds for nats-py's drain to finish once the queue is settled


class DispatchOptions:
    """Validated options shared by the subscriptions of a subscriber or responder.

    Raises:
        ValueError: An option is out of range, or the queue group name is invalid.
    """

    __slots__ = ("concurrency", "drain_timeout", "pending_bytes", "pending_messages", "queue")

    def __init__(
        self,
        *,
        queue: str | None,
        concurrency: int,
        pending_messages: int,
        pending_bytes: int,
        drain_timeout: float,
    ) -> None:
        if queue is not None and (not queue or any(c.isspace() or c in "*>" for c in queue)):
            raise ValueError(f"queue group must be a non-empty name without spaces: {queue!r}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if pending_messages < 1 or pending_bytes < 1:
            raise ValueError("pending limits must be >= 1 (messages and bytes)")
        if drain_timeout < 0:
            raise ValueError(f"drain_timeout must be >= 0, got {drain_timeout}")
        self.queue = queue
        self.concurrency = concurrency
        self.pending_messages = pending_messages
        self.pending_bytes = pending_bytes
        self.drain_timeout = drain_timeout


class CoreSubscription(StopOnExit):
    """A subscription on core NATS that passes each message to ``process``.

    Messages are processed one at a time in arrival order, or up to ``concurrency``
    at once. When more arrive than the pending limits hold (a slow consumer), NATS
    drops them; the drops are counted in :attr:`dropped`, logged and recorded.

    Attributes:
        received: Messages taken for processing.
        dropped: Messages lost to a slow consumer or left behind by a drain deadline.
    """

    def __init__(
        self,
        nc: Client,
        pattern: str,
        process: Callable[[Msg], Coroutine[Any, Any, object]],
        options: DispatchOptions,
        telemetry: Telemetry,
    ) -> None:
        self._nc = nc
        self._pattern = pattern
        self._process = process
        self._o = options
        self._tel = telemetry
        self._sub: NatsSubscription | None = None
        self._slots = asyncio.Semaphore(options.concurrency)
        self._tasks: set[asyncio.Task[object]] = set()
        self._loop = asyncio.get_running_loop()
        self._done = self._loop.create_future()
        self._drainer: asyncio.Task[None] | None = None
        self._draining = False
        self._expired = False
        self._failure: BaseException | None = None
        self._refusals = refusals(nc)
        self._refused: PermissionDenied | None = None
        self._confirmed = False  # the server has answered the flush after the SUB
        self._unlisten: list[Callable[[], None]] = []
        self._unwatch: Callable[[], None] | None = None
        self._attrs: dict[str, AttributeValue] = {
            MESSAGING_SYSTEM: SYSTEM,
            MESSAGING_DESTINATION_TEMPLATE: destination_template(pattern),
        }
        if options.queue is not None:
            self._attrs[MESSAGING_CONSUMER_GROUP_NAME] = options.queue
        self._lag: dict[str, AttributeValue] = {
            MESSAGING_SYSTEM: SYSTEM,
            MESSAGING_DESTINATION_NAME: pattern,
        }
        self._unwatch_buffers: list[Callable[[], None]] = []
        # Taken from nats-py's pending queue, waiting for a free slot (concurrency > 1).
        self._slot_waiting = 0
        self.received = 0
        self.dropped = 0

    @property
    def subject(self) -> str:
        """The subject or pattern subscribed to."""
        return self._pattern

    @property
    def running(self) -> bool:
        """True until the subscription has stopped."""
        return not self._done.done()

    async def _begin(self) -> None:
        """Subscribe and flush.

        Raises:
            SubscribeError: The connection refused or failed.
        """
        try:
            await self._start()
        except PermissionDenied as exc:
            await self._finish(exc)
            raise
        except (nats.errors.Error, TimeoutError) as exc:
            await self._finish(exc)
            reason = closed_reason(self._nc) if self._nc.is_closed else ""
            raise SubscribeError(f"cannot subscribe to {self._pattern!r}: {exc}{reason}") from exc
        except asyncio.CancelledError as exc:  # the caller gave up: leave no subscription
            await asyncio.shield(self._finish(exc))
            raise

    async def _start(self) -> None:
        self._unlisten = [
            self._refusals.listen("subscribe", self._pattern, self._on_refusal),
            self._refusals.listen("connect", "", self._on_refusal),
        ]
        sub = await self._nc.subscribe(
            self._pattern,
            queue=self._o.queue or "",
            cb=self._on_message,
            pending_msgs_limit=self._o.pending_messages,
            pending_bytes_limit=self._o.pending_bytes,
        )
        self._sub = sub
        self._unwatch = self._tel.watch_lag(  # goflux.consumer.lag, until it finishes
            self._lag, lambda: sub.pending_msgs + self._slot_waiting
        )
        await flush(self._nc)  # the server has the interest: nothing published now is missed
        if self._refused is not None:  # the server said so before answering the flush
            raise self._refused
        self._confirmed = True
        # nats-py ends its dispatch task when the connection closes for good.
        dispatch = callback_task(sub)
        if dispatch is not None:
            dispatch.add_done_callback(self._on_dispatch_end)

    def _watch_waiting(self, read: Callable[[], int]) -> Callable[[], None]:
        """Add ``read()`` (a message stream's buffer) to this subscription's lag."""
        unwatch = self._tel.watch_lag(self._lag, read)
        self._unwatch_buffers.append(unwatch)
        return unwatch

    def _on_refusal(self, refusal: Refusal) -> None:
        """The server refused this subscription (at start, or after a config reload)."""
        if refusal.operation == "subscribe" and not self._is_mine(refusal):
            return
        if self._refused is not None or self._done.done():
            return
        what = "credentials" if refusal.operation == "connect" else "subscription"
        self._refused = refusal.error(f"{what} for {self._pattern!r}")
        if self._confirmed and not self._draining:  # running: it ends now
            logger.error("subscription to %r ended: %s", self._pattern, self._refused)
            self._loop.create_task(self._finish(self._refused))

    def _is_mine(self, refusal: Refusal) -> bool:
        """Whether a subscription refusal is of this subscription, not another on the subject.

        A config reload names the subscription by its ``sid``. A refusal at subscribe
        time has none: it is this one's only while its start is unconfirmed and the
        queue group is the same.
        """
        sub = self._sub
        if refusal.sid is not None:
            return sub is not None and refusal.sid == subscription_id(sub)
        if self._confirmed:
            return False
        queue = self._o.queue
        if refusal.folded and queue is not None:
            queue = queue.lower()
        return refusal.queue == queue

    def _on_dispatch_end(self, _: asyncio.Task[None]) -> None:
        if not self._draining and not self._done.done():
            self._loop.create_task(self._finish(nats.errors.ConnectionClosedError()))

    def _count_drops(self, *, final: bool = False) -> None:
        sub = self._sub
        if sub is None:
            return
        # nats-py counts every message it received, dropped ones included; what was not
        # taken for processing (and, while running, is not waiting) was dropped.
        waiting = 0 if final else sub.pending_msgs
        dropped = sub.delivered - self.received - waiting
        if dropped > self.dropped:
            new = dropped - self.dropped
            self.dropped = dropped
            self._tel.record_dropped(self._attrs, new)
            logger.warning(
                "%s on %r: %d messages dropped (pending limits %d messages, %d bytes); "
                "%d dropped so far",
                "subscription ended" if final or self._expired else "slow consumer",
                self._pattern,
                new,
                self._o.pending_messages,
                self._o.pending_bytes,
                dropped,
            )

    async def _on_message(self, msg: Msg) -> None:
        enter_handler_context(self)
        if self._expired:
            await self._leftover(msg)
            return
        if self._o.concurrency == 1:
            self.received += 1
            self._count_drops()
            try:
                await self._process(msg)
            finally:
                let_go(msg)  # (nats-py's dispatch holds it until the next one)
            return
        slots = self._slots
        if slots.locked():  # every slot is busy: it waits (counted as lag meanwhile)
            self._slot_waiting += 1
            try:
                await slots.acquire()  # back-pressure: the pending queue holds the rest
            finally:
                self._slot_waiting -= 1
        else:
            await slots.acquire()
        self.received += 1
        self._count_drops()
        task = self._loop.create_task(self._process_and_let_go(msg))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    async def _process_and_let_go(self, msg: Msg) -> None:
        try:
            await self._process(msg)
        finally:
            let_go(msg)  # (nats-py's dispatch holds the last one until the next)

    async def _leftover(self, msg: Msg) -> None:
        """A message delivered but not processed before the drain deadline (counted later)."""

    def _task_done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        self._slots.release()

    async def stop(self, timeout: float | None = None) -> None:
        """Drain: take no new messages, process those already delivered, then stop.

        Handlers still running after ``timeout`` seconds (default: the drain timeout)
        are cancelled, and messages not processed by then are counted in
        :attr:`dropped`. The deadline holds even if the caller is cancelled.
        """
        if self._drainer is None:
            self._draining = True
            deadline = self._o.drain_timeout if timeout is None else timeout
            self._drainer = self._loop.create_task(self._drain(deadline))
        if in_handler_context(self):
            return  # called from a handler (or a task it spawned): the drain waits for it
        await asyncio.shield(self._drainer)

    async def _drain(self, deadline: float) -> None:
        until = self._loop.time() + deadline
        sub = self._sub
        try:
            if sub is not None:
                await self._drain_subscription(sub, deadline)
            if self._tasks:
                _, pending = await asyncio.wait(
                    self._tasks, timeout=max(until - self._loop.time(), 0.0)
                )
                for task in pending:
                    task.cancel()
                if pending:
                    await asyncio.wait(pending)
        finally:
            await self._finish(None)

    async def _drain_subscription(self, sub: NatsSubscription, deadline: float) -> None:
        # UNSUB, then every message already delivered goes through _on_message. The
        # drain runs as a task of its own so its UNSUB is sent even with no time left.
        draining = self._loop.create_task(drain(sub))
        dispatch = callback_task(sub)
        watched: set[asyncio.Task[None]] = {draining}
        if dispatch is not None:
            watched.add(dispatch)  # ends early if the connection closes
        await asyncio.sleep(0)  # let the drain send its UNSUB first
        done, _ = await asyncio.wait(watched, timeout=deadline, return_when=asyncio.FIRST_COMPLETED)
        if draining in done:
            if not draining.cancelled() and draining.exception() is not None:
                logger.warning("drain of %r failed: %s", self._pattern, draining.exception())
            return
        sweeping = await self._expire(sub, dispatch) if not done else None
        try:
            # With the queue settled, the drain finishes by itself. Cancelling it while it
            # awaits its PONG would break nats-py's read loop (it sets a result on the
            # cancelled future and loses the rest of that read), so only as a last resort.
            await asyncio.wait({draining}, timeout=_SETTLE_TIMEOUT)
            if not draining.done():
                draining.cancel()
            with contextlib.suppress(asyncio.CancelledError, nats.errors.Error):
                await draining
            await forget(self._nc, sub)
            queue = pending_queue(sub)
            if sweeping is not None and queue is not None:
                # Forgotten, nothing is queued any more: let the sweep finish what was.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_SETTLE_TIMEOUT):
                        await queue.join()
        finally:
            if sweeping is not None:
                sweeping.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeping

    async def _expire(
        self, sub: NatsSubscription, dispatch: asyncio.Task[None] | None
    ) -> asyncio.Task[None] | None:
        """The drain deadline passed: cancel the running handler, settle what is left.

        Returns the task settling the messages left in nats-py's queue, and those still
        put there until the drain ends (None where nats-py has no such queue).
        """
        self._expired = True
        logger.warning("drain of %r timed out; cancelling the running handler", self._pattern)
        if dispatch is not None:
            dispatch.cancel()  # the handler running inside it gets CancelledError
            with contextlib.suppress(asyncio.CancelledError):
                await dispatch
        queue = pending_queue(sub)
        if queue is None:
            return None
        return self._loop.create_task(self._sweep(queue))

    async def _sweep(self, queue: asyncio.Queue[Msg]) -> None:
        """Settle each message in ``queue`` as a leftover, as it comes, until cancelled.

        nats-py's task that took them is cancelled at the deadline, but messages the
        server sent before it read the UNSUB still arrive until the drain's round trip
        ends, and nats-py's drain waits until every queued message is taken (``join``):
        left in the queue, one would hold the drain (and the stop) for
        ``_SETTLE_TIMEOUT``, and a responder would leave its request unanswered.
        """
        while True:
            msg = await queue.get()
            try:
                await self._leftover(msg)
            except Exception:
                logger.exception("settling a message left on %r failed", self._pattern)
            finally:
                queue.task_done()  # lets nats-py's drain (join) complete

    async def _finish(self, failure: BaseException | None) -> None:
        if self._done.done():
            return
        for unlisten in self._unlisten:
            unlisten()
        if self._unwatch is not None:
            self._unwatch()
        for unwatch in self._unwatch_buffers:
            unwatch()
        self._draining = True
        if failure is not None:
            for task in self._tasks:
                task.cancel()
            if self._sub is not None:
                with contextlib.suppress(nats.errors.Error):
                    await self._sub.unsubscribe()
        self._count_drops(final=True)
        self._failure = failure
        self._done.set_result(None)

    async def wait(self) -> None:
        """Wait until the subscription stops.

        Raises:
            SubscribeError: The connection closed while the subscription was running.
        """
        await asyncio.shield(self._done)
        if isinstance(self._failure, PermissionDenied):
            raise self._failure
        if self._failure is not None:
            raise SubscribeError(
                f"subscription to {self._pattern!r} failed: {self._failure}"
            ) from self._failure
