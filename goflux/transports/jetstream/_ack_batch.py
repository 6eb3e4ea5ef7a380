"""A subscription's plain acks of one event-loop step, written into nats-py's buffer as one block.

Handlers that return without waiting on anything run one after another inside one
step of the event loop, and nothing reaches the socket before that step ends: nats-py's
writer task runs only between steps. So an auto-ack need not be a write of its own.
The first auto-ack of a step appends one growing block to nats-py's pending buffer;
each ack of the step adds its PUB command to that block at once (so the ack is in
nats-py's buffer, where a close or a reconnect still sends it, the moment the message
reads acknowledged). Right after the step, :meth:`AckBatch.flush` counts the acks
and gives their in-flight room back to the pull engine in one call. A consumer
without acks (ordered) gives its room back the same way. A step is cut short after a
pull's worth of messages: the worker flushes and lets the loop run once, so a long
backlog's acks and the next pull go out while the rest is handled.

A worker about to wait for its next message says so (``deferred``): it calls
:meth:`AckBatch.flush` itself before it waits, so no callback is scheduled for the
step. With one message a step (large messages, a slow trickle) that callback cost
about 9,000 CPU instructions a message.

Should the block leave nats-py's buffer meanwhile (the writer ran, or the connection
changed state), or should anything be queued after it (a handler's own publish, a
pull request), the next ack starts a new one: an ack never overtakes what was queued
before it, such as the effect its handler published. Where no block can be started (the
connection is not connected, or its buffer is full), :meth:`AckBatch.ack` returns
False and the caller sends the ack with ``nc.publish``, which handles each case.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.client import Client

from goflux._message import Message, acked_by_transport
from goflux.transports._natspy import open_command_block
from goflux.transports.jetstream._acker import JetStreamAcker, Ledger

__all__ = ("AckBatch",)


class AckBatch:
    """Writes a step's plain acks as one block; counts them and frees their room after it.

    Args:
        nc: The connection the subscription's messages arrive on.
        ledger: The subscription's ledger: counts the acks, gives the room back.
    """

    __slots__ = (
        "_acked",
        "_block",
        "_freed",
        "_in",
        "_ledger",
        "_loop",
        "_nc",
        "_scheduled",
        "_status",
        "deferred",
    )

    def __init__(self, nc: Client, ledger: Ledger) -> None:
        self._nc = nc
        self._ledger = ledger
        self._loop = asyncio.get_running_loop()
        self._block: bytearray | None = None  # this step's PUB commands, in nats-py's buffer
        self._in: list[Any] | None = None  # the buffer (list) the block was appended to
        self._status: object = None  # the connection's status when the block was started
        self._acked = 0  # acks written in this step
        self._freed = 0  # room given back in this step (acks included)
        self._scheduled = False  # flush() runs after this step
        self.deferred = False  # a worker calls flush() before it waits (nothing scheduled)

    def ack(self, acker: JetStreamAcker, message: Message[Any], deferred: bool = False) -> bool:
        """Write the plain ack of ``message`` into nats-py's buffer; False if not done.

        False (nothing done) where the subscription confirms its acks or no block can
        be written now (see the module's docstring). Otherwise ``message`` (unsettled,
        settled by ``acker``) reads acknowledged from now on, and its in-flight room is
        given back to the pull engine with the step's other acks. ``deferred``: the
        caller calls :meth:`flush` before it next waits, in this step.
        """
        if self._ledger.confirm_all:
            return False
        nc = self._nc
        block = self._block
        pending: list[Any] = nc._pending  # (blocks of ours among its bytes)
        if (
            block is None
            or pending is not self._in
            or pending[-1] is not block  # (something was queued after it: keep the order)
            or nc._status != self._status
        ):
            block = self._start_block()
            if block is None:
                return False
        command = b"PUB %s 4\r\n+ACK\r\n" % acker.reply.encode()
        block += command
        nc._pending_data_size += len(command)
        self._acked += 1
        if not acker.released:  # (a confirmed ack given up may have given it back)
            acker.released = True
            self._freed += 1
        if not self._scheduled:
            self._after_step(deferred)
        acked_by_transport(message)
        return True

    def free(self, acker: JetStreamAcker, deferred: bool = False) -> None:
        """Give ``acker``'s room back with this step's acks (a message without acks).

        ``deferred``: the caller calls :meth:`flush` before it next waits, in this step.
        """
        if acker.released:
            return
        acker.released = True
        self._freed += 1
        if not self._scheduled:
            self._after_step(deferred)

    def _after_step(self, deferred: bool) -> None:
        """See that :meth:`flush` runs once this step is over (none is scheduled yet)."""
        if deferred:
            self.deferred = True
        else:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def _start_block(self) -> bytearray | None:
        nc = self._nc
        block = open_command_block(nc)
        if block is None:
            self._block = None
            return None
        self._block, self._in, self._status = block, nc._pending, nc._status
        return block

    def flush(self) -> None:
        """After the step: count the acks written and give the step's room back.

        The next ack starts a new block. Runs right after the step that wrote them;
        a subscription that finishes calls it too (a no-op if nothing is pending).
        """
        self._scheduled = self.deferred = False
        self._block = self._in = None
        acked, freed = self._acked, self._freed
        self._acked = self._freed = 0
        if acked:
            stats = self._nc.stats
            stats["out_msgs"] += acked
            stats["out_bytes"] += 4 * acked
            self._ledger.record("ack", acked)
        if freed:
            self._ledger.release(freed)
