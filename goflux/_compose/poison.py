"""A worker's guard against poison messages: messages that crash the process handling them.

``goflux run --workers N`` installs one :class:`PoisonGuard` in each worker process
(:func:`install_guard`); a transport that can redeliver (JetStream) finds it with
:func:`current_guard` when a subscription starts. Outside ``goflux run`` there is
none, and the subscription's loop is the plain one: nothing is paid per message.

With the guard, each handler loop holds an in-flight slot (:mod:`.inflight`). A
redelivered message is looked up in the supervisor's crash record (:mod:`.crashes`):

- never in flight at a crash: handled as usual;
- in flight at fewer crashes than ``quarantine_after``: a *suspect*, handled alone
  (:meth:`PoisonGuard.alone`): the process starts no other tracked message until it
  is done, and waits for those running to finish, so that if the process dies again
  no bystander is counted with it;
- in flight at ``quarantine_after`` crashes or more: quarantined by the transport
  (dead-lettered if it has a dead letter, terminated) before any handler sees it.

Running alone is bounded (:data:`ALONE_FOR`): a suspect whose handler waits for
another message of the same process cannot stall it for longer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a subscription imports this module: what only a worker needs waits
    from goflux._compose.crashes import CrashRecord
    from goflux._compose.inflight import InFlight

__all__ = ("ALONE_FOR", "PoisonGuard", "current_guard", "install_guard")

ALONE_FOR = 10.0
"""Longest time (seconds) a suspect keeps the process's other handlers from starting,
waiting for those running included."""

_guard: PoisonGuard | None = None


def current_guard() -> PoisonGuard | None:
    """The guard of this process (None outside a ``goflux run`` worker)."""
    return _guard


def install_guard(guard: PoisonGuard | None) -> None:
    """Make ``guard`` this process's guard (None: remove it).

    Subscriptions started from now on use it.
    """
    global _guard  # noqa: PLW0603 - one guard per process, as one supervisor per worker
    _guard = guard


class PoisonGuard:
    """What a worker's subscriptions consult: its in-flight slots, the crash record, the gate.

    Args:
        in_flight: The worker's in-flight file.
        record: The supervisor's crash record.
        alone_for: See :data:`ALONE_FOR`.

    Attributes:
        gate: Set while a suspect runs alone: a loop awaits :meth:`passage` before it
            starts a message.
        waiting: A suspect waits for the running handlers to finish: a loop calls
            :meth:`left` when its handler returns.
    """

    def __init__(
        self, in_flight: InFlight, record: CrashRecord, *, alone_for: float = ALONE_FOR
    ) -> None:
        self.in_flight = in_flight
        self.record = record
        self.gate: asyncio.Future[None] | None = None
        self.waiting = False
        self._alone_for = alone_for
        self._quiet: asyncio.Future[None] | None = None
        self._turns: asyncio.Lock | None = None

    async def passage(self) -> None:
        """Return once no suspect runs alone."""
        while (gate := self.gate) is not None:
            await asyncio.shield(gate)

    def left(self) -> None:
        """A handler returned while a suspect waits: let it go if none runs any more."""
        quiet = self._quiet
        if quiet is not None and not quiet.done() and not self.in_flight.busy():
            quiet.set_result(None)

    @contextlib.asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        """Run the body while no other tracked handler of this process runs.

        Closes the gate (no loop starts a message), waits for the running handlers to
        return, then runs the body. After :data:`ALONE_FOR` seconds in all, the gate
        opens again even if the body still runs, and a wait for running handlers ends.
        Suspects take turns.
        """
        if self._turns is None:
            self._turns = asyncio.Lock()
        async with self._turns:
            loop = asyncio.get_running_loop()
            gate = self.gate = loop.create_future()
            reopen = loop.call_later(self._alone_for, self._open, gate)
            try:
                if self.in_flight.busy():
                    self._quiet = loop.create_future()
                    self.waiting = True
                    try:
                        await asyncio.wait((self._quiet,), timeout=self._alone_for)
                    finally:
                        self.waiting = False
                        self._quiet = None
                yield
            finally:
                reopen.cancel()
                self._open(gate)

    def _open(self, gate: asyncio.Future[None]) -> None:
        """Open ``gate`` (once) and end a wait for running handlers."""
        if self.gate is gate:
            self.gate = None
        if not gate.done():
            gate.set_result(None)
        quiet = self._quiet
        if quiet is not None and not quiet.done():
            quiet.set_result(None)
