"""How much a pull engine asks for: fitted to the messages' size and the handlers' pace.

A subscription never holds more than ``max_in_flight`` messages (outstanding plus
requested). Within that ceiling the window is smaller where asking for all of it
would only pile messages up:

- **Size.** Large messages requested by the hundred sit in the server's buffer for
  the client and in nats-py's read buffer, whose handling grows with what it holds.
  The window holds at most ``BYTE_BUDGET`` of messages of the average size seen.
- **Pace.** Slow handlers need few messages ahead of them: the window covers about
  ``LEAD`` seconds of their work (at least two messages per worker). Messages taken
  beyond that would only wait, their ``ack_wait`` running, while competing
  subscribers of the same consumer go without.

A pull request goes out once a quarter of the window is free; where messages are
not acked (an ordered consumer) and their size holds the window, once half is.

Before the first message is handled the pace is unknown, and the window starts at
``FIRST`` messages (or the ceiling, if lower); the first handled message fits it. A
message stream's subscription is not paced: its hand-off waits on the stream's
consumer (back-pressure, which may settle in batches), not on a handler.
"""

from __future__ import annotations

__all__ = ("BYTE_BUDGET", "FIRST", "LEAD", "PullWindow")

BYTE_BUDGET = 4 * 1024 * 1024  # most bytes of messages outstanding plus requested
LEAD = 1.0  # seconds of handler work the window covers
FIRST = 64  # the window before any handler's pace is known


class PullWindow:
    """The messages a pull engine may have outstanding plus requested now.

    Args:
        ceiling: The most it may ever be (the subscription's in-flight bound, or one
            batch more where the server holds that bound).
        batch: The most one pull request asks for.
        workers: Handlers that may run at a time.
        paced: Whether handlers' times are reported (:meth:`paced`); if not (a message
            stream, whose hand-off waits on the stream's consumer), the window is
            sized by the messages' size alone.
        acked: Whether the messages are acked (room frees as acks go out); if not,
            it frees as each is handled.

    Attributes:
        size: Messages outstanding plus requested at most, now.
        threshold: Free room that makes a new pull request worth sending (a
            quarter of a batch, or of the window where it is smaller; half, for
            messages not acked whose size holds the window).
    """

    __slots__ = (
        "_acked",
        "_batch",
        "_by_pace",
        "_by_size",
        "_ceiling",
        "_message_size",
        "_seconds",
        "_workers",
        "size",
        "threshold",
    )

    def __init__(
        self, ceiling: int, batch: int, workers: int, *, paced: bool = True, acked: bool = True
    ) -> None:
        self._acked = acked
        self._ceiling = ceiling
        self._batch = batch
        self._workers = workers
        self._by_size = ceiling
        self._by_pace = max(FIRST, 2 * workers) if paced else ceiling
        self._message_size = 0.0  # bytes, smoothed (0: none seen yet)
        self._seconds = 0.0  # one message's handling, smoothed (0: none timed yet)
        self.size = ceiling
        self.threshold = 1
        self._fit()

    @property
    def ceiling(self) -> int:
        """The most the window may be."""
        return self._ceiling

    @property
    def held_by_pace(self) -> bool:
        """Whether the handlers' pace keeps the window below its ceiling and size bound.

        While it does, a subscription times its handlers more often, so that a slow
        start (a cold first message) does not keep the window small for long.
        """
        return self._by_pace < min(self._ceiling, self._by_size)

    def lower_ceiling(self, ceiling: int) -> None:
        """Never ask for more than ``ceiling`` from now on."""
        self._ceiling = min(self._ceiling, ceiling)
        self._fit()

    def sized(self, count: int, total: int) -> None:
        """``count`` messages of ``total`` bytes were taken: fit the window to their size."""
        size = total / count
        previous = self._message_size
        self._message_size = size = size if not previous else (previous + size) / 2
        self._by_size = max(1, int(BYTE_BUDGET // size)) if size > 0 else self._ceiling
        self._fit()

    def paced(self, seconds: float) -> None:
        """A handler took ``seconds`` for one message: fit the window to that pace."""
        previous = self._seconds
        self._seconds = seconds = seconds if not previous else (previous + seconds) / 2
        workers = self._workers
        ahead = int(workers * LEAD / seconds) if seconds > 0 else self._ceiling
        self._by_pace = max(2 * workers, ahead)
        self._fit()

    def _fit(self) -> None:
        by_size = self._by_size
        self.size = size = max(1, min(self._ceiling, by_size, self._by_pace))
        # A pull request goes out once a quarter of a batch is free, not half: the
        # server then always has one open while the messages already here are worked
        # off (with half, two competing subscribers' servers sat idle between their
        # requests: 0.79-0.93 of raw nats-py's callback pull on 100 B messages, about
        # 1.0-1.1 with a quarter). The bound is the same; requests are smaller and more.
        # Messages not acked free their room one by one as they are handled; where
        # large ones hold the window (64 of 64 KB), a quarter of it is a pull of 16
        # every few milliseconds. Half: 1.02-1.15 of the quarter's throughput on the
        # ordered 64 KB shapes, in 7 of 7 paired runs. (Acked ones gained nothing from
        # half: 0.95-1.08 of the quarter, median 0.98, in 8 paired runs.)
        held_by_size = by_size < min(self._ceiling, self._by_pace)
        share = 2 if held_by_size and not self._acked else 4
        self.threshold = max(1, min(self._batch, size) // share)
