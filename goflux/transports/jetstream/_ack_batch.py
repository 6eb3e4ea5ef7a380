"""A subscription's plain acks of one event-loop step, written as one block.

Handlers that return without waiting on anything run one after another inside one
step of the event loop, and nothing reaches the socket before that step ends: nats-py's
writer task runs only between steps. So an auto-ack need not be a write of its own.
:class:`AckBatch` queues each one (the message reads acknowledged at once, as it
would once its PUB sat in nats-py's buffer) and, right after the step, appends the
step's acks to nats-py's buffer as one block of PUB commands, counts them, and gives
their in-flight room back to the pull engine in one call. A consumer without acks
(ordered) gives its room back the same way.

Nothing is held past the step: the flush is scheduled with the first ack of a step,
and a handler that waits on I/O ends the step. Where the block cannot be queued (the
connection is down or draining, or its buffer is full), each ack goes through
``nc.publish`` instead, which buffers it while reconnecting; one that fails is
logged and counted as a failed ack, and the server redelivers the message after
``ack_wait``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import nats.errors
from nats.aio.client import Client

from goflux._message import Message, acked_by_transport
from goflux.transports._natspy import write_commands
from goflux.transports.jetstream._acker import JetStreamAcker, Ledger

__all__ = ("AckBatch",)

logger = logging.getLogger("goflux.transports.jetstream")

_ACK = b"+ACK"


class AckBatch:
    """Queues plain acks and freed room, and sends and gives them back once per loop step.

    Args:
        nc: The connection the subscription's messages arrive on.
        ledger: The subscription's ledger: counts the acks, gives the room back.
    """

    __slots__ = ("_freed", "_ledger", "_loop", "_nc", "_replies", "_sending")

    def __init__(self, nc: Client, ledger: Ledger) -> None:
        self._nc = nc
        self._ledger = ledger
        self._loop = asyncio.get_running_loop()
        self._replies: list[str] = []  # the reply subjects of the acks queued
        self._freed = 0  # room given back in this step (acks included)
        self._sending: set[asyncio.Task[None]] = set()  # acks sent one by one

    def ack(self, acker: JetStreamAcker, message: Message[Any]) -> bool:
        """Queue the plain ack of ``message``; False (nothing done) if it must be confirmed.

        ``message`` (unsettled, settled by ``acker``) reads acknowledged from now on;
        its in-flight room is marked given back at once and returned to the pull
        engine with the step's other acks.
        """
        if self._ledger.confirm_all:
            return False
        if not self._freed:
            self._loop.call_soon(self.flush)
        self._replies.append(acker.subject)
        acker.released = True
        self._freed += 1
        acked_by_transport(message)
        return True

    def free(self, acker: JetStreamAcker) -> None:
        """Give ``acker``'s room back with this step's acks (a message without acks)."""
        if acker.released:
            return
        if not self._freed:
            self._loop.call_soon(self.flush)
        acker.released = True
        self._freed += 1

    def flush(self) -> None:
        """Send the acks queued, count them and give the room back (a no-op if none).

        Runs right after the step that queued them; a drain calls it too.
        """
        freed = self._freed
        if not freed:
            return
        replies = self._replies
        self._replies = []
        self._freed = 0
        ledger = self._ledger
        if replies:
            block = b"".join([b"PUB %s 4\r\n+ACK\r\n" % reply.encode() for reply in replies])
            if write_commands(self._nc, block, len(replies), 4 * len(replies)):
                ledger.record("ack", len(replies))
            else:  # down, draining or a full buffer: nats-py's publish handles each case
                task = self._loop.create_task(self._send_each(replies))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)
        ledger.release(freed)

    async def _send_each(self, replies: list[str]) -> None:
        ledger = self._ledger
        for reply in replies:
            try:
                await self._nc.publish(reply, _ACK)
            except nats.errors.Error as exc:
                ledger.record_failed("ack")
                logger.warning(
                    "could not ack message (%s); the server redelivers it after ack_wait", exc
                )
            else:
                ledger.record("ack")

    async def settled(self) -> None:
        """Flush, then wait until acks sent one by one are sent (or failed)."""
        self.flush()
        while self._sending:
            await asyncio.wait(set(self._sending))
