"""The pull engine: keeps pull requests open on a consumer, within an in-flight bound.

It never asks for more than its window (:mod:`._window`: ``max_in_flight``, or fewer
for large messages or slow handlers) minus what is outstanding (received, not yet
settled) minus what open requests may still bring, and asks again once a quarter of
a batch of room is free; where the consumer's ``max_ack_pending`` holds that bound at the
server, the window is one batch more, so that an ack frees room for the next
message at once. It reads the server's status messages (100 heartbeat, 408/409
request ended, 409 consumer deleted or request refused, 400 bad request, 423 pinned to
another client, 503 no responders), watches
for silence and reconnects, and starts over on a new inbox when requests may have been
lost. Each inbox is a generation: requests still open on a retired inbox stop counting
(the server drops them), and what still arrives there is handed back. A drain stops
asking, and what its open requests still bring goes to ``deliver`` like the rest, to be
worked off: handed back, it would stay pending at the server, ready for the next
client to pull, where "drained" promises nothing left.

In a consumer's priority group (:mod:`._priority`), each request names the group (and
the subscription's thresholds, and its pin id once the server pinned it); a 423 says
another client is pinned now: the pin is forgotten and the requests start over
without it. A graceful stop gives the pin up, so another client takes over at once.

Taken messages go to ``deliver``; a condition that ends the subscription goes to
``fail``. What to do with each delivery and how to recover is the consumer's call
(:mod:`._consumers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import nats.errors
from nats.aio.subscription import Subscription as NatsSubscription
from nats.js import JetStreamContext

from goflux._errors import PermissionDenied, SubscribeError
from goflux.transports._natspy import (
    DirectDelivery,
    api_prefix,
    connection,
    drain_within,
    end_direct,
    flush,
    received_headers,
    subscribe_direct,
)
from goflux.transports._refusals import Refusal, refusals
from goflux.transports.jetstream._acker import hand_back
from goflux.transports.jetstream._api import api_subjects
from goflux.transports.jetstream._consumers import (
    Admission,
    Cause,
    PulledConsumer,
    PullLimits,
    Recovery,
)
from goflux.transports.jetstream._priority import Priority, release_pin
from goflux.transports.jetstream._status import (
    BAD_REQUEST,
    CONFLICT,
    HEARTBEAT,
    NO_RESPONDERS,
    PIN_MISMATCH,
    REQUEST_TIMEOUT,
)
from goflux.transports.jetstream._window import PullWindow

__all__ = ("PullEngine",)

logger = logging.getLogger("goflux.transports.jetstream")

_NS = 1_000_000_000
_TAKE = Admission.TAKE  # (read once: an enum member's lookup is not cheap)
# Most seconds between two looks at the connection: a reconnect is noticed this soon
# (nats-py offers no signal for it that goflux could subscribe to on the user's client).
_MAX_TICK = 0.5


def _loop_clock(loop: asyncio.AbstractEventLoop) -> Callable[[], float] | None:
    """``loop.time``, or None where it is asyncio's own: ``time.monotonic()`` then.

    asyncio's own loops read ``time.monotonic()`` in a Python method of their own: the
    clock called directly costs about 280 CPU instructions a call less (it is read
    for every delivery). The bound method is looked at, not the loop's class: a
    ``time`` replaced on the loop (fake-time test tools), another loop's own (uvloop)
    or a subclass's is kept, as the keep-alive and the watchdog compare with it.
    ``time.monotonic`` is looked up at each call, so that a patched one is read too.
    """
    clock = loop.time
    if getattr(clock, "__func__", None) is asyncio.BaseEventLoop.time:
        return None
    return clock


class PullEngine:
    """Pulls messages from one consumer for one subscription.

    Args:
        js: The JetStream context (its connection carries the requests).
        consumer: The consumer to pull from; it decides on admission and recovery.
        limits: Pull request sizes.
        max_in_flight: Most messages outstanding plus requested.
        workers: Handlers that may run at a time (the window covers their pace).
        paced: Whether the handlers' pace is reported to :attr:`window`.
        deliver: Takes each admitted message's subject, reply, payload and headers (a
            mapping, or a header block to read when needed: see
            :data:`~goflux.transports._natspy.Take`), with
            its arrival (event-loop time).
        fail: Ends the subscription with a failure.
        priority: Its place in the consumer's priority group, if it pulls in one.
        handed_back: Told of each message nak'd on arrival, never delivered (one that
            came after the engine closed, or on a retired inbox): its reply subject,
            and whether the nak was sent (if not, the server redelivers it after
            ``ack_wait``).
    """

    # (Slots: its attributes are read per message, and cheaper so than from a dict.)
    __slots__ = (
        "_bound",
        "_clock",
        "_deliver",
        "_fail",
        "_generation",
        "_handed_back",
        "_inbox",
        "_js",
        "_last_activity",
        "_limits",
        "_loop",
        "_max_in_flight",
        "_nc",
        "_priority",
        "_pull_scheduled",
        "_reconnects",
        "_recovering",
        "_refusals",
        "_refused",
        "_requested",
        "_selective",
        "_stopping",
        "_sub",
        "_taken",
        "_taken_bytes",
        "_taking",
        "_unlisten",
        "_watchdog",
        "consumer",
        "outstanding",
        "window",
    )

    def __init__(
        self,
        js: JetStreamContext,
        consumer: PulledConsumer,
        limits: PullLimits,
        *,
        max_in_flight: int,
        workers: int = 1,
        paced: bool = True,
        deliver: Callable[[str, str, bytes, bytes | dict[str, str] | None, float], None],
        fail: Callable[[BaseException], Awaitable[None]],
        priority: Priority | None = None,
        handed_back: Callable[[str, bool], None] | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._clock = _loop_clock(self._loop)
        self._handed_back = handed_back
        self._js = js
        self._nc = connection(js)
        self.consumer = consumer
        self._selective = consumer.selective
        self._limits = limits
        # Messages outstanding plus requested at most. Where the consumer's own
        # max_ack_pending holds the in-flight bound, one more batch may be asked for:
        # the server then sends a message as soon as an ack frees room in it, rather
        # than after the next pull request's round trip.
        bounded = consumer.acknowledges and limits.server_bounded
        self._max_in_flight = max_in_flight + limits.batch if bounded else max_in_flight
        self._bound = max_in_flight  # what the subscription promises to hold at most
        # What may be outstanding plus requested now: _max_in_flight, or fewer where the
        # messages are large or the handlers slow; a pull is sent once its threshold is free.
        self.window = PullWindow(
            self._max_in_flight, limits.batch, workers, paced=paced, acked=consumer.acknowledges
        )
        self._taken = 0  # messages taken since the window was last sized, and their bytes
        self._taken_bytes = 0
        self._deliver = deliver
        self._fail = fail
        self._priority = priority
        self._generation = 0
        self._inbox = ""
        self._sub: NatsSubscription | None = None
        self._requested = 0  # messages asked for by pull requests still open
        self.outstanding = 0  # messages delivered and not yet released
        self._pull_scheduled = False
        self._stopping = False  # no pull request any more (a drain, or closed)
        self._taking = True  # deliveries go to ``deliver`` (until closed)
        self._recovering = False
        self._watchdog: asyncio.Task[None] | None = None
        self._last_activity = 0.0
        self._reconnects = 0
        self._refusals = refusals(self._nc)
        self._refused: PermissionDenied | None = None
        self._unlisten: list[Callable[[], None]] = []

    # -------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Open the inbox and send the first pull request; return once it is at the server.

        Raises:
            PermissionDenied: The server refused the inbox or the pull request.
            nats.errors.Error: The connection failed.
            TimeoutError: The server did not answer the flush.
        """
        self._watch_refusals()
        await self._open_inbox()
        self._reconnects = self._nc.stats["reconnects"]
        self._last_activity = self._loop.time()
        await self.pull()
        await flush(self._nc)
        if self._refused is not None:  # the server said so before answering the flush
            raise self._refused
        self._watchdog = self._loop.create_task(
            self._watch(), name=f"goflux-jetstream-{self.consumer.name}-watchdog"
        )

    async def stop_pulling(self, timeout: float) -> None:
        """Stop asking: remove interest, and take what the open requests still bring.

        No request is sent any more; the inbox is drained (unsubscribed, then what
        the server sent before it read the unsubscribe is read). What arrives
        meanwhile answers requests sent within the in-flight bound: it goes to
        ``deliver`` like any delivery, for the subscription to work off. Handed back
        (nak'd) instead, each would stay pending at the server until another client
        pulls: after a clean drain of every subscriber, pending with nobody to take
        it. Interest goes before any nak the subscription sends at its deadline: a
        nak sent while a pull request is still open would be redelivered into it,
        to an inbox nobody reads any more, and come back only after ack_wait. A
        pinned subscription keeps its pin until :meth:`give_up_pin`, once what it
        received is worked off.
        """
        self._stopping = True
        if self._sub is None:
            return
        try:
            await drain_within(
                self._sub, max(timeout, 0.1), functools.partial(end_direct, self._nc, self._sub)
            )
        except (nats.errors.Error, TimeoutError):
            logger.warning("could not drain the pull inbox of %r", self.consumer.name)
        end_direct(self._nc, self._sub)

    async def give_up_pin(self) -> None:
        """A pinned subscription hands its pin to a standby (at the end of a drain).

        Not before: a standby pinned while this one still works off what it received
        would run beside it, out of order.
        """
        if self._priority is not None and not self._nc.is_closed:
            consumer = self.consumer
            await release_pin(self._js, consumer.stream, consumer.name, self._priority)

    def stop_taking(self) -> None:
        """Hand back (nak) what arrives from now on: the subscription takes nothing more."""
        self._stopping = True
        self._taking = False

    async def close(self, *, failed: bool) -> None:
        """Stop for good: end the watchdog, remove the consumer, drop the inbox if failed.

        What still arrives is handed back. The inbox goes last. A failure read from a
        status message is handled in a task of the inbox's
        (:meth:`DirectDelivery.later`), which may be the one running this;
        unsubscribing does not cancel it.
        """
        self._stopping = True
        self._taking = False
        for unlisten in self._unlisten:
            unlisten()
        watchdog = self._watchdog
        if watchdog is not None and watchdog is not asyncio.current_task():
            watchdog.cancel()
        await self.consumer.remove()
        if self._sub is not None and failed:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
            end_direct(self._nc, self._sub)

    def _watch_refusals(self) -> None:
        """Fail when the server refuses the inbox, a pull request, an ack or the login.

        Refused, each would otherwise look like silence: pulls that never bring
        anything, or acks that never land and bring every message back.
        """
        registry = self._refusals
        self._unlisten = [
            registry.listen_prefix("publish", "", self._refusal, accept=self._concerns),
            registry.listen_prefix("subscribe", "", self._refusal, accept=self._concerns),
            registry.listen("connect", "", self._refusal),
        ]

    def _concerns(self, refusal: Refusal) -> bool:
        """Whether ``refusal`` is of this subscription's inbox, pull requests or acks."""
        if refusal.operation == "subscribe":
            return refusal.names(self._inbox)
        return self._refused_acks(refusal) or any(
            refusal.names(subject) for subject in self._next_subjects()
        )

    def _refused_acks(self, refusal: Refusal) -> bool:
        consumer = self.consumer
        subject, ack, mine = refusal.subject, "$JS.ACK.", f".{consumer.stream}.{consumer.name}."
        if refusal.folded:
            ack, mine = ack.lower(), mine.lower()
        return subject.startswith(ack) and mine in subject

    def _next_subjects(self) -> tuple[str, ...]:
        next_subject = self.consumer.next_subject
        prefix = api_prefix(self._js)
        if not next_subject.startswith(prefix + "."):
            return (next_subject,)
        return api_subjects(self._js, next_subject[len(prefix) + 1 :])

    def _refusal(self, refusal: Refusal) -> None:
        consumer = self.consumer
        if refusal.operation == "connect":
            what = f"consumer {consumer.name!r}: the server refused the credentials"
        elif refusal.operation == "subscribe":
            what = f"consumer {consumer.name!r}: subscribing to the pull inbox {self._inbox!r}"
        elif self._refused_acks(refusal):
            what = f"acknowledging messages of consumer {consumer.name!r} on {consumer.stream!r}"
        else:
            what = f"pull requests to consumer {consumer.name!r} on {consumer.stream!r}"
        if self._refused is not None:
            return
        self._refused = refusal.error(what)
        if self._watchdog is not None and not self._stopping:  # running: end it now
            logger.error("%s", self._refused)
            self._loop.create_task(self._fail_with(self._refused))

    async def _fail_with(self, error: BaseException) -> None:
        await self._fail(error)

    async def _open_inbox(self) -> NatsSubscription | None:
        """Receive on a new inbox; return the previous subscription (to retire).

        Each message is taken where nats-py's reader parsed it (:class:`DirectDelivery`):
        no queue and no task of nats-py's between the socket and the workers.
        """
        previous = self._sub
        self._generation += 1
        self._inbox = self._nc.new_inbox()
        delivery = DirectDelivery(functools.partial(self._take, self._generation))
        self._sub = await subscribe_direct(self._nc, self._inbox, delivery)
        return previous

    async def _retire(self, subscription: NatsSubscription) -> None:
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await drain_within(
                subscription,
                self._limits.expires,
                functools.partial(end_direct, self._nc, subscription),
            )
        end_direct(self._nc, subscription)

    async def _closed(self) -> bool:
        """Fail the subscription if the connection was closed for good."""
        if not self._nc.is_closed:
            return False
        await self._fail(nats.errors.ConnectionClosedError())
        return True

    # ----------------------------------------------------------- pull control

    def release(self, count: int = 1) -> None:
        """``count`` delivered messages were settled: their room is free; pull if enough is."""
        self.outstanding -= count
        window = self.window
        if (
            not self._pull_scheduled
            and not self._stopping
            and window.size - self.outstanding - self._requested >= window.threshold
        ):
            self._pull_scheduled = True
            self._loop.create_task(self.pull())

    async def pull(self) -> None:
        """Ask for more messages if the in-flight bound leaves room."""
        self._pull_scheduled = False
        if self._stopping or await self._closed() or not self._nc.is_connected:
            return  # while disconnected, the reconnect reset pulls afresh
        window = self.window
        if self._taken:  # (the window follows the size of what came since the last pull)
            window.sized(self._taken, self._taken_bytes)
            self._taken = self._taken_bytes = 0
        credit = window.size - self.outstanding - self._requested
        if credit < window.threshold and not (self._requested == 0 and credit > 0):
            return
        count = min(credit, self._limits.batch)
        self._requested += count
        request: dict[str, Any] = {
            "batch": count,
            "expires": int(self._limits.expires * _NS),
            "idle_heartbeat": int(self._limits.heartbeat * _NS),
        }
        if self._priority is not None:
            request.update(self._priority.fields())
        try:
            await self._nc.publish(
                self.consumer.next_subject, json.dumps(request).encode(), reply=self._inbox
            )
        except nats.errors.Error as exc:
            self._requested -= count
            if not await self._closed():
                logger.warning("pull request for %r failed: %s", self.consumer.name, exc)

    async def _reset(self, why: str) -> None:
        """Start over on a new inbox: requests may be lost (reconnect, restart, silence).

        The old inbox is drained away: the server drops its open requests and what
        is already on its way is handed back, so the in-flight bound holds.
        """
        logger.info("re-pulling for %r: %s", self.consumer.name, why)
        self._last_activity = self._loop.time()
        try:
            previous = await self._open_inbox()
        except nats.errors.Error as exc:
            await self._closed()
            logger.warning("could not open a new pull inbox for %r: %s", self.consumer.name, exc)
            return
        self._requested = 0
        if previous is not None:
            self._loop.create_task(self._retire(previous))
        await self._recover("lost", why)

    async def _recover(self, cause: Cause, why: str) -> None:
        """Let the consumer recover from ``cause``; then pull, wait, or fail as it says."""
        if self._recovering or self._stopping:
            return  # one recovery at a time; the watchdog pulls if it is left waiting
        self._recovering = True
        try:
            outcome = await self.consumer.recover(cause, why)
        finally:
            self._recovering = False
        if isinstance(outcome, SubscribeError):
            await self._fail(outcome)
        elif outcome is Recovery.PULL:
            await self.pull()

    # -------------------------------------------------------------- receiving

    async def _hand_back(self, reply: str) -> None:
        sent = await hand_back(self._nc, reply)
        if self._handed_back is not None:
            self._handed_back(reply, sent)

    def _take(
        self,
        generation: int,
        subject: str,
        reply: str,
        data: bytes,
        headers: bytes | dict[str, str] | None,
        delivery: DirectDelivery,
    ) -> None:
        """Take one message from the inbox of ``generation``, in the connection's read loop.

        A delivery goes to the subscription at once; status messages (other than
        heartbeats) and hand-backs need I/O and run as tasks a drain waits for.
        Nothing here may raise into nats-py's reader: what cannot be taken is logged.
        """
        try:
            consumer = self.consumer
            if generation != self._generation:
                if reply and consumer.acknowledges:
                    delivery.later(self._hand_back(reply))  # from a retired inbox
                return
            clock = self._clock
            now = time.monotonic() if clock is None else clock()
            self._last_activity = now
            if not reply:
                status = received_headers(headers)
                if status is None or status.get("Status") != HEARTBEAT:
                    delivery.later(self._on_status(status or {}))
                return  # an idle heartbeat: the pull request is alive
            if self._requested > 0:
                self._requested -= 1
            if self._priority is not None:
                self._priority.observe(received_headers(headers))
            if not self._taking:  # closed: the subscription has finished
                if consumer.acknowledges:
                    delivery.later(self._hand_back(reply))
                return
            if self._selective:
                admission = consumer.admit(reply)
                if admission is not _TAKE:
                    self._not_admitted(admission, delivery)
                    return
            if self.outstanding >= self._bound and self._max_in_flight > self._bound:
                self._server_bound_lost()
            self._deliver(subject, reply, data, headers, now)
            self.outstanding += 1
            self._taken += 1
            self._taken_bytes += len(data)
        except Exception:
            logger.exception(
                "could not take a message on %r for consumer %r",
                subject,
                self.consumer.name,
            )

    def _not_admitted(self, admission: Admission, delivery: DirectDelivery) -> None:
        """A selective consumer (ordered) did not take a delivery; on a gap, recover."""
        if admission is Admission.GAP:
            self._requested = 0
            delivery.later(self._recover("lost", "a delivery went missing"))

    def _server_bound_lost(self) -> None:
        """A delivery came with ``max_in_flight`` already held: ask within the bound again.

        The server was to hold the bound (its ``max_ack_pending``); if it let more
        through (the consumer was changed meanwhile), the requests still open bring
        at most one batch more, once, and no request asks beyond the bound again.
        """
        self._max_in_flight = self._bound
        self.window.lower_ceiling(self._bound)
        logger.warning(
            "consumer %r delivered more than max_in_flight (%d) unsettled messages; "
            "its max_ack_pending no longer holds the bound, pulls stay within it",
            self.consumer.name,
            self._bound,
        )

    async def _on_status(self, headers: Mapping[str, str]) -> None:
        status = headers.get("Status")
        if status == HEARTBEAT:  # idle heartbeat: the pull request is alive
            return
        description = str(headers.get("Description", ""))
        if status == REQUEST_TIMEOUT or (status == CONFLICT and "Nats-Pending-Messages" in headers):
            # A pull request ended; its headers say how much of it was unfilled.
            try:
                unfilled = int(headers.get("Nats-Pending-Messages", "0"))
            except ValueError:
                unfilled = self._requested
            self._requested = max(0, self._requested - unfilled)
            await self.pull()
            return
        if status == CONFLICT and "Consumer Deleted" in description:
            self._requested = 0
            await self._recover("deleted", "consumer deleted")
            return
        if (status == CONFLICT and "Exceeded MaxRequest" in description) or status == BAD_REQUEST:
            # The consumer refuses requests this big or long, or these requests (no
            # priority group, or one it does not have): retrying cannot help.
            await self._fail(
                SubscribeError(
                    f"consumer {self.consumer.name!r} refuses our pull requests: {description}"
                )
            )
            return
        if status == PIN_MISMATCH and self._priority is not None:
            # Another client is pinned now: our pin id is stale, and so are the
            # requests carrying it. Start over without it (and wait as a standby).
            self._priority.unpinned()
            await self._reset(f"another client is pinned ({description})")
            return
        # 503 (no JetStream responder: restarting, or the consumer is gone), 409
        # leadership change and the like: the requests are gone; the watchdog pulls
        # again. A 503 may also mean the consumer was deleted: the consumer finds out.
        reason = description.split("\n", maxsplit=1)[0]
        logger.info("pull status %s %s for %r", status, reason, self.consumer.name)
        self._requested = 0
        if status == NO_RESPONDERS:
            self._loop.create_task(self._recover("unavailable", "no responders"))

    async def _watch(self) -> None:
        """Pull again after a reconnect, when nothing is requested, or after silence."""
        heartbeat = self._limits.heartbeat
        tick = min(heartbeat, _MAX_TICK)
        while not self._stopping:
            await asyncio.sleep(tick)
            if await self._closed():
                return
            now = self._loop.time()
            reconnects = self._nc.stats["reconnects"]
            if reconnects != self._reconnects:
                self._reconnects = reconnects
                await self._reset("reconnected")
            elif self._requested == 0:
                await self.pull()
            elif now - self._last_activity > 2 * heartbeat:
                await self._reset(f"no heartbeat for {now - self._last_activity:.1f}s")
