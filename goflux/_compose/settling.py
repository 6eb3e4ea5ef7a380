"""Auto-ack settlement for code that hands messages out: ack on success, nak on failure.

A failure that retrying cannot change (:class:`~goflux.NonRetryable`) is dead-lettered
(if a dead letter is given) and terminated instead; any other is naked with a delay
that grows with the delivery count.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from goflux._backoff import Backoff, redelivery_delay
from goflux._compose.deadletter import (
    DEAD_LETTER_RETRY_DELAY,
    DeadLetter,
    is_dead_letter,
    refused_for_good,
)
from goflux._errors import SettlementError, is_non_retryable
from goflux._message import Message

__all__ = ("failure_delay", "settle", "settle_all", "settle_failure")

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


def failure_delay(message: Message[object], backoff: Backoff | None) -> float | None:
    """The nak delay for ``message`` after its handler failed (see ``redelivery_delay``)."""
    delivery = message.delivery
    return redelivery_delay(backoff, 1 if delivery is None else delivery.num_delivered)


async def settle_failure(
    message: Message[object],
    error: Exception,
    *,
    backoff: Backoff | None,
    dead_letter: DeadLetter | None,
) -> None:
    """Settle ``message``, left unsettled by a handler that raised ``error``.

    A :class:`~goflux.NonRetryable` failure (or one it caused) is dead-lettered, if
    ``dead_letter`` is given, and terminated; a dead letter that cannot be published
    now keeps the message (naked for :data:`DEAD_LETTER_RETRY_DELAY` seconds), unless
    the server refuses it for good. Any other failure is naked with
    :func:`failure_delay`. A message settled already is left alone.

    Raises:
        SettlementError: The settlement could not be sent.
    """
    if message.settled is not None:
        return
    if not is_non_retryable(error):
        await message.nak(failure_delay(message, backoff))
        return
    if dead_letter is not None and not is_dead_letter(message, dead_letter.subject):
        try:
            await dead_letter.send(message, error, "non_retryable")
        except Exception as failure:  # noqa: BLE001 - any failure to publish keeps the message
            if not refused_for_good(failure):
                logger.error(
                    "non-retryable message on %r could not be dead-lettered (%s); "
                    "it is kept and tried again in %ss",
                    message.subject,
                    failure,
                    DEAD_LETTER_RETRY_DELAY,
                )
                await message.nak(DEAD_LETTER_RETRY_DELAY)
                return
            logger.error(
                "non-retryable message on %r: its dead letter was refused for good (%s)",
                message.subject,
                failure,
            )
    await message.term(f"goflux: non-retryable failure: {error}"[:200])
