"""Settle a message by its handler's outcome: return acks, raise naks."""

from __future__ import annotations

from typing import TypeVar

from goflux._backoff import REDELIVERY_BACKOFF, BackoffLike, as_backoff
from goflux._compose.deadletter import DeadLetter
from goflux._compose.settling import settle_failure
from goflux._interfaces import GenericMiddleware, Handler
from goflux._message import Message

__all__ = ("auto_ack",)

T = TypeVar("T")


def auto_ack(
    redelivery_backoff: BackoffLike | None = REDELIVERY_BACKOFF,
    *,
    dead_letter: DeadLetter | None = None,
) -> GenericMiddleware:
    """Ack when the handler returns, nak (for a delayed redelivery) when it raises.

    The nak's delay grows with the message's delivery count (``redelivery_backoff``,
    by default 0.5 s doubling per delivery, at most 60 s; None redelivers at once). A
    :class:`~goflux.NonRetryable` failure is dead-lettered (with ``dead_letter``) and
    terminated instead, as a subscriber's own auto-ack does.

    A message the handler settled itself is left alone, and the handler's error is
    re-raised after the nak. Messages on transports without acknowledgement (in-process
    channel, core NATS) pass through untouched. Useful with a subscriber in manual-ack
    mode; for delays, attempt limits and dead letters use :func:`retry_ack`.

    Raises:
        SettlementError: From the wrapped handler: the ack or nak could not be sent.
    """
    backoff = None if redelivery_backoff is None else as_backoff(redelivery_backoff)

    def middleware(handler: Handler[T]) -> Handler[T]:
        async def handle(message: Message[T]) -> None:
            if not message.acknowledgeable:
                await handler(message)
                return
            try:
                await handler(message)
            except Exception as exc:
                await settle_failure(message, exc, backoff=backoff, dead_letter=dead_letter)
                raise
            if message.settled is None:
                await message.ack()

        return handle

    return middleware
