"""What becomes of a JetStream message whose payload does not decode.

It is dead-lettered (if a dead letter is configured) and terminated, never redelivered
in a loop; a subscription and a one-shot read (``fetch``/``next``) share this.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeAlias

from goflux._compose.deadletter import DeadLetter, is_dead_letter, refused_for_good
from goflux._errors import DecodeError
from goflux._message import Message
from goflux.transports.jetstream._acker import JetStreamAcker

__all__ = ("DEAD_LETTER_RETRY_DELAY", "Settle", "reject")

logger = logging.getLogger("goflux.transports.jetstream")

DEAD_LETTER_RETRY_DELAY = 5.0  # seconds before an undecodable message is dead-lettered again

Settle: TypeAlias = Callable[[JetStreamAcker, Awaitable[None]], Awaitable[None]]
"""Sends a settlement of a message (and copes when that fails)."""


async def reject(
    letter: Message[bytes],
    acker: JetStreamAcker,
    exc: DecodeError,
    *,
    dead_letter: DeadLetter | None,
    acknowledged: bool,
    settle: Settle,
) -> None:
    """Give up an undecodable message: dead-letter it (if configured), then terminate it.

    A dead letter that cannot be published keeps the message: it is naked with a
    delay and dead-lettered on a later delivery (without acknowledgement, as in
    ordered mode, it cannot be redelivered: it is lost and logged). One the server
    refuses for good (too large even in compact form) is logged and the message
    terminated without it.
    """
    outcome = "terminated" if acknowledged else "skipped"
    if dead_letter is not None and is_dead_letter(letter, dead_letter.subject):
        outcome += " (it is itself a dead letter: not dead-lettered again)"
    elif dead_letter is not None:
        try:
            await dead_letter.send(letter, exc, "undecodable")
            outcome = f"dead-lettered to {dead_letter.subject!r} and {outcome}"
        except Exception as failure:
            if not acknowledged:
                outcome = f"LOST: the dead letter failed ({failure})"
            elif refused_for_good(failure):
                outcome = f"terminated WITHOUT a dead letter, refused for good ({failure})"
            else:
                logger.error(
                    "undecodable message %s on %r could not be dead-lettered (%s); "
                    "it is kept and tried again in %ss",
                    acker.stream_sequence,
                    letter.subject,
                    failure,
                    DEAD_LETTER_RETRY_DELAY,
                    exc_info=exc,
                )
                await settle(acker, acker.nak(DEAD_LETTER_RETRY_DELAY))
                return
    logger.error(
        "undecodable message %s on %r %s: %s",
        acker.stream_sequence,
        letter.subject,
        outcome,
        exc,
        exc_info=exc,
    )
    if acknowledged:
        await settle(acker, acker.term(f"goflux: undecodable payload: {exc}"[:200]))
    else:
        acker.release()
