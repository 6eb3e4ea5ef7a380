"""Settle a message by its handler's outcome: return acks, raise naks."""

from __future__ import annotations

from typing import TypeVar

from goflux._interfaces import GenericMiddleware, Handler
from goflux._message import Message

__all__ = ("auto_ack",)

T = TypeVar("T")


def auto_ack() -> GenericMiddleware:
    """Ack when the handler returns, nak (for redelivery at once) when it raises.

    A message the handler settled itself is left alone, and the handler's error is
    re-raised after the nak. Messages on transports without acknowledgement (in-process
    channel, core NATS) pass through untouched. Useful with a subscriber in manual-ack
    mode; for delays, attempt limits and dead letters use :func:`retry_ack`.

    Raises:
        SettlementError: From the wrapped handler: the ack or nak could not be sent.
    """

    def middleware(handler: Handler[T]) -> Handler[T]:
        async def handle(message: Message[T]) -> None:
            if not message.acknowledgeable:
                await handler(message)
                return
            try:
                await handler(message)
            except Exception:
                if message.settled is None:
                    await message.nak()
                raise
            if message.settled is None:
                await message.ack()

        return handle

    return middleware
