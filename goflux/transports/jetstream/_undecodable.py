"""What becomes of a JetStream message that can never be processed.

Its payload does not decode, or its handler raised :class:`~goflux.NonRetryable`: it
is dead-lettered (if a dead letter is configured) and terminated, never redelivered
in a loop; a subscription and a one-shot read (``fetch``/``next``) share this.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeAlias

from goflux._compose.deadletter import (
    DEAD_LETTER_RETRY_DELAY,
    DeadLetter,
    DeadLetterReason,
    is_dead_letter,
    refused_for_good,
)
from goflux._message import Message
from goflux.transports.jetstream._acker import JetStreamAcker

__all__ = ("Settle", "reject")

logger = logging.getLogger("goflux.transports.jetstream")


Settle: TypeAlias = Callable[[JetStreamAcker, Awaitable[None]], Awaitable[None]]
"""Sends a settlement of a message (and copes when that fails)."""


_WHAT: dict[DeadLetterReason, str] = {  # the message, in log lines
    "undecodable": "undecodable message",
    "non_retryable": "non-retryable message",
    "max_attempts": "message out of attempts",
    "crashed_worker": "poison message",
}
_WHY: dict[DeadLetterReason, str] = {  # the term's reason
    "undecodable": "undecodable payload",
    "non_retryable": "non-retryable failure",
    "max_attempts": "out of attempts",
    "crashed_worker": "crashed its worker",
}


async def reject(
    letter: Message[object],
    acker: JetStreamAcker,
    exc: Exception,
    *,
    dead_letter: DeadLetter | None,
    acknowledged: bool,
    settle: Settle,
    reason: DeadLetterReason = "undecodable",
) -> None:
    """Give up a message: dead-letter it (if configured), then terminate it.

    ``reason`` says why (an undecodable payload, or a handler's non-retryable failure).
    A dead letter that cannot be published keeps the message: it is naked with a
    delay and dead-lettered on a later delivery (without acknowledgement, as in
    ordered mode, it cannot be redelivered: it is lost and logged). One the server
    refuses for good (too large even in compact form) is logged and the message
    terminated without it.
    """
    outcome = "terminated" if acknowledged else "skipped"
    quarantined = "quarantined, " if reason == "crashed_worker" else ""
    if dead_letter is not None and is_dead_letter(letter, dead_letter.subject):
        outcome += " (it is itself a dead letter: not dead-lettered again)"
    elif dead_letter is not None:
        try:
            await dead_letter.send(letter, exc, reason)
            outcome = f"dead-lettered to {dead_letter.subject!r} and {outcome}"
        except Exception as failure:
            if not acknowledged:
                outcome = f"LOST: the dead letter failed ({failure})"
            elif refused_for_good(failure):
                outcome = f"terminated WITHOUT a dead letter, refused for good ({failure})"
            else:
                logger.error(
                    "%s %s on %r could not be dead-lettered (%s); "
                    "it is kept and tried again in %ss",
                    _WHAT[reason],
                    acker.stream_sequence,
                    letter.subject,
                    failure,
                    DEAD_LETTER_RETRY_DELAY,
                    exc_info=exc,
                )
                await settle(acker, acker.nak(DEAD_LETTER_RETRY_DELAY))
                return
    logger.error(
        "%s %s on %r %s%s: %s",
        _WHAT[reason],
        acker.stream_sequence,
        letter.subject,
        quarantined,
        outcome,
        exc,
        exc_info=exc,
    )
    if acknowledged:
        await settle(acker, acker.term(f"goflux: {_WHY[reason]}: {exc}"[:200]))
    else:
        acker.release()
