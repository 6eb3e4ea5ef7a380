"""The delivery facts a JetStream ``$JS.ACK`` reply subject carries."""

from __future__ import annotations

from datetime import UTC, datetime

from goflux._message import Delivery

__all__ = ("LazyDelivery", "ack_tokens", "delivery_of", "write_facts")


def ack_tokens(reply: str) -> tuple[list[str], int]:
    """Split a ``$JS.ACK`` reply subject; return its tokens and the stream name's index.

    The subject is ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer
    seq>.<timestamp ns>.<pending>``; newer servers put a domain and an account hash
    after ``ACK``, so the stream name's index is 2 in the original form and 4 in the
    longer one. The consumer, delivery count, stream sequence, consumer sequence,
    timestamp and pending count follow the stream name in that order.

    Raises:
        ValueError: ``reply`` is not a JetStream ack subject.
    """
    tokens = reply.split(".")
    if len(tokens) == 9:
        return tokens, 2
    if len(tokens) >= 11:
        return tokens, 4
    raise ValueError(f"not a JetStream ack subject: {reply!r}")


def delivery_of(reply: str) -> Delivery:
    """The :class:`~goflux.Delivery` facts of the message ``reply`` acknowledges.

    Raises:
        ValueError: ``reply`` is not a JetStream ack subject.
    """
    tokens, offset = ack_tokens(reply)
    return Delivery(
        stream=tokens[offset],
        consumer=tokens[offset + 1],
        stream_sequence=int(tokens[offset + 3]),
        consumer_sequence=int(tokens[offset + 4]),
        num_delivered=int(tokens[offset + 2]),
        num_pending=int(tokens[offset + 6]),
        timestamp=datetime.fromtimestamp(int(tokens[offset + 5]) / 1e9, UTC),
    )


def write_facts(reply: str) -> tuple[int, datetime, int]:
    """The stream sequence, store time and pending count of the delivery ``reply`` acks.

    What a Key-Value entry needs of a delivery, without building a :class:`Delivery`.

    Raises:
        ValueError: ``reply`` is not a JetStream ack subject.
    """
    tokens, offset = ack_tokens(reply)
    return (
        int(tokens[offset + 3]),
        datetime.fromtimestamp(int(tokens[offset + 5]) / 1e9, UTC),
        int(tokens[offset + 6]),
    )


class LazyDelivery:
    """The delivery facts of a message, read from its reply subject when first asked for.

    A message of a consumer without acknowledgement (ordered mode) carries this in
    place of its :class:`~goflux.Delivery`; calling it builds the facts.
    """

    __slots__ = ("reply",)

    def __init__(self, reply: str) -> None:
        self.reply = reply

    def __call__(self) -> Delivery:
        """The delivery facts.

        Raises:
            ValueError: The reply is not a JetStream ack subject.
        """
        return delivery_of(self.reply)
