"""Settlement of one JetStream message, and the delivery facts its reply subject carries."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Protocol

import nats.errors
from nats.aio.client import Client

from goflux.errors import SettlementError
from goflux.message import Delivery, Outcome

__all__ = ("JetStreamAcker", "SettlementOwner", "ack_tokens")

_ACK = b"+ACK"
_NAK = b"-NAK"
_TERM = b"+TERM"
_PROGRESS = b"+WPI"


class SettlementOwner(Protocol):
    """What an acker reports to: the subscription that received the message."""

    def on_settled(self, acker: JetStreamAcker, outcome: Outcome | None) -> None:
        """A message was settled (``outcome``), or ``None`` for an in-progress signal."""


def ack_tokens(reply: str) -> tuple[list[str], int]:
    """Split a ``$JS.ACK`` reply subject; return its tokens and the stream name's index.

    The index is 2 in the original form and 4 when a domain and an account hash
    follow ``ACK``; the consumer, delivery count, stream sequence, consumer sequence,
    timestamp (ns) and pending count follow the stream name in that order.

    Raises:
        ValueError: ``reply`` is not a JetStream ack subject.
    """
    tokens = reply.split(".")
    if len(tokens) == 9:
        return tokens, 2
    if len(tokens) >= 11:
        return tokens, 4
    raise ValueError(f"not a JetStream ack subject: {reply!r}")


class JetStreamAcker:
    """Acknowledges one message through its ``$JS.ACK`` reply subject.

    The reply subject carries the delivery facts: ``$JS.ACK.<stream>.<consumer>.
    <delivered>.<stream seq>.<consumer seq>.<timestamp ns>.<pending>`` (with a domain
    and account hash after ``ACK`` on newer servers).

    Raises:
        ValueError: ``reply`` is not a JetStream ack subject.
    """

    __slots__ = (
        "_nc",
        "_no_acks",
        "_owner",
        "_reply",
        "last_progress",
        "num_delivered",
        "released",
    )

    def __init__(
        self, nc: Client, owner: SettlementOwner, reply: str, *, no_acks: bool = False
    ) -> None:
        tokens, offset = ack_tokens(reply)  # the tokens are not kept: memory per message
        self._nc = nc
        self._no_acks = no_acks  # an AckNone consumer (ordered mode): nothing to send
        self._owner = owner
        self._reply = reply
        self.num_delivered = int(tokens[offset + 2])
        self.last_progress = 0.0
        self.released = False  # its in-flight room was given back (at most once)

    @property
    def stream_sequence(self) -> int:
        """The message's sequence in its stream."""
        tokens, offset = ack_tokens(self._reply)
        return int(tokens[offset + 3])

    @property
    def consumer(self) -> str:
        """The name of the consumer that delivered the message."""
        tokens, offset = ack_tokens(self._reply)
        return tokens[offset + 1]

    @property
    def consumer_sequence(self) -> int:
        """This delivery's sequence for the consumer."""
        tokens, offset = ack_tokens(self._reply)
        return int(tokens[offset + 4])

    @property
    def delivery(self) -> Delivery:
        """The delivery facts from the reply subject."""
        tokens, offset = ack_tokens(self._reply)
        return Delivery(
            stream=tokens[offset],
            consumer=tokens[offset + 1],
            stream_sequence=int(tokens[offset + 3]),
            consumer_sequence=int(tokens[offset + 4]),
            num_delivered=self.num_delivered,
            num_pending=int(tokens[offset + 6]),
            timestamp=datetime.fromtimestamp(int(tokens[offset + 5]) / 1e9, UTC),
        )

    async def _send(self, payload: bytes, outcome: Outcome | None) -> None:
        if self._no_acks:
            self._owner.on_settled(self, outcome)
            return
        try:
            await self._nc.publish(self._reply, payload)
        except nats.errors.Error as exc:
            action = outcome or "in_progress"
            raise SettlementError(f"could not {action} message: {exc}") from exc
        self._owner.on_settled(self, outcome)

    async def ack(self) -> None:
        """Acknowledge: the consumer will not deliver the message again.

        Raises:
            SettlementError: The acknowledgement could not be sent.
        """
        if self._no_acks:
            self._owner.on_settled(self, "ack")
            return
        try:  # _send inlined: acking is the hot path
            await self._nc.publish(self._reply, _ACK)
        except nats.errors.Error as exc:
            raise SettlementError(f"could not ack message: {exc}") from exc
        self._owner.on_settled(self, "ack")

    async def nak(self, delay: float | None) -> None:
        """Ask for redelivery, after ``delay`` seconds if given (server-side delay)."""
        if delay:
            await self._send(b'%s {"delay": %d}' % (_NAK, int(delay * 1e9)), "nak")
        else:
            await self._send(_NAK, "nak")

    async def term(self, reason: str | None) -> None:
        """Stop redelivery for good; the reason appears in the server's advisory."""
        text = " ".join(reason.split()).encode("utf-8", "backslashreplace") if reason else b""
        payload = _TERM + b" " + text if text else _TERM
        await self._send(payload, "term")

    async def in_progress(self) -> None:
        """Reset the message's ack_wait timer on the server."""
        await self._send(_PROGRESS, None)
        # The subscription's keep-alive need not signal again for another half ack_wait.
        self.last_progress = asyncio.get_running_loop().time()
