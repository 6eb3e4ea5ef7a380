"""``goflux.consumer.pending``: a JetStream consumer's backlog, as one subscription sees it.

Each delivery's ``$JS.ACK`` reply subject carries the consumer's ``num_pending`` as of
that delivery: reading it costs nothing while messages flow. When nothing is delivered
(the handlers are stuck, ``max_in_flight`` is full, or nothing was published yet) that
count goes stale while the backlog at the server may grow, so a :class:`Backlog` asks
the server (a ``CONSUMER.INFO`` request) when a collection finds that no delivery came
for :data:`PENDING_REFRESH` seconds, at most once per that interval, and once when the
subscription starts so that a fresh subscription has a value.

The gauge's callback runs on the metric reader's thread: it only reads and, when a
refresh is due, hands it to the subscription's event loop (``call_soon_threadsafe``);
the request runs there, as a task the subscription ends when it finishes. A failed
request changes nothing (logged at debug level): the last value stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Final

from nats.js import JetStreamContext

from goflux.transports.jetstream._acker import ack_tokens

__all__ = ("PENDING_REFRESH", "Backlog")

PENDING_REFRESH: Final = 5.0
"""Seconds without a delivery after which a collection has the backlog asked of the server
(and the least time between two such requests of one subscription)."""

logger = logging.getLogger("goflux.transports.jetstream")


class Backlog:
    """The ``num_pending`` of one subscription's consumer; :meth:`read` is its gauge source.

    Args:
        js: The JetStream context to ask the server with.
        stream: The consumer's stream.
        consumer: The consumer's current name (an ordered consumer's changes).
        last_reply: The reply subject of the last message delivered (None before one).
        interval: :data:`PENDING_REFRESH`.
    """

    __slots__ = (
        "_asked_at",
        "_closed",
        "_consumer",
        "_interval",
        "_js",
        "_last_reply",
        "_loop",
        "_refreshed",
        "_seen",
        "_seen_at",
        "_stream",
        "_task",
    )

    def __init__(
        self,
        js: JetStreamContext,
        *,
        stream: str,
        consumer: Callable[[], str],
        last_reply: Callable[[], str | None],
        interval: float = PENDING_REFRESH,
    ) -> None:
        self._js = js
        self._loop = asyncio.get_running_loop()
        self._stream = stream
        self._consumer = consumer
        self._last_reply = last_reply
        self._interval = interval
        now = time.monotonic()
        self._seen: str | None = None  # the last reply a collection saw, and since when
        self._seen_at = now
        self._asked_at = now
        # The server's answer and the last reply when it was asked (it stands until a
        # delivery brings a newer count): one tuple, replaced whole across threads.
        self._refreshed: tuple[str | None, int] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def read(self) -> int | None:
        """The backlog now (None: not known yet); schedule a refresh if it is stale.

        Called by the metric reader, in any thread; it never blocks.
        """
        reply = self._last_reply()
        now = time.monotonic()
        if reply is not self._seen:
            self._seen, self._seen_at = reply, now
        elif (
            now - self._seen_at >= self._interval
            and now - self._asked_at >= self._interval
            and not self._closed
        ):
            self._asked_at = now
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to ask
                self._loop.call_soon_threadsafe(self.refresh)
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

    def refresh(self) -> None:
        """Ask the server for the backlog now, unless a request is under way (on the loop)."""
        if self._closed or (self._task is not None and not self._task.done()):
            return
        self._asked_at = time.monotonic()
        self._task = self._loop.create_task(
            self._ask(), name=f"goflux-jetstream-{self._consumer()}-backlog"
        )

    async def _ask(self) -> None:
        reply = self._last_reply()
        consumer = self._consumer()
        try:
            info = await self._js.consumer_info(self._stream, consumer)
        except Exception as exc:  # noqa: BLE001 - the subscription goes on regardless
            logger.debug(
                "could not read the backlog of consumer %r on %r: %s", consumer, self._stream, exc
            )
            return
        if info.num_pending is not None and not self._closed:
            self._refreshed = (reply, info.num_pending)

    def close(self) -> None:
        """Stop refreshing (the subscription finished); a request under way is cancelled."""
        self._closed = True
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
