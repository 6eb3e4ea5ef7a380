"""Consuming from JetStream: a continuous, callback-driven pull loop with bounded work."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, ConsumerInfo
from nats.js.errors import APIError, NotFoundError
from opentelemetry.util.types import AttributeValue

from goflux.codecs import Codec
from goflux.errors import DecodeError, SettlementError, SubscribeError
from goflux.interfaces import Handler
from goflux.lifecycle import StopOnExit, SubscriberLifecycle
from goflux.message import Message, Outcome, received
from goflux.subjects import covers, is_wildcard, validate_pattern
from goflux.telemetry import (
    CONSUMER_GROUP,
    DESTINATION_TEMPLATE,
    SETTLEMENT_OUTCOME,
    NullScope,
    ProcessScope,
    Telemetry,
)
from goflux.telemetry import SYSTEM as SYSTEM_ATTR
from goflux.transports.jetstream.acker import JetStreamAcker
from goflux.transports.jetstream.system import SYSTEM
from goflux.wire import read_headers

__all__ = ("JetStreamSubscription", "Subscriber")

T = TypeVar("T")

logger = logging.getLogger("goflux.transports.jetstream")

DEFAULT_MAX_IN_FLIGHT = 256
DEFAULT_EXPIRES = 30.0
DEFAULT_DRAIN_TIMEOUT = 30.0
_NS = 1_000_000_000

STREAM_ATTR = "messaging.nats.stream"
SEQUENCE_ATTR = "messaging.nats.stream.sequence"
DELIVERY_COUNT_ATTR = "messaging.nats.delivery.count"


class _Settings:
    """Validated subscriber options, shared by its subscriptions."""

    __slots__ = (
        "batch",
        "concurrency",
        "consumer_config",
        "drain_timeout",
        "expires",
        "heartbeat",
        "keep_alive",
        "manual_ack",
        "max_in_flight",
        "ordered",
    )

    def __init__(
        self,
        *,
        manual_ack: bool,
        max_in_flight: int,
        concurrency: int,
        batch: int | None,
        expires: float,
        idle_heartbeat: float | None,
        keep_alive: bool,
        drain_timeout: float,
        consumer_config: Mapping[str, Any] | None,
        ordered: bool,
    ) -> None:
        if ordered and (manual_ack or concurrency != 1):
            raise ValueError("ordered mode delivers in order: no manual_ack, concurrency 1")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if concurrency > max_in_flight:
            raise ValueError(
                f"concurrency ({concurrency}) cannot exceed max_in_flight ({max_in_flight})"
            )
        if batch is not None and batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if expires < 1.0:
            raise ValueError(f"expires must be >= 1 second, got {expires}")
        heartbeat = idle_heartbeat if idle_heartbeat is not None else min(expires / 2, 5.0)
        if not 0.1 <= heartbeat <= expires / 2:
            raise ValueError(
                f"idle_heartbeat must be between 0.1s and half of expires, got {heartbeat}"
            )
        if drain_timeout < 0:
            raise ValueError(f"drain_timeout must be >= 0, got {drain_timeout}")
        self.manual_ack = manual_ack
        self.max_in_flight = max_in_flight
        self.concurrency = concurrency
        self.batch = min(batch or max_in_flight, max_in_flight)
        self.expires = expires
        self.heartbeat = heartbeat
        self.keep_alive = keep_alive
        self.drain_timeout = drain_timeout
        self.consumer_config = dict(consumer_config or {})
        self.ordered = ordered


def _ordered_config(
    subject: str, settings: _Settings, start_sequence: int | None
) -> ConsumerConfig:
    config: dict[str, Any] = {
        "filter_subject": subject,
        **settings.consumer_config,
        "ack_policy": "none",
        "max_deliver": 1,
        "mem_storage": True,
        "num_replicas": 1,
    }
    config.setdefault("inactive_threshold", 300.0)
    if start_sequence is not None:
        config["deliver_policy"] = "by_start_sequence"
        config["opt_start_seq"] = start_sequence
        config.pop("opt_start_time", None)
    return ConsumerConfig(**config)


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
        settings: _Settings,
        telemetry: Telemetry,
    ) -> None:
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
        self._s = settings
        self._tel = telemetry
        self._next_subject = f"{js._prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._inbox = self._nc.new_inbox()
        self._sub: NatsSubscription | None = None
        self._requested = 0  # messages asked for by pull requests still open
        self._outstanding = 0  # messages received and not yet settled
        self._threshold = max(1, settings.batch // 2)
        self._ready: deque[Msg] = deque()
        self._idle: list[asyncio.Future[None]] = []  # workers waiting for a message
        self._pull_scheduled = False
        self._running: dict[JetStreamAcker, float] = {}
        self._workers: list[asyncio.Task[None]] = []
        self._watchdog: asyncio.Task[None] | None = None
        self._drainer: asyncio.Task[None] | None = None
        self._draining = False
        self._failure: BaseException | None = None
        self._loop = asyncio.get_running_loop()
        self._done = self._loop.create_future()
        self._last_activity = 0.0
        self._reconnects = 0
        self._consumer_sequence = 0  # ordered mode: last consumer sequence seen
        self._stream_sequence = 0  # ordered mode: last stream sequence seen
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
        loop = asyncio.get_running_loop()
        self._sub = await self._nc.subscribe(self._inbox, cb=self._on_message)
        self._reconnects = self._nc.stats["reconnects"]
        self._last_activity = loop.time()
        await self._pull()
        await self._nc.flush()  # the first pull request has reached the server
        self._workers = [
            loop.create_task(self._work(), name=f"goflux-jetstream-{self._consumer}-{n}")
            for n in range(self._s.concurrency)
        ]
        self._watchdog = loop.create_task(
            self._watch(), name=f"goflux-jetstream-{self._consumer}-watchdog"
        )

    async def stop(self, timeout: float | None = None) -> None:
        """Drain: stop pulling, finish in-flight handlers, nak what has not started.

        Messages received but not started are nak'd so the server redelivers them at
        once (to this or another subscriber); handlers still running after ``timeout``
        seconds (default: the subscriber's drain timeout) are cancelled and their
        messages nak'd too. An ephemeral consumer created for the subscription is
        deleted. The deadline holds even if the caller is cancelled.
        """
        if self._drainer is None:
            self._draining = True  # from now on no new message starts
            deadline = self._s.drain_timeout if timeout is None else timeout
            self._drainer = asyncio.get_running_loop().create_task(
                self._drain(deadline), name=f"goflux-jetstream-{self._consumer}-drain"
            )
        if asyncio.current_task() in self._workers:
            return  # called from a handler: the drain waits for that handler
        await asyncio.shield(self._drainer)

    async def _drain(self, deadline: float) -> None:
        self._draining = True
        loop = asyncio.get_running_loop()
        until = loop.time() + deadline
        try:
            # Received but not started: hand back at once, before anything else runs.
            while self._ready:
                await self._nak_quietly(self._ready.popleft())
            if self._sub is not None:
                # Removes interest (the server drops our open pull requests), then
                # passes what was already received to _on_message, which naks it.
                try:
                    drained = self._sub.drain()  # type: ignore[no-untyped-call]
                    await asyncio.wait_for(drained, timeout=max(deadline, 0.1))
                except (nats.errors.Error, TimeoutError):
                    logger.warning("could not drain the pull inbox of %r", self._consumer)
            while self._ready:
                await self._nak_quietly(self._ready.popleft())
            self._wake(everyone=True)
            if self._workers:
                _, pending = await asyncio.wait(
                    self._workers, timeout=max(until - loop.time(), 0.0)
                )
                if pending:
                    logger.warning(
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
        if self._watchdog is not None and self._watchdog is not asyncio.current_task():
            self._watchdog.cancel()
        for task in self._workers:
            if task is not asyncio.current_task() and not task.done():
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

    # ----------------------------------------------------------- pull control

    async def _pull(self) -> None:
        """Ask for more messages if the in-flight bound leaves room."""
        self._pull_scheduled = False
        if self._draining or not self._nc.is_connected:
            return  # while disconnected, the reconnect reset pulls afresh
        credit = self._s.max_in_flight - self._outstanding - self._requested
        if credit < self._threshold and not (self._requested == 0 and credit > 0):
            return
        count = min(credit, self._s.batch)
        self._requested += count
        request = {
            "batch": count,
            "expires": int(self._s.expires * _NS),
            "idle_heartbeat": int(self._s.heartbeat * _NS),
        }
        try:
            await self._nc.publish(
                self._next_subject, json.dumps(request).encode(), reply=self._inbox
            )
        except nats.errors.Error as exc:
            self._requested -= count
            if isinstance(exc, nats.errors.ConnectionClosedError):
                await self._finish(exc)
            else:
                logger.warning("pull request for %r failed: %s", self._consumer, exc)

    async def _reset(self, why: str) -> None:
        """Forget open pull requests (lost to a reconnect, restart or missed heartbeats)."""
        logger.info("re-pulling for %r: %s", self._consumer, why)
        self._requested = 0
        self._last_activity = asyncio.get_running_loop().time()
        if self._s.ordered:
            await self._recreate(why)
        else:
            await self._pull()

    async def _recreate(self, why: str) -> None:
        """Ordered mode: replace the consumer, resuming after the last message seen."""
        if self._recreating or self._draining:
            return
        self._recreating = True
        old = self._consumer
        try:
            with contextlib.suppress(nats.errors.Error, APIError, TimeoutError):
                await self._js.delete_consumer(self._stream, old)
            start = self._stream_sequence + 1 if self._stream_sequence else None
            config = _ordered_config(self._pattern, self._s, start)
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
        tokens = msg.reply.split(".")
        offset = 2 if len(tokens) == 9 else 4
        if len(tokens) < 9 or tokens[offset + 1] != self._consumer:
            return False  # a late delivery from a replaced consumer
        consumer_sequence = int(tokens[offset + 4])
        if consumer_sequence != self._consumer_sequence + 1:
            self._requested = 0
            asyncio.get_running_loop().create_task(
                self._recreate(
                    f"gap: expected {self._consumer_sequence + 1}, got {consumer_sequence}"
                )
            )
            return False
        self._consumer_sequence = consumer_sequence
        self._stream_sequence = int(tokens[offset + 3])
        return True

    async def _on_message(self, msg: Msg) -> None:
        self._last_activity = self._loop.time()
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
        self._ready.append(msg)
        self._wake()

    async def _on_status(self, msg: Msg) -> None:
        headers = msg.headers or {}
        status = headers.get("Status")
        if status == "100":  # idle heartbeat: the pull request is alive
            return
        if status == "408":  # a pull request expired; the header says how much was unfilled
            try:
                unfilled = int(headers.get("Nats-Pending-Messages", "0"))
            except ValueError:
                unfilled = self._requested
            self._requested = max(0, self._requested - unfilled)
            await self._pull()
            return
        description = str(headers.get("Description", ""))
        if status == "409" and "Consumer Deleted" in description:
            if self._s.ordered:
                await self._recreate("consumer deleted")
            else:
                await self._finish(SubscribeError(f"consumer {self._consumer!r} was deleted"))
            return
        if status == "409" and "Nats-Pending-Messages" in headers:
            try:
                unfilled = int(headers["Nats-Pending-Messages"])
            except ValueError:
                unfilled = self._requested
            self._requested = max(0, self._requested - unfilled)
            await self._pull()
            return
        # 503 (no JetStream responder: restarting, or the consumer is gone), 409
        # leadership change and the like: the requests are gone; the watchdog pulls
        # again. A 503 may also mean the consumer was deleted: find out.
        logger.info(
            "pull status %s %s for %r",
            status,
            description.split("\n", maxsplit=1)[0],
            self._consumer,
        )
        self._requested = 0
        if status == "503" and not self._checking:
            self._checking = True
            asyncio.get_running_loop().create_task(self._check_consumer())

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
        loop = asyncio.get_running_loop()
        heartbeat = self._s.heartbeat
        period = heartbeat
        if self._s.keep_alive and self._ack_wait > 0:
            period = min(period, self._ack_wait / 4)
        while not self._draining:
            await asyncio.sleep(period)
            now = loop.time()
            reconnects = self._nc.stats["reconnects"]
            if reconnects != self._reconnects:
                self._reconnects = reconnects
                await self._reset("reconnected")
            elif self._requested == 0:
                await self._pull()
            elif now - self._last_activity > 2 * heartbeat:
                await self._reset(f"no heartbeat for {now - self._last_activity:.1f}s")
            if self._s.keep_alive and self._running:
                for acker, started in list(self._running.items()):
                    if now - max(started, acker.last_progress) > self._ack_wait / 2:
                        acker.last_progress = now
                        with contextlib.suppress(SettlementError):
                            await acker.in_progress()

    # ------------------------------------------------------------- processing

    def _wake(self, *, everyone: bool = False) -> None:
        idle = self._idle
        while idle:
            waiter = idle.pop()
            if not waiter.done():
                waiter.set_result(None)
                if not everyone:
                    return

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        ready = self._ready
        while not self._draining:
            if not ready:
                waiter = loop.create_future()
                self._idle.append(waiter)
                await waiter
                continue
            await self._process(ready.popleft())

    def on_settled(self, acker: JetStreamAcker, outcome: Outcome | None) -> None:
        """Account for a settlement (frees in-flight room) and record its outcome."""
        self._tel.record_settlement(self._outcome_attrs[outcome or "in_progress"])
        if outcome is not None:
            self._release()

    def _release(self) -> None:
        self._outstanding -= 1
        if (
            not self._pull_scheduled
            and not self._draining
            and self._s.max_in_flight - self._outstanding - self._requested >= self._threshold
        ):
            self._pull_scheduled = True
            asyncio.get_running_loop().create_task(self._pull())

    def _scope(
        self, msg: Msg, acker: JetStreamAcker, message_id: str | None
    ) -> ProcessScope | NullScope:
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

    async def _process(self, msg: Msg) -> None:
        acker = JetStreamAcker(self._nc, self, msg.reply, no_acks=self._s.ordered)
        if acker.num_delivered > 1:
            self.redelivered += 1
            self._tel.record_redelivery(self._redelivery_attrs)
        headers, message_id = read_headers(msg.headers)
        data = msg.data
        message: Message[T] | None = None
        try:
            with self._scope(msg, acker, message_id):
                try:
                    payload = self._codec.decode(data)
                except DecodeError as exc:
                    self.undecodable += 1
                    await acker.term(f"goflux: undecodable payload: {exc}"[:200])
                    raise
                message = received(msg.subject, payload, headers, message_id, data, acker)
                running = self._running
                running[acker] = self._last_activity  # about its arrival: conservative
                try:
                    await self._handler(message)
                finally:
                    del running[acker]
        except DecodeError as exc:
            logger.exception(
                "undecodable message %s on %r terminated: %s",
                acker.stream_sequence,
                msg.subject,
                exc,
            )
            return
        except asyncio.CancelledError:
            self.failed += 1
            if message is not None and message.settled is None:
                # Cancelled by a drain deadline: hand it back for redelivery at once.
                try:
                    await message.nak()
                except SettlementError:
                    self._release()
            raise
        except Exception as exc:
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
                await self._settle_after(message, failed=True)
            return
        self.handled += 1
        if message.settled is None:
            await self._settle_after(message, failed=False)

    async def _settle_after(self, message: Message[T], *, failed: bool) -> None:
        """Settle what the handler left unsettled: auto-ack/nak, or free its room (manual)."""
        if message.settled is not None:
            return
        if not self._s.manual_ack:
            try:
                await (message.nak() if failed else message.ack())
            except SettlementError:
                logger.exception("settling a message failed; the server redelivers it")
                self._release()
            return
        if not failed:
            logger.warning(
                "handler returned without settling message on %r (manual_ack); "
                "the server redelivers it after ack_wait",
                message.subject,
            )
        self._release()

    async def _nak_quietly(self, msg: Msg) -> None:
        """Nak a received message that will not be processed (drain)."""
        with contextlib.suppress(nats.errors.Error):  # else redelivered after ack_wait
            await self._nc.publish(msg.reply, b"-NAK")


def _filters(info: ConsumerInfo) -> list[str]:
    config = info.config
    if config.filter_subjects:
        return list(config.filter_subjects)
    if config.filter_subject:
        return [config.filter_subject]
    return []


class Subscriber(SubscriberLifecycle["JetStreamSubscription[T]"], Generic[T]):
    """Consumes a JetStream stream with typed handlers, through a pull consumer.

    Without ``consumer``, each :meth:`start` creates an ephemeral consumer filtered on
    its subject (deleted when the subscription stops). With ``consumer``, it binds to
    that existing durable consumer (see :func:`ensure_consumer`), whose filter must lie
    within the subscribed subject.

    The subscription pulls continuously with its own pull requests (``batch``,
    ``expires``, ``idle_heartbeat``), never holding more than ``max_in_flight``
    unsettled messages; ``concurrency`` handlers run at a time. By default a handler
    that returns acks its message and one that raises naks it (redelivered at once;
    retry middleware can choose a delay or a term instead); with ``manual_ack`` the
    handler settles. An undecodable payload is terminated and counted, never
    redelivered. Handlers running longer than half the consumer's ``ack_wait`` get
    ``in_progress`` signals so the server does not redeliver them meanwhile.

    Args:
        js: A JetStream context of a connected nats-py client (the caller owns it).
        codec: Decodes the payloads.
        stream: The stream to consume.
        consumer: A durable consumer to bind to; None creates ephemeral ones.
        manual_ack: Leave settlement to the handler.
        max_in_flight: Most messages received and not yet settled.
        concurrency: Handlers running at a time (messages beyond one are processed in
            parallel, so out of order).
        batch: Most messages asked for per pull request (default: ``max_in_flight``).
        expires: Seconds a pull request stays open at the server.
        idle_heartbeat: Seconds between server heartbeats on an idle pull request
            (default: ``min(expires / 2, 5)``); two missed ones trigger a new pull.
        keep_alive: Send ``in_progress`` for handlers outliving half the ack_wait.
        drain_timeout: Seconds a drain waits for running handlers.
        consumer_config: Settings for the ephemeral consumers (nats-py
            ``ConsumerConfig`` fields, such as ``deliver_policy`` or ``ack_wait``).
        ordered: Replay in stream order without acknowledgements, through an
            ephemeral consumer that is recreated after the last message seen whenever
            a gap, a missed heartbeat or a reconnect is detected (no durable needed;
            concurrency 1; settling is a no-op).
        telemetry: Tracing and metrics; default: OpenTelemetry globals.

    Raises:
        ValueError: An option is out of range.
    """

    def __init__(
        self,
        js: JetStreamContext,
        codec: Codec[T],
        *,
        stream: str,
        consumer: str | None = None,
        manual_ack: bool = False,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        concurrency: int = 1,
        batch: int | None = None,
        expires: float = DEFAULT_EXPIRES,
        idle_heartbeat: float | None = None,
        keep_alive: bool = True,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        consumer_config: Mapping[str, Any] | None = None,
        ordered: bool = False,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._settings = _Settings(
            manual_ack=manual_ack,
            max_in_flight=max_in_flight,
            concurrency=concurrency,
            batch=batch,
            expires=expires,
            idle_heartbeat=idle_heartbeat,
            keep_alive=keep_alive,
            drain_timeout=drain_timeout,
            consumer_config=consumer_config,
            ordered=ordered,
        )
        if consumer is not None and (consumer_config or ordered):
            raise ValueError(
                "consumer_config and ordered apply to consumers the subscriber creates, "
                "not to a bound one"
            )
        self._js = js
        self._codec = codec
        self._stream = stream
        self._consumer = consumer
        self._tel = telemetry if telemetry is not None else Telemetry.default()
        super().__init__()

    async def _consumer_for(self, subject: str) -> tuple[str, bool, float]:
        """Return (consumer name, ephemeral?, ack_wait) for a subscription to ``subject``."""
        js, stream = self._js, self._stream
        if self._consumer is None:
            try:
                if self._settings.ordered:
                    consumer_config = _ordered_config(subject, self._settings, None)
                else:
                    config = {"ack_policy": "explicit", **self._settings.consumer_config}
                    config.setdefault("filter_subject", subject)
                    consumer_config = ConsumerConfig(**config)
                info: ConsumerInfo = await js.add_consumer(stream, consumer_config)
            except NotFoundError as exc:
                raise SubscribeError(f"cannot subscribe: stream {stream!r} not found") from exc
            except APIError as exc:
                raise SubscribeError(
                    f"cannot create a consumer on stream {stream!r}: {exc.description}"
                ) from exc
            except TypeError as exc:
                raise SubscribeError(f"invalid consumer_config: {exc}") from exc
            return info.name, True, info.config.ack_wait or 30.0
        try:
            info = await js.consumer_info(stream, self._consumer)
        except NotFoundError as exc:
            what = "stream" if exc.err_code == 10059 else "consumer"
            raise SubscribeError(
                f"cannot subscribe: {what} not found ({stream!r}/{self._consumer!r}); "
                "create it with ensure_consumer()"
            ) from exc
        if info.config.deliver_subject:
            raise SubscribeError(
                f"consumer {self._consumer!r} is a push consumer; goflux needs a pull consumer"
            )
        filters = _filters(info)
        if not filters:
            stream_info = await js.stream_info(stream)
            filters = list(stream_info.config.subjects or [])
        outside = [f for f in filters if not covers(subject, f)]
        if outside:
            raise SubscribeError(
                f"consumer {self._consumer!r} delivers {outside}, outside the subscribed "
                f"subject {subject!r}"
            )
        return info.name, False, info.config.ack_wait or 30.0

    async def start(self, subject: str, handler: Handler[T]) -> JetStreamSubscription[T]:
        """Start consuming ``subject``; return once the first pull request is at the server.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: The subscriber is closed, the stream or consumer does not
                exist, the consumer does not fit, or the connection failed.
        """
        validate_pattern(subject)
        self._refuse_if_closed(subject)
        consumer, ephemeral, ack_wait = await self._consumer_for(subject)
        subscription = JetStreamSubscription(
            self._js,
            self._codec,
            handler,
            stream=self._stream,
            pattern=subject,
            consumer=consumer,
            ephemeral=ephemeral,
            ack_wait=ack_wait,
            settings=self._settings,
            telemetry=self._tel,
        )
        try:
            await subscription._start()
        except (nats.errors.Error, TimeoutError) as exc:
            await subscription._finish(exc)
            raise SubscribeError(f"cannot subscribe to {subject!r}: {exc}") from exc
        self._track(subscription, subscription._done)
        return subscription

    async def subscribe(self, subject: str, handler: Handler[T]) -> None:
        """Consume until cancelled or the subscriber is closed, then drain.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: The subscription could not start, or failed.
        """
        await self._run(await self.start(subject, handler))
