"""Messages a JetStream subscription handed to a message stream and holds until settled.

A stream's subscription does not run a handler per message: it hands each message to
the stream's buffer (:meth:`goflux._compose.feed.StreamHandler.hand_off`) and keeps it here,
with its acker, until the stream's consumer settles it. Meanwhile the message keeps
its in-flight room in the pull engine (settling through the acker gives it back), the
keep-alive sends in-progress signals for it, and a drain waits for it until its
deadline and then hands it back (nak). One dict entry per message: no task, future or
closure (a single observer, shared by every message, learns of each settlement).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from goflux._errors import SettlementError
from goflux._message import Message, Outcome, observe_settlement
from goflux.transports.jetstream._acker import JetStreamAcker

__all__ = ("HeldMessages",)

logger = logging.getLogger("goflux.transports.jetstream")


class HeldMessages:
    """The unsettled messages a subscription handed to a stream, with their ackers.

    It is the subscription's :class:`~goflux._compose.feed.Holding`: the stream reads how many
    are held and, when it closes during a drain, hands them back at once.
    """

    __slots__ = ("_given_up", "_messages", "_observer", "_waiter")

    def __init__(self) -> None:
        self._messages: dict[Message[Any], JetStreamAcker] = {}
        self._waiter: asyncio.Future[None] | None = None  # a drain, waiting for none held
        self._given_up = False  # handed back: a drain waits no longer
        self._observer = self._settled  # one bound method for every message

    def __len__(self) -> int:
        return len(self._messages)

    def add(self, message: Message[Any], acker: JetStreamAcker) -> None:
        """Hold ``message`` until it is settled (it must be unsettled now)."""
        self._messages[message] = acker
        observe_settlement(message, self._observer)

    def _settled(self, message: Message[Any], outcome: Outcome | None) -> None:
        if outcome is None:
            return  # the settlement did not reach the server: still held
        messages = self._messages
        if messages.pop(message, None) is not None and not messages:
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def stale(self, now: float, age: float) -> list[JetStreamAcker]:
        """The ackers of held messages the server last heard of more than ``age`` ago."""
        return [
            acker
            for acker in self._messages.values()
            if not acker.released and now - acker.last_progress > age
        ]

    async def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds until none is held (or they were handed back)."""
        if not self._messages or self._given_up or timeout <= 0:
            return
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            pass
        finally:
            self._waiter = None

    async def hand_back(self) -> None:
        """Nak every held message now (oldest first), so the server redelivers it at once.

        A drain waiting in :meth:`wait` goes on at once: a message handed off after
        this is handed back by the drain, not waited for. A nak that cannot be sent is
        logged, and the message's room is given back all the same (the server
        redelivers it after ``ack_wait``).
        """
        self._given_up = True
        self._wake()
        held = list(self._messages.items())
        self._messages.clear()
        for message, acker in held:
            if message.settled is not None:
                continue
            observe_settlement(message, None)
            try:
                await message.nak()
            except SettlementError as exc:
                logger.warning(
                    "could not hand back message %s (%s); the server redelivers it after ack_wait",
                    acker.stream_sequence,
                    exc,
                )
                acker.release()
