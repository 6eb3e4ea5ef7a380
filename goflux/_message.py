"""Messages as handlers see them: ``Message[T]``, its ``Delivery`` facts and settlement."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, Protocol, TypeAlias, TypeVar

from goflux._errors import AlreadySettled
from goflux._headers import Headers
from goflux._wire import header_lines

__all__ = (
    "Acker",
    "Delivery",
    "Message",
    "Outcome",
    "SettlementObserver",
    "acked_by_transport",
    "observe_settlement",
    "received",
    "retried_by_sender",
)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

_MAX_NAK_DELAY = 365 * 24 * 3600.0  # the broker keeps delays in int64 nanoseconds

Outcome: TypeAlias = Literal["ack", "nak", "term"]
"""How a message was settled."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """Broker facts about one delivery of a message (JetStream).

    Attributes:
        stream: Name of the stream that stored the message.
        consumer: Name of the consumer that delivered it.
        stream_sequence: Sequence of the message in the stream.
        consumer_sequence: Sequence of this delivery for the consumer.
        num_delivered: How many times the message has been delivered (1 on first).
        num_pending: Messages still pending for the consumer after this one.
        timestamp: When the stream stored the message (timezone-aware, UTC).
    """

    stream: str
    consumer: str
    stream_sequence: int
    consumer_sequence: int
    num_delivered: int
    num_pending: int
    timestamp: datetime


class Acker(Protocol):
    """Settlement operations a transport gives a message.

    Transports without a capability implement it with the documented fallback:
    ``term`` acks (so a poison message is not redelivered forever) and ``nak`` with a
    delay naks at once where delayed redelivery is unsupported.

    An acker that can have an ack confirmed by the broker also has an
    ``ack_confirmed()`` coroutine method, which :meth:`Message.ack` calls for
    ``ack(confirm=True)``; without it, a confirmed ack is a plain ``ack()``. One
    whose nak asks the sender to send the message again (HTTP: 503 and
    ``Retry-After``), where no broker counts deliveries, has ``sender_retries = True``
    (see :func:`retried_by_sender`).
    """

    async def ack(self) -> None:
        """Acknowledge successful processing."""

    async def nak(self, delay: float | None) -> None:
        """Ask for redelivery, after ``delay`` seconds where supported."""

    async def term(self, reason: str | None) -> None:
        """Stop redelivery for good."""

    async def in_progress(self) -> None:
        """Tell the broker the message is still being worked on (resets ack_wait)."""

    @property
    def delivery(self) -> Delivery | None:
        """Broker facts about this delivery, built when first asked for (or None)."""


class Message(Generic[T_co]):
    """A received message: the decoded payload plus metadata and settlement.

    Settlement (``ack``, ``nak``, ``term``) happens at most once; a second attempt
    raises :class:`~goflux.AlreadySettled`. On transports without
    acknowledgement (in-process channel, core NATS) settling is a recorded no-op.

    Attributes:
        subject: The concrete subject the message was published to.
        payload: The decoded value.
        headers: User headers (without transport prefixes).
        id: The message ID set by the publisher, if any.
        delivery: Broker delivery facts (JetStream), else None.
        data: The payload bytes exactly as received, where the transport has them.
        wire_headers: Every header line exactly as received (see the property): a
            mapping, or the ``NATS/1.0`` header block itself, read when first asked for.
    """

    __slots__ = (
        "_acker",
        "_data",
        "_delivery",
        "_headers",
        "_id",
        "_observer",
        "_payload",
        "_settled",
        "_subject",
        "_wire",
    )

    def __init__(
        self,
        subject: str,
        payload: T_co,
        *,
        headers: Headers | None = None,
        id: str | None = None,
        delivery: Delivery | None = None,
        data: bytes | None = None,
        acker: Acker | None = None,
        wire_headers: Mapping[str, str] | Headers | bytes | None = None,
    ) -> None:
        self._subject = subject
        self._payload = payload
        self._headers: Headers | None = headers
        self._id = id
        self._delivery: Delivery | Callable[[], Delivery] | None = delivery
        self._data = data
        self._acker = acker
        self._settled: Outcome | None = None
        self._observer: SettlementObserver | None = None
        self._wire: Mapping[str, str] | Headers | bytes | None = wire_headers

    @property
    def subject(self) -> str:
        """The concrete subject the message was published to."""
        return self._subject

    @property
    def payload(self) -> T_co:
        """The decoded value."""
        return self._payload

    @property
    def headers(self) -> Headers:
        """User headers, without transport prefixes."""
        headers = self._headers
        if headers is None:  # none were received: made on first use
            headers = self._headers = Headers()
        return headers

    @property
    def wire_headers(self) -> Headers:
        """Every header received: none left out, every value of a repeated name kept.

        Unlike :attr:`headers`, no header is left out and no prefix taken off: a plain NATS
        producer's ``Tenant: acme`` is here, as are ``X-Goflux-*``, ``X-Message-ID``,
        ``Nats-Msg-Id``, ``traceparent`` and the headers the server adds (JetStream's
        ``Nats-*``). Lookups ignore case; :meth:`Headers.get_all` gives every value of
        a name in wire order. A name is spelled as its first line spelled it, and the
        lines come grouped by name, in the order each name first appears (``A: 1``,
        ``B: 2``, ``a: 3`` read as ``A: 1``, ``A: 3``, ``B: 2``). Empty where nothing
        travels (the channel transport).
        """
        wire = self._wire
        if isinstance(wire, Headers):
            return wire
        if wire is None:
            headers = Headers()
        elif isinstance(wire, bytes):  # the header block as received, read now
            headers = Headers._trusted(header_lines(wire))
        else:
            lines = getattr(wire, "lines", None)  # repeated lines, where the client kept them
            headers = Headers._trusted(lines if lines is not None else wire.items())
        self._wire = headers
        return headers

    @property
    def id(self) -> str | None:
        """The message ID set by the publisher, if any."""
        return self._id

    @property
    def delivery(self) -> Delivery | None:
        """Broker delivery facts (JetStream), else None."""
        delivery = self._delivery
        if delivery is None:
            if self._acker is not None:
                delivery = self._delivery = self._acker.delivery
        elif not isinstance(delivery, Delivery):  # facts a transport builds on demand
            delivery = self._delivery = delivery()
        return delivery

    @property
    def data(self) -> bytes | None:
        """The payload bytes exactly as received, where the transport has them."""
        return self._data

    @property
    def settled(self) -> Outcome | None:
        """How the message was settled, or None while it is unsettled."""
        return self._settled

    @property
    def acknowledgeable(self) -> bool:
        """Whether settling reaches a broker (False on channel and core NATS)."""
        return self._acker is not None

    def __repr__(self) -> str:
        return (
            f"Message(subject={self._subject!r}, payload={self._payload!r}, "
            f"id={self._id!r}, settled={self._settled!r})"
        )

    def _claim(self, outcome: Outcome) -> None:
        if self._settled is not None:
            raise AlreadySettled(
                f"message on {self._subject!r} was already settled ({self._settled}); "
                f"cannot {outcome} it",
                outcome=self._settled,
            )
        self._settled = outcome

    def _settling_failed(self) -> None:
        self._settled = None
        if self._observer is not None:
            self._observer(self, None)

    def _settled_as(self, outcome: Outcome) -> None:
        if self._observer is not None:
            self._observer(self, outcome)

    async def ack(self, *, confirm: bool = False) -> None:
        """Acknowledge successful processing.

        Args:
            confirm: Return only once the broker confirmed that it applied the ack
                (JetStream: the ack is sent as a request, and the server replies
                when the ack is applied). A plain ack where the transport cannot
                confirm, and a no-op without acknowledgement (channel, core NATS).

        Raises:
            AlreadySettled: The message was settled before.
            AckNotConfirmed: ``confirm`` was asked for, and the broker did not confirm
                the ack, even after retries; the message is unsettled again (ack it
                again, or let it be redelivered).
            SettlementError: The ack could not be sent.
        """
        if self._settled is not None:
            self._claim("ack")  # raises AlreadySettled
        self._settled = "ack"
        acker = self._acker
        if acker is not None:
            try:
                if confirm:
                    await getattr(acker, "ack_confirmed", acker.ack)()
                else:
                    await acker.ack()
            except BaseException:
                self._settling_failed()
                raise
        if self._observer is not None:
            self._observer(self, "ack")

    async def nak(self, delay: float | None = None) -> None:
        """Ask for redelivery, after ``delay`` seconds where the transport supports it.

        Raises:
            AlreadySettled: The message was settled before.
            ValueError: ``delay`` is negative, NaN or longer than a year.
        """
        if delay is not None and not 0 <= delay <= _MAX_NAK_DELAY:  # also refuses NaN
            raise ValueError(f"nak delay must be between 0 and one year, got {delay}")
        self._claim("nak")
        if self._acker is not None:
            try:
                await self._acker.nak(delay)
            except BaseException:
                self._settling_failed()
                raise
        self._settled_as("nak")

    async def term(self, reason: str | None = None) -> None:
        """Stop redelivery for good (acks where the transport cannot terminate).

        Raises:
            AlreadySettled: The message was settled before.
        """
        self._claim("term")
        if self._acker is not None:
            try:
                await self._acker.term(reason)
            except BaseException:
                self._settling_failed()
                raise
        self._settled_as("term")

    async def in_progress(self) -> None:
        """Report that work continues, so the broker does not redeliver yet.

        Raises:
            AlreadySettled: The message was settled before.
        """
        if self._settled is not None:
            raise AlreadySettled(
                f"message on {self._subject!r} was already settled ({self._settled}); "
                "in_progress has no effect",
                outcome=self._settled,
            )
        if self._acker is not None:
            await self._acker.in_progress()


SettlementObserver: TypeAlias = Callable[[Message[Any], Outcome | None], None]
"""Told of a message's settlement: the message and its outcome, or None when a settlement
failed to reach the broker (the message is unsettled again). One function can observe
many messages (no closure per message)."""


def acked_by_transport(message: Message[Any]) -> None:
    """Record that the transport has sent ``message``'s ack itself (its auto-ack hot path).

    What :meth:`Message.ack` records once its acker returned, for a transport that
    sent the ack without a coroutine; the message must be unsettled.
    """
    message._settled = "ack"
    if message._observer is not None:
        message._observer(message, "ack")


def received(
    subject: str,
    payload: T,
    headers: Headers | None,
    id: str | None,
    data: bytes | None,
    acker: Acker | None,
    wire: Mapping[str, str] | bytes | None = None,
    delivery: Callable[[], Delivery] | None = None,
) -> Message[T]:
    """Build a received message without keyword parsing (for transports' hot paths).

    ``wire`` is the transport's header mapping as received, or the ``NATS/1.0`` header
    block itself (see :attr:`Message.wire_headers`); it is read only when asked for.
    ``delivery`` builds the delivery facts of a message without an acker, when first
    asked for.
    """
    message: Message[T] = Message.__new__(Message)
    message._subject = subject
    message._payload = payload
    message._headers = headers
    message._id = id
    message._delivery = delivery
    message._data = data
    message._acker = acker
    message._settled = None
    message._observer = None
    message._wire = wire
    return message


def retried_by_sender(message: Message[object]) -> bool:
    """Whether a nak of ``message`` asks its sender to send it again (HTTP's 503).

    Such a transport redelivers as a broker does, but counts no deliveries: retry
    middleware naks a failure there instead of retrying in place.
    """
    return bool(getattr(message._acker, "sender_retries", False))


def observe_settlement(message: Message[object], observer: SettlementObserver | None) -> None:
    """Have ``observer`` told of ``message``'s settlement (one observer; None removes it).

    It is called with the message and the outcome once a settlement succeeded, and with
    None when a settlement attempt failed (the message is unsettled again). Streams and
    the JetStream subscriptions feeding them use it to learn when a message they handed
    out is done.
    """
    message._observer = observer
