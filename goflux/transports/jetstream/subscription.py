"""A running JetStream subscription: the pull loop, its bounds, recovery and drain."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections import deque
from collections.abc import Awaitable
from typing import Generic, TypeVar

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription
from nats.js import JetStreamContext
from nats.js.api import ConsumerInfo
from nats.js.errors import APIError, NotFoundError
from opentelemetry.util.types import AttributeValue

from goflux.codecs import Codec
from goflux.errors import DecodeError, SettlementError, SubscribeError
from goflux.headers import Headers
from goflux.interfaces import Handler
from goflux.lifecycle import StopOnExit, enter_handler_context, in_handler_context
from goflux.message import Message, Outcome, received
from goflux.middleware.deadletter import is_dead_letter, refused_for_good
from goflux.subjects import is_wildcard
from goflux.telemetry import (
    CONSUMER_GROUP,
    DESTINATION_TEMPLATE,
    NULL_SCOPE,
    SETTLEMENT_OUTCOME,
    NullScope,
    ProcessScope,
    Telemetry,
)
from goflux.telemetry import SYSTEM as SYSTEM_ATTR
from goflux.transports.jetstream.acker import JetStreamAcker, ack_tokens
from goflux.transports.jetstream.settings import Settings, ordered_consumer_config
from goflux.transports.jetstream.system import SYSTEM
from goflux.wire import read_headers

__all__ = ("JetStreamSubscription", "PullLimits")

T = TypeVar("T")
P = TypeVar("P")

logger = logging.getLogger("goflux.transports.jetstream")

_NS = 1_000_000_000
DEAD_LETTER_RETRY_DELAY = 5.0  # seconds before an undecodable message is dead-lettered again

STREAM_ATTR = "messaging.nats.stream"
SEQUENCE_ATTR = "messaging.nats.stream.sequence"
DELIVERY_COUNT_ATTR = "messaging.nats.delivery.count"


class PullLimits:
    """Pull request sizes for one subscription, within what its consumer accepts."""

    __slots__ = ("batch", "expires", "heartbeat")

    def __init__(
        self,
        settings: Settings,
        *,
        max_batch: int | None = None,
        max_expires: float | None = None,
    ) -> None:
        self.batch = min(settings.batch, max_batch) if max_batch else settings.batch
        self.expires = min(settings.expires, max_expires) if max_expires else settings.expires
        self.heartbeat = min(settings.heartbeat, self.expires / 2)


class JetStreamSubscription(StopOnExit, Generic[T]):
    """A running pull subscription on a JetStream consumer.

    Attributes:
        handled: Messages whose handler returned.
        failed: Messages whose handler raised (or was cancelled by a drain deadline).
        undecodable: Messages that could not be decoded (terminated, never redelivered).
        redelivered: Deliveries of messages that had been delivered before.
    """

    def __init__(
        self,
        js: JetStreamContext,
        codec: Codec[T],
        handler: Handler[T],
        *,
        stream: str,
        pattern: str,
        consumer: str,
        ephemeral: bool,
        ack_wait: float,
        limits: PullLimits,
        settings: Settings,
        telemetry: Telemetry,
        start_floor: int = 0,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._js = js
        self._nc = js._nc
        self._codec = codec
        self._handler = handler
        self._stream = stream
        self._pattern = pattern
        self._template = pattern if is_wildcard(pattern) else None
        self._consumer = consumer
        self._ephemeral = ephemeral
        self._ack_wait = ack_wait
        self._limits = limits
        self._s = settings
        # How a received message is made: with its acker, or without (ordered mode).
        self._make = self._unacknowledged if settings.ordered else received
        self._quick_ack = not settings.ordered and not settings.manual_ack
        self._tel = telemetry
        self._next_subject = f"{js._prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._threshold = max(1, limits.batch // 2)
        # Each inbox is a generation: resetting pulls moves to a new one, so requests
        # still open on the old inbox stop counting (the server drops them).
        self._generation = 0
        self._inbox = ""
        self._sub: NatsSubscription | None = None
        self._requested = 0  # messages asked for by pull requests still open
        self._outstanding = 0  # messages received and not yet settled
        self._ready: deque[tuple[Msg, float]] = deque()  # (message, arrival or last signal)
        self._idle: list[asyncio.Future[None]] = []  # workers waiting for a message
        self._running: dict[JetStreamAcker, float] = {}
        self._pull_scheduled = False
        self._workers: list[asyncio.Task[None]] = []
        self._watchdog: asyncio.Task[None] | None = None
        self._drainer: asyncio.Task[None] | None = None
        self._draining = False
        self._failure: BaseException | None = None
        self._done = self._loop.create_future()
        self._last_activity = 0.0
        self._reconnects = 0
        # Ordered mode: the last sequences seen, and where the first consumer began.
        self._consumer_sequence = 0
        self._stream_sequence = 0
        self._start_floor = start_floor
        self._recreating = False
        self._checking = False
        base: dict[str, AttributeValue] = {
            SYSTEM_ATTR: SYSTEM,
            CONSUMER_GROUP: consumer,
            DESTINATION_TEMPLATE: pattern,
        }
        self._outcome_attrs: dict[str, dict[str, AttributeValue]] = {
            outcome: {**base, SETTLEMENT_OUTCOME: outcome}
            for outcome in ("ack", "nak", "term", "in_progress")
        }
        self._redelivery_attrs = base
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
        return self._consumer

    @property
    def stream(self) -> str:
        """The stream consumed."""
        return self._stream

    @property
    def running(self) -> bool:
        """True until the subscription has stopped."""
        return not self._done.done()

    @property
    def outstanding(self) -> int:
        """Messages received and not yet settled (never more than ``max_in_flight``)."""
        return self._outstanding

    # -------------------------------------------------------------- lifecycle

    async def _start(self) -> None:
        await self._open_inbox()
        self._reconnects = self._nc.stats["reconnects"]
        self._last_activity = self._loop.time()
        await self._pull()
        await self._nc.flush()  # the first pull request has reached the server
        self._watchdog = self._loop.create_task(
            self._watch(), name=f"goflux-jetstream-{self._consumer}-watchdog"
        )

    async def _open_inbox(self) -> NatsSubscription | None:
        """Receive on a new inbox; return the previous subscription (to drain)."""
        previous = self._sub
        self._generation += 1
        self._inbox = self._nc.new_inbox()
        callback = functools.partial(self._on_message, self._generation)
        self._sub = await self._nc.subscribe(self._inbox, cb=callback)
        return previous

    async def stop(self, timeout: float | None = None) -> None:
        """Drain: stop pulling, finish in-flight handlers, nak what has not started.

        Messages received but not started are nak'd so the server redelivers them at
        once (to this or another subscriber); handlers still running after ``timeout``
        seconds (default: the subscriber's drain timeout) are cancelled and their
        messages nak'd too. An ephemeral consumer created for the subscription is
        deleted. The deadline holds even if the caller is cancelled.
        """
        if self._drainer is None and self._done.done():
            return  # it has ended already (failed): nothing left to drain
        if self._drainer is None:
            self._draining = True  # from now on no new message starts
            deadline = self._s.drain_timeout if timeout is None else timeout
            self._drainer = self._loop.create_task(
                self._drain(deadline), name=f"goflux-jetstream-{self._consumer}-drain"
            )
        if in_handler_context(self):
            return  # called from a handler (or a task it spawned): the drain waits for it
        await asyncio.shield(self._drainer)

    async def _drain(self, deadline: float) -> None:
        self._draining = True
        until = self._loop.time() + deadline
        try:
            if self._sub is not None:
                # Removes interest (the server drops our open pull requests), then
                # passes what was already received to _on_message, which naks it.
                # Interest goes first: a nak sent while a pull request is still open
                # would be redelivered into it, to an inbox nobody reads any more,
                # and come back only after ack_wait.
                try:
                    drained = self._sub.drain()  # type: ignore[no-untyped-call]
                    await asyncio.wait_for(drained, timeout=max(deadline, 0.1))
                except (nats.errors.Error, TimeoutError):
                    logger.warning("could not drain the pull inbox of %r", self._consumer)
            # Received but not started: hand back for redelivery at once.
            while self._ready:
                await self._nak_quietly(self._ready.popleft()[0])
            self._wake(everyone=True)
            if self._workers:
                _, pending = await asyncio.wait(
                    self._workers, timeout=max(until - self._loop.time(), 0.0)
                )
                if pending:
                    # A zero deadline (a closing message stream) cancels on purpose.
                    logger.log(
                        logging.WARNING if deadline > 0 else logging.DEBUG,
                        "drain of %r timed out after %.3gs; cancelling %d handlers",
                        self._consumer,
                        deadline,
                        len(pending),
                    )
                    for task in pending:
                        task.cancel()
                    await asyncio.wait(pending)
        finally:
            await self._finish(None)

    async def _finish(self, failure: BaseException | None) -> None:
        if self._done.done():
            return
        self._draining = True
        current = asyncio.current_task()
        if self._watchdog is not None and self._watchdog is not current:
            self._watchdog.cancel()
        for task in self._workers:
            if task is not current and not task.done():
                task.cancel()
        if self._sub is not None and failure is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
        if self._ephemeral:
            # If this fails, the server removes it after its inactive threshold anyway.
            with contextlib.suppress(nats.errors.Error, APIError, TimeoutError):
                await self._js.delete_consumer(self._stream, self._consumer)
        self._failure = failure
        self._done.set_result(None)

    async def wait(self) -> None:
        """Wait until the subscription stops.

        Raises:
            SubscribeError: The subscription failed (for example, its consumer was
                deleted or the connection closed).
        """
        await asyncio.shield(self._done)
        if self._failure is not None:
            raise SubscribeError(
                f"subscription to {self._consumer!r} on {self._stream!r} failed: {self._failure}"
            ) from self._failure

    async def _closed(self) -> bool:
        """Fail the subscription if the connection was closed for good."""
        if not self._nc.is_closed:
            return False
        await self._finish(nats.errors.ConnectionClosedError())
        return True

    # ----------------------------------------------------------- pull control

    async def _pull(self) -> None:
        """Ask for more messages if the in-flight bound leaves room."""
        self._pull_scheduled = False
        if self._draining or await self._closed() or not self._nc.is_connected:
            return  # while disconnected, the reconnect reset pulls afresh
        credit = self._s.max_in_flight - self._outstanding - self._requested
        if credit < self._threshold and not (self._requested == 0 and credit > 0):
            return
        count = min(credit, self._limits.batch)
        self._requested += count
        request = {
            "batch": count,
            "expires": int(self._limits.expires * _NS),
            "idle_heartbeat": int(self._limits.heartbeat * _NS),
        }
        try:
            await self._nc.publish(
                self._next_subject, json.dumps(request).encode(), reply=self._inbox
            )
        except nats.errors.Error as exc:
            self._requested -= count
            if not await self._closed():
                logger.warning("pull request for %r failed: %s", self._consumer, exc)

    async def _reset(self, why: str) -> None:
        """Start over with pulling: requests may be lost (reconnect, restart, silence).

        The pull requests still open (if any) belong to the old inbox, which is
        drained away: the server drops them and anything already on its way is nak'd,
        so the in-flight bound holds.
        """
        logger.info("re-pulling for %r: %s", self._consumer, why)
        self._last_activity = self._loop.time()
        try:
            previous = await self._open_inbox()
        except nats.errors.Error as exc:
            await self._closed()
            logger.warning("could not open a new pull inbox for %r: %s", self._consumer, exc)
            return
        self._requested = 0
        if previous is not None:
            self._loop.create_task(self._retire(previous))
        if self._s.ordered:
            await self._recreate(why)
        else:
            await self._pull()

    async def _retire(self, subscription: NatsSubscription) -> None:
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            drained = subscription.drain()  # type: ignore[no-untyped-call]
            await asyncio.wait_for(drained, timeout=self._limits.expires)

    async def _recreate(self, why: str) -> None:
        """Ordered mode: replace the consumer, resuming after the last message seen."""
        if self._recreating or self._draining:
            return
        self._recreating = True
        old = self._consumer
        try:
            with contextlib.suppress(nats.errors.Error, APIError, TimeoutError):
                await self._js.delete_consumer(self._stream, old)
            seen = self._stream_sequence or self._start_floor
            start = seen + 1 if seen else None
            config = ordered_consumer_config(self._pattern, self._s, start)
            try:
                info: ConsumerInfo = await self._js.add_consumer(self._stream, config)
            except (nats.errors.Error, APIError, TimeoutError) as exc:
                logger.warning("could not recreate ordered consumer (%s); retrying", exc)
                return  # the watchdog tries again
            self._consumer = info.name
            self._next_subject = f"{self._js._prefix}.CONSUMER.MSG.NEXT.{self._stream}.{info.name}"
            self._consumer_sequence = 0
            self._requested = 0
            logger.info("ordered consumer %r replaced by %r (%s)", old, info.name, why)
        finally:
            self._recreating = False
        await self._pull()

    def _in_order(self, msg: Msg) -> bool:
        """Ordered mode: accept the next message of the current consumer only."""
        try:
            tokens, offset = ack_tokens(msg.reply)
        except ValueError:
            return False
        if tokens[offset + 1] != self._consumer:
            return False  # a late delivery from a replaced consumer
        consumer_sequence = int(tokens[offset + 4])
        if consumer_sequence != self._consumer_sequence + 1:
            self._requested = 0
            why = f"gap: expected {self._consumer_sequence + 1}, got {consumer_sequence}"
            self._loop.create_task(self._recreate(why))
            return False
        self._consumer_sequence = consumer_sequence
        self._stream_sequence = int(tokens[offset + 3])
        return True

    async def _on_message(self, generation: int, msg: Msg) -> None:
        if generation != self._generation:
            if msg.reply and not self._s.ordered:
                await self._nak_quietly(msg)  # from a retired inbox: hand it back
            return
        now = self._loop.time()
        self._last_activity = now
        if not msg.reply:
            await self._on_status(msg)
            return
        if self._requested > 0:
            self._requested -= 1
        if self._s.ordered:
            if self._draining or self._recreating or not self._in_order(msg):
                return  # nothing to nak: ordered consumers do not acknowledge
        elif self._draining:
            await self._nak_quietly(msg)
            return
        self._outstanding += 1
        self._ready.append((msg, now))
        self._wake()

    async def _on_status(self, msg: Msg) -> None:
        headers = msg.headers or {}
        status = headers.get("Status")
        if status == "100":  # idle heartbeat: the pull request is alive
            return
        description = str(headers.get("Description", ""))
        if status == "408" or (status == "409" and "Nats-Pending-Messages" in headers):
            # A pull request ended; its headers say how much of it was unfilled.
            try:
                unfilled = int(headers.get("Nats-Pending-Messages", "0"))
            except ValueError:
                unfilled = self._requested
            self._requested = max(0, self._requested - unfilled)
            await self._pull()
            return
        if status == "409" and "Consumer Deleted" in description:
            if self._s.ordered:
                await self._recreate("consumer deleted")
            else:
                await self._finish(SubscribeError(f"consumer {self._consumer!r} was deleted"))
            return
        if status == "409" and "Exceeded MaxRequest" in description:
            # The consumer refuses requests this big or long: retrying cannot help.
            await self._finish(
                SubscribeError(
                    f"consumer {self._consumer!r} refuses our pull requests: {description}"
                )
            )
            return
        # 503 (no JetStream responder: restarting, or the consumer is gone), 409
        # leadership change and the like: the requests are gone; the watchdog pulls
        # again. A 503 may also mean the consumer was deleted: find out.
        reason = description.split("\n", maxsplit=1)[0]
        logger.info("pull status %s %s for %r", status, reason, self._consumer)
        self._requested = 0
        if status == "503" and not self._checking:
            self._checking = True
            self._loop.create_task(self._check_consumer())

    async def _check_consumer(self) -> None:
        """After a 503: recreate (ordered), fail if the consumer is gone, else keep going."""
        try:
            if self._s.ordered:
                await self._recreate("no responders for the consumer")
                return
            try:
                await self._js.consumer_info(self._stream, self._consumer)
            except NotFoundError as exc:
                what = "stream" if exc.err_code == 10059 else "consumer"
                await self._finish(
                    SubscribeError(f"{what} of {self._consumer!r} on {self._stream!r} is gone")
                )
            except (nats.errors.Error, APIError, TimeoutError):
                pass  # JetStream unavailable for now: the watchdog keeps pulling
        finally:
            self._checking = False

    async def _watch(self) -> None:
        heartbeat = self._limits.heartbeat
        period = heartbeat
        keep_alive = self._s.keep_alive and self._ack_wait > 0 and not self._s.ordered
        if keep_alive:
            period = min(period, self._ack_wait / 4)
        while not self._draining:
            await asyncio.sleep(period)
            if await self._closed():
                return
            now = self._loop.time()
            reconnects = self._nc.stats["reconnects"]
            if reconnects != self._reconnects:
                self._reconnects = reconnects
                await self._reset("reconnected")
            elif self._requested == 0:
                await self._pull()
            elif now - self._last_activity > 2 * heartbeat:
                await self._reset(f"no heartbeat for {now - self._last_activity:.1f}s")
            if keep_alive:
                await self._keep_alive(now)

    async def _keep_alive(self, now: float) -> None:
        """Reset ack_wait of messages held longer than half of it, queued or running."""
        half = self._ack_wait / 2
        for acker, started in list(self._running.items()):
            if acker.released:  # settled while the handler still runs: nothing to keep
                continue
            if now - max(started, acker.last_progress) > half:
                acker.last_progress = now
                with contextlib.suppress(SettlementError):
                    await acker.in_progress()
        # Queued messages: mark them first (no await while indexing the deque, which
        # workers pop from), then signal.
        ready = self._ready
        stale: list[Msg] = []
        for index in range(len(ready)):  # oldest first: stop at the first fresh one
            msg, seen = ready[index]
            if now - seen <= half:
                break
            ready[index] = (msg, now)
            stale.append(msg)
        for msg in stale:
            with contextlib.suppress(nats.errors.Error):
                await self._nc.publish(msg.reply, b"+WPI")
            self._tel.record_settlement(self._outcome_attrs["in_progress"])

    # ------------------------------------------------------------- processing

    def _wake(self, *, everyone: bool = False) -> None:
        """Wake an idle worker (or all); start another if none is idle and room is left.

        Workers start on demand, up to ``concurrency``: a stream's subscription may
        allow thousands, and an idle worker still costs memory.
        """
        idle = self._idle
        while idle:
            waiter = idle.pop()
            if not waiter.done():
                waiter.set_result(None)
                if not everyone:
                    return
        workers = self._workers
        if not everyone and not self._draining and len(workers) < self._s.concurrency:
            name = f"goflux-jetstream-{self._consumer}-{len(workers)}"
            workers.append(self._loop.create_task(self._work(), name=name))

    async def _work(self) -> None:
        enter_handler_context(self)
        ready = self._ready
        while not self._draining:
            if not ready:
                waiter = self._loop.create_future()
                self._idle.append(waiter)
                await waiter
                continue
            msg, arrival = ready.popleft()
            await self._process(msg, arrival)

    def on_settled(self, acker: JetStreamAcker, outcome: Outcome | None) -> None:
        """Account for a settlement (frees in-flight room) and record its outcome."""
        self._tel.record_settlement(self._outcome_attrs[outcome or "in_progress"])
        if outcome is not None:
            self._release(acker)

    def _release(self, acker: JetStreamAcker) -> None:
        """Give the message's in-flight room back (once per message)."""
        if acker.released:
            return
        acker.released = True
        self._outstanding -= 1
        if (
            not self._pull_scheduled
            and not self._draining
            and self._s.max_in_flight - self._outstanding - self._requested >= self._threshold
        ):
            self._pull_scheduled = True
            self._loop.create_task(self._pull())

    def _scope(
        self, msg: Msg, acker: JetStreamAcker, message_id: str | None
    ) -> ProcessScope | NullScope:
        """The processing scope while telemetry is active (the caller checks that)."""
        tel = self._tel
        return tel.process(
            SYSTEM,
            msg.subject,
            msg.headers,
            template=self._template,
            message_id=message_id,
            body_size=len(msg.data),
            consumer_group=self._consumer,
            attributes={
                STREAM_ATTR: self._stream,
                SEQUENCE_ATTR: acker.stream_sequence,
                DELIVERY_COUNT_ATTR: acker.num_delivered,
            }
            if tel.tracing
            else None,
        )

    @staticmethod
    def _unacknowledged(
        subject: str,
        payload: P,
        headers: Headers | None,
        message_id: str | None,
        data: bytes,
        acker: JetStreamAcker,
    ) -> Message[P]:
        """Ordered mode: no acknowledgement, so settling is a no-op, as on core NATS."""
        return Message(
            subject, payload, headers=headers, id=message_id, delivery=acker.delivery, data=data
        )

    async def _process(self, msg: Msg, arrival: float) -> None:
        acker = JetStreamAcker(self._nc, self, msg.reply, no_acks=self._s.ordered)
        if acker.num_delivered > 1:
            self.redelivered += 1
            self._tel.record_redelivery(self._redelivery_attrs)
        raw_headers = msg.headers
        headers, message_id = read_headers(raw_headers) if raw_headers else (None, None)
        data = msg.data
        message: Message[T] | None = None
        try:
            with self._scope(msg, acker, message_id) if self._tel.active else NULL_SCOPE:
                try:
                    payload = self._codec.decode(data)
                except DecodeError as exc:
                    self.undecodable += 1
                    letter = self._make(msg.subject, data, headers, message_id, data, acker)
                    await self._reject(letter, acker, exc)
                    raise
                message = self._make(msg.subject, payload, headers, message_id, data, acker)
                running = self._running
                running[acker] = arrival  # ack_wait has run since then
                try:
                    await self._handler(message)
                finally:
                    del running[acker]
        except asyncio.CancelledError:
            if await self._after_cancellation(msg, message, acker):
                raise
            return
        except Exception as exc:
            if message is None and isinstance(exc, DecodeError):
                return  # rejected (and logged) before any handler ran
            self.failed += 1
            logger.exception(
                "handler failed for message %s on %r (delivery %d): %s: %s",
                acker.stream_sequence,
                msg.subject,
                acker.num_delivered,
                type(exc).__name__,
                exc,
            )
            if message is not None:
                await self._settle_after(message, acker, failed=True)
            return
        self.handled += 1
        if message._settled is None and self._quick_ack and message._observer is None:
            # The hot path (auto-ack, nobody observing): Message.ack without its layers.
            message._settled = "ack"
            try:
                await acker.ack()
            except SettlementError as exc:
                message._settled = None
                self._unsettled(acker, exc)
            except BaseException:  # cancelled while sending: unsettled, as Message.ack does
                message._settled = None
                raise
        elif message.settled is None or not message.acknowledgeable:
            await self._settle_after(message, acker, failed=False)

    async def _after_cancellation(
        self, msg: Msg, message: Message[T] | None, acker: JetStreamAcker
    ) -> bool:
        """Settle after a cancellation; True if the worker itself is cancelled (re-raise)."""
        self.failed += 1
        worker = asyncio.current_task()
        drained = worker is not None and worker.cancelling() > 0
        if not drained:  # a cancellation of the handler's own escaped it
            logger.error(
                "handler for message %s on %r was cancelled", acker.stream_sequence, msg.subject
            )
        if message is not None:
            # A drain deadline hands the message back for redelivery at once.
            await self._settle_after(message, acker, failed=True, force_nak=drained)
        elif self._s.ordered:
            self._release(acker)
        elif not acker.released:  # cancelled while rejecting: hand it back at once
            await self._send_or_release(acker, acker.nak(None))
        return drained

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
        self._release(acker)

    async def _reject(
        self, letter: Message[bytes], acker: JetStreamAcker, exc: DecodeError
    ) -> None:
        """Give up an undecodable message: dead-letter it (if configured), then terminate it.

        A dead letter that cannot be published keeps the message: it is naked with a
        delay and dead-lettered on a later delivery (in ordered mode, which cannot
        redeliver, it is lost and logged). One the server refuses for good (too large
        even in compact form) is logged and the message terminated without it.
        """
        dead_letter = self._s.dead_letter
        ordered = self._s.ordered
        outcome = "skipped" if ordered else "terminated"
        if dead_letter is not None and is_dead_letter(letter, dead_letter.subject):
            outcome += " (it is itself a dead letter: not dead-lettered again)"
        elif dead_letter is not None:
            try:
                await dead_letter.send(letter, exc, "undecodable")
                outcome = f"dead-lettered to {dead_letter.subject!r} and {outcome}"
            except Exception as failure:
                if ordered:
                    outcome = f"LOST: the dead letter failed ({failure})"
                elif refused_for_good(failure):
                    outcome = f"terminated WITHOUT a dead letter, refused for good ({failure})"
                else:
                    logger.error(
                        "undecodable message %s on %r could not be dead-lettered (%s); "
                        "it is kept and tried again in %ss",
                        acker.stream_sequence,
                        letter.subject,
                        failure,
                        DEAD_LETTER_RETRY_DELAY,
                        exc_info=exc,
                    )
                    await self._send_or_release(acker, acker.nak(DEAD_LETTER_RETRY_DELAY))
                    return
        logger.error(
            "undecodable message %s on %r %s: %s",
            acker.stream_sequence,
            letter.subject,
            outcome,
            exc,
            exc_info=exc,
        )
        if ordered:
            self._release(acker)
        else:
            await self._send_or_release(
                acker, acker.term(f"goflux: undecodable payload: {exc}"[:200])
            )

    async def _settle_after(
        self,
        message: Message[T],
        acker: JetStreamAcker,
        *,
        failed: bool,
        force_nak: bool = False,
    ) -> None:
        """Settle what the handler left unsettled: auto-ack/nak, or free its room (manual)."""
        if not message.acknowledgeable:  # ordered mode: nothing to send, the room is free
            self._release(acker)
            return
        if message.settled is not None:
            return
        if not self._s.manual_ack or force_nak:
            await self._send_or_release(acker, message.nak() if failed else message.ack())
            return
        if not failed:
            logger.warning(
                "handler returned without settling message on %r (manual_ack); "
                "the server redelivers it after ack_wait unless it is settled later",
                message.subject,
            )
        self._release(acker)  # a later settlement will not free the room again

    async def _nak_quietly(self, msg: Msg) -> None:
        """Nak a received message that will not be processed (drain, retired inbox)."""
        with contextlib.suppress(nats.errors.Error):  # else redelivered after ack_wait
            await self._nc.publish(msg.reply, b"-NAK")
