"""What a broker confirms after storing a published message."""

from __future__ import annotations

import decimal
from dataclasses import dataclass

__all__ = ("PublishReceipt",)


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishReceipt:
    """The broker's confirmation that a message was stored (JetStream PubAck).

    Attributes:
        stream: The stream that stored the message.
        sequence: The message's sequence in that stream.
        duplicate: True when the server recognised the message ID as already stored
            (the publish was de-duplicated); always a bool, never None.
        domain: The JetStream domain, when the server reports one.
        value: A counter's total after the increment, for a publish to a stream
            with ``allow_msg_counter`` (an exact, arbitrarily large int); None for
            any other stream, for a duplicate (the server counted the message ID's
            first publish and sends no total), and for the messages of an atomic
            batch (its commit's PubAck carries no total: read them afterwards).
    """

    stream: str
    sequence: int
    duplicate: bool = False
    domain: str | None = None
    value: int | None = None

    def __repr__(self) -> str:
        # A counter's total may exceed Python's int/str limit (4,300 digits), where
        # repr() of an int raises: Decimal writes it out at any size.
        value = None if self.value is None else str(decimal.Decimal(self.value))
        return (
            f"PublishReceipt(stream={self.stream!r}, sequence={self.sequence}, "
            f"duplicate={self.duplicate}, domain={self.domain!r}, value={value})"
        )
