"""One task per event loop that times out running handlers and sends their heartbeats.

A timer per message (``asyncio.timeout``) costs about 6 µs; registering a run in a set
that a single watchdog task scans a few times per timeout costs well under 1 µs. The
price is precision: a handler is cancelled within one tick (a tenth of the timeout, at
most one second) after its deadline.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import weakref
from typing import Final

from goflux._errors import AlreadySettled, SettlementError
from goflux._message import Message

__all__ = ("Run", "Watchdog")

logger = logging.getLogger("goflux.middleware")

_MIN_TICK: Final = 0.005
_MAX_TICK: Final = 1.0


class Run:
    """One handler call under watch: its task, deadline and heartbeat state."""

    __slots__ = ("cancelling", "deadline", "expired", "message", "next_beat", "sending", "task")

    def __init__(
        self, task: asyncio.Task[object], deadline: float, message: Message[object] | None
    ) -> None:
        self.task = task
        self.cancelling = task.cancelling()  # cancellations requested before ours
        self.deadline = deadline
        self.message = message  # None: no heartbeats
        self.next_beat = 0.0
        self.expired = False
        self.sending: asyncio.Task[None] | None = None

    def outcome_of_cancellation(self) -> bool:
        """After a CancelledError: True if it was our timeout alone (undo our cancel)."""
        return self.expired and self.task.uncancel() <= self.cancelling

    async def finish(self) -> None:
        """Let a heartbeat already on its way arrive (never cancel a publish midway)."""
        sending = self.sending
        if sending is not None and not sending.done():
            await asyncio.shield(sending)


class _LoopWatch:
    """The runs of one event loop and the task watching them."""

    __slots__ = ("runs", "task")

    def __init__(self) -> None:
        self.runs: set[Run] = set()
        self.task: asyncio.Task[None] | None = None


class Watchdog:
    """Watches the runs of one ``timeout`` middleware, with one task per event loop."""

    __slots__ = ("_heartbeat", "_loops", "_seconds", "_tick")

    def __init__(self, seconds: float, heartbeat: float | None) -> None:
        self._seconds = seconds
        self._heartbeat = heartbeat
        shortest = min(seconds, heartbeat) if heartbeat is not None else seconds
        self._tick = min(max(shortest / 10, _MIN_TICK), _MAX_TICK)
        # Per loop, so that loops in other threads neither share nor keep each other's runs.
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWatch] = (
            weakref.WeakKeyDictionary()
        )

    def start(self, message: Message[object]) -> Run:
        """Watch the current task's handler call for ``message``."""
        task = asyncio.current_task()
        assert task is not None
        loop = task.get_loop()
        now = loop.time()
        beats = self._heartbeat is not None and message.acknowledgeable
        run = Run(task, now + self._seconds, message if beats else None)
        if beats:
            assert self._heartbeat is not None
            run.next_beat = now + self._heartbeat
        watch = self._loops.get(loop)
        if watch is None:
            watch = self._loops[loop] = _LoopWatch()
        watch.runs.add(run)
        if watch.task is None or watch.task.done():
            # A fresh context: the watcher must not keep the first handler's alive.
            watch.task = loop.create_task(self._watch(loop, watch), context=contextvars.Context())
        return run

    def stop(self, run: Run) -> None:
        """Stop watching ``run`` (call it before awaiting anything else)."""
        watch = self._loops.get(run.task.get_loop())
        if watch is not None:
            watch.runs.discard(run)

    async def _watch(self, loop: asyncio.AbstractEventLoop, watch: _LoopWatch) -> None:
        runs = watch.runs
        while runs:
            await asyncio.sleep(self._tick)
            now = loop.time()
            for run in list(runs):
                if not run.expired and now >= run.deadline:
                    run.expired = True
                    run.task.cancel()
                elif run.message is not None and now >= run.next_beat:
                    self._beat(run, now, loop)

    def _beat(self, run: Run, now: float, loop: asyncio.AbstractEventLoop) -> None:
        assert self._heartbeat is not None
        run.next_beat = now + self._heartbeat
        message = run.message
        if message is None or message.settled is not None:
            return
        if run.sending is None or run.sending.done():
            run.sending = loop.create_task(_signal(message))


async def _signal(message: Message[object]) -> None:
    """Send one ``in_progress``; a settled message or a failed send is no error here."""
    try:
        await message.in_progress()
    except AlreadySettled:  # settled while the signal was on its way
        return
    except SettlementError as exc:  # the connection failed: the next beat tries again
        logger.warning("in_progress for the message on %r failed: %s", message.subject, exc)
