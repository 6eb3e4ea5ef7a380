"""``goflux.consumer.pending``: a JetStream consumer's backlog, as one subscription sees it.

Each delivery's ``$JS.ACK`` reply subject carries the consumer's ``num_pending`` as of
that delivery: reading it costs nothing while messages flow. When nothing is delivered
(the handlers are stuck, ``max_in_flight`` is full, or nothing was published yet) that
count goes stale while the backlog at the server may grow, so a :class:`Backlog` asks
the server (a ``CONSUMER.INFO`` request) when no delivery and no answer came for
:data:`PENDING_REFRESH` seconds. A collection then reads a value at most about that old.

The requests run on the subscription's event loop, driven by a timer there, and only
while a metric reader collects: the gauge's callback (:meth:`Backlog.read`, on the
reader's thread) notes the collection and, the first time, arms the timer with
``call_soon_threadsafe``; it never blocks and touches no asyncio object otherwise.
When no reader collected for a while (:data:`_IDLE_INTERVALS` intervals, or three of
the gaps between the last two collections if longer) the timer stops, so a gauge
nobody reads costs nothing; the next collection arms it again. The first tick of an
armed timer comes after a random part of the interval, so that subscriptions started
together do not ask the server all at once.

The request is guarded like goflux's other JetStream API requests: a refusal of it
(no permission for ``$JS.API.CONSUMER.INFO``) fails it at once; the subscription then
stops asking for good and says so once, at warning level, and the gauge reports the
count of the last delivery. A request that fails otherwise (no answer in time, the
consumer is gone) changes nothing but the interval, which doubles after each failure
up to :data:`_MAX_BACKOFF` seconds (logged at debug level).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Callable
from typing import Final

from nats.js import JetStreamContext

from goflux._errors import PermissionDenied
from goflux.transports._natspy import connection
from goflux.transports.jetstream._acker import ack_tokens
from goflux.transports.jetstream._api import api_guard, api_subjects

__all__ = ("PENDING_REFRESH", "Backlog")

PENDING_REFRESH: Final = 5.0
"""Seconds without a delivery (or an answer) after which the backlog is asked of the server
again, while a metric reader collects."""

_IDLE_INTERVALS: Final = 4  # intervals without a collection before the timer stops
_MAX_BACKOFF: Final = 60.0  # the longest interval after failed requests

logger = logging.getLogger("goflux.transports.jetstream")


class Backlog:
    """The ``num_pending`` of one subscription's consumer; :meth:`read` is its gauge source.

    The subscription sets :attr:`reply` and :attr:`delivered_at` at each delivery (two
    attribute stores) and calls :meth:`close` when it stops.

    Args:
        js: The JetStream context to ask the server with.
        stream: The consumer's stream.
        consumer: The consumer's current name (an ordered consumer's changes).
        interval: Seconds between refreshes while idle (:data:`PENDING_REFRESH`).

    Attributes:
        reply: The ``$JS.ACK`` reply subject of the last message delivered (None before one).
        delivered_at: When it was delivered (the loop's clock).
    """

    __slots__ = (
        "_armed",
        "_closed",
        "_consumer",
        "_delay",
        "_denied",
        "_gap",
        "_interval",
        "_js",
        "_loop",
        "_read_at",
        "_refreshed",
        "_refreshed_at",
        "_stream",
        "_task",
        "_timer",
        "delivered_at",
        "reply",
    )

    def __init__(
        self,
        js: JetStreamContext,
        *,
        stream: str,
        consumer: Callable[[], str],
        interval: float | None = None,
    ) -> None:
        self._js = js
        self._loop = asyncio.get_running_loop()
        self._stream = stream
        self._consumer = consumer
        self._interval = PENDING_REFRESH if interval is None else interval
        self._delay = self._interval  # grows after failed requests
        self.reply: str | None = None
        self.delivered_at = -math.inf
        # The server's answer and the last reply when it was asked (it stands until a
        # delivery brings a newer count): one tuple, replaced whole across threads.
        self._refreshed: tuple[str | None, int] | None = None
        self._refreshed_at = -math.inf  # when that request was sent (the loop's clock)
        # Collections, written by the reader's thread (time.monotonic()).
        self._read_at = -math.inf
        self._gap = 0.0  # between the last two collections
        self._armed = False  # the timer runs, or is about to be armed
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._denied = False
        self._closed = False

    def read(self) -> int | None:
        """The backlog now (None: not known yet); arms the refresh timer if it is idle.

        Called by the metric reader, in any thread; it never blocks.
        """
        now = time.monotonic()
        if self._read_at > -math.inf:
            self._gap = now - self._read_at
        self._read_at = now
        if not self._armed and not self._closed and not self._denied:
            self._armed = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to ask
                self._loop.call_soon_threadsafe(self._arm)
        reply = self.reply
        refreshed = self._refreshed
        if refreshed is not None and refreshed[0] is reply:
            return refreshed[1]
        if reply is None:
            return None
        try:
            tokens, offset = ack_tokens(reply)
            return int(tokens[offset + 6])
        except (ValueError, IndexError):
            return None

    def _arm(self) -> None:
        """Start the timer (on the loop); its first tick after a random part of the interval."""
        if self._timer is not None or self._closed or self._denied:
            return
        self._armed = True
        jitter = random.random() * self._interval  # spreads the load; no secret
        self._timer = self._loop.call_later(jitter, self._tick)

    def _tick(self) -> None:
        """Ask the server if nothing fresh came for an interval; then schedule the next tick."""
        self._timer = None
        if self._closed or self._denied:
            return
        read_at = self._read_at
        if time.monotonic() - read_at > max(_IDLE_INTERVALS * self._interval, 3 * self._gap):
            self._armed = False  # nobody collects: stop until the next collection
            if self._read_at != read_at:  # unless one came meanwhile (it saw the timer armed)
                self._arm()
            return
        now = self._loop.time()
        if (
            now - self.delivered_at >= self._interval
            and now - self._refreshed_at >= self._delay
            and (self._task is None or self._task.done())
            and connection(self._js).is_connected  # not closed, draining or reconnecting
        ):
            self._refreshed_at = now
            self._task = self._loop.create_task(
                self._ask(), name=f"goflux-jetstream-{self._consumer()}-backlog"
            )
        due = max(
            self.delivered_at + self._interval,
            self._refreshed_at + self._delay,
            now + self._interval / 10,
        )
        self._timer = self._loop.call_at(due, self._tick)

    async def _ask(self) -> None:
        reply = self.reply
        consumer = self._consumer()
        what = f"reading the backlog of consumer {consumer!r} on {self._stream!r}"
        try:
            with api_guard(self._js, what, f"CONSUMER.INFO.{self._stream}.{consumer}"):
                info = await self._js.consumer_info(self._stream, consumer)
        except PermissionDenied:
            self._denied = True
            self._stop_timer()
            [subject, *_] = api_subjects(self._js, f"CONSUMER.INFO.{self._stream}.{consumer}")
            logger.warning(
                "goflux.consumer.pending of consumer %r on stream %r is no longer refreshed "
                "while nothing is delivered: the server refused the consumer info request "
                "(no permission to publish to %s); it reports the count of the last delivery",
                consumer,
                self._stream,
                subject,
            )
            return
        except Exception as exc:  # noqa: BLE001 - the subscription goes on regardless
            self._delay = min(self._delay * 2, max(_MAX_BACKOFF, self._interval))
            logger.debug(
                "could not read the backlog of consumer %r on %r (next try in %.3gs): %s",
                consumer,
                self._stream,
                self._delay,
                exc,
            )
            return
        self._delay = self._interval
        if info.num_pending is not None and not self._closed:
            self._refreshed = (reply, info.num_pending)

    def _stop_timer(self) -> None:
        timer = self._timer
        self._timer = None
        if timer is not None:
            timer.cancel()

    def close(self) -> None:
        """Stop refreshing (the subscription stops); a request under way is cancelled.

        Called on the subscription's loop.
        """
        self._closed = True
        self._stop_timer()
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
