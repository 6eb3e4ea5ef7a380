"""Poison messages under ``goflux run``: naming what a dead worker held, and quarantine.

A worker's subscription keeps each running message's ``$JS.ACK`` reply subject in its
in-flight slot (:mod:`goflux._compose.inflight`). After a crash the supervisor names
those messages with :func:`crash_key` (stream, consumer and stream sequence: the same
for every delivery) and counts them in its crash record; a worker looks a redelivered
message up there by the same key. One that reached the record's ``quarantine_after``
is given up by :func:`quarantine` before any handler sees it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from goflux._compose.deadletter import DeadLetter
from goflux._errors import PoisonMessage
from goflux._message import Message
from goflux.transports.jetstream._acker import JetStreamAcker, ack_tokens
from goflux.transports.jetstream._undecodable import Settle, reject

if TYPE_CHECKING:
    from goflux._compose.crashes import CrashEntry

__all__ = ("CrashKey", "crash_key", "quarantine")


class CrashKey:
    """A message as the crash record names it, from one of its reply subjects.

    Attributes:
        key: ``"<stream> <consumer> <stream sequence>"``, the same for every delivery.
        description: ``"message 7 of stream 'ORDERS' (consumer 'payments')"``.
    """

    __slots__ = ("description", "key")

    def __init__(self, stream: str, consumer: str, sequence: int) -> None:
        self.key = f"{stream} {consumer} {sequence}"
        self.description = f"message {sequence} of stream {stream!r} (consumer {consumer!r})"


def crash_key(reply: str) -> CrashKey | None:
    """The crash record's name of the message ``reply`` acknowledges.

    None when ``reply`` is not a JetStream ack subject.
    """
    try:
        tokens, offset = ack_tokens(reply)
        return CrashKey(tokens[offset], tokens[offset + 1], int(tokens[offset + 3]))
    except (ValueError, IndexError):
        return None


async def quarantine(
    letter: Message[bytes],
    acker: JetStreamAcker,
    name: CrashKey,
    entry: CrashEntry,
    *,
    dead_letter: DeadLetter | None,
    settle: Settle,
) -> None:
    """Give up a message that crashed its workers: dead-letter it (if configured), terminate it.

    The dead letter's reason is ``crashed_worker`` and its error a
    :class:`~goflux.PoisonMessage`; the rest is :func:`._undecodable.reject`'s (a dead
    letter that cannot be published now keeps the message, naked with a delay and
    quarantined again on its next delivery: it still never reaches a handler).
    """
    error = PoisonMessage(
        f"{name.description} was being handled each time its worker process died, "
        f"{entry.crashes} times (last: {entry.last})"
    )
    await reject(
        letter,
        acker,
        error,
        dead_letter=dead_letter,
        acknowledged=True,
        settle=settle,
        reason="crashed_worker",
    )
