"""Auto-ack settlement for code that hands messages out: ack on success, nak on failure."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from goflux._errors import SettlementError
from goflux._message import Message

__all__ = ("settle", "settle_all")

logger = logging.getLogger("goflux._compose.settling")


async def settle(message: Message[object], *, ack: bool, delay: float | None = None) -> bool:
    """Ack (or nak, with ``delay``) ``message`` unless it is settled already.

    Returns False if the send failed; a failed send is logged, and the broker
    redelivers the message after its ack_wait.
    """
    if message.settled is not None:
        return True
    try:
        await (message.ack() if ack else message.nak(delay))
    except SettlementError as exc:
        logger.warning("could not settle message on %r: %s", message.subject, exc)
        return False
    return True


async def settle_all(messages: Iterable[Message[object]], *, ack: bool) -> int:
    """Ack (or nak) every unsettled message of ``messages``; return how many sends failed."""
    failures = 0
    for message in messages:
        if not await settle(message, ack=ack):
            failures += 1
    return failures
