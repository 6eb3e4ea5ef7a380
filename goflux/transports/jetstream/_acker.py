"""A delivered message's ``$JS.ACK`` reply subject: the facts it carries, its settlement.

The reply subject of a JetStream delivery names the stream, the consumer, the
delivery count, both sequences, the store time and the pending count
(:func:`ack_tokens`, :func:`delivery_of`); settling the message publishes to it.

Every acknowledgement goes through :meth:`JetStreamAcker._send`: it publishes the
payload (``+ACK``, ``-NAK``, ``+TERM``, ``+WPI``) on the message's ``$JS.ACK`` reply
subject, records it in the subscription's :class:`Ledger` (by Go goflux's ack action),
and gives the message's in-flight room back once it is settled. A confirmed ack goes
through the subscription's :class:`~._confirm.Confirmations` instead, which count it
and give the room back once the server confirmed it (or it was given up).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import nats.errors
from nats.aio.client import Client
from opentelemetry.util.types import AttributeValue

from goflux._errors import SettlementError
from goflux._message import Delivery, Outcome
from goflux._otel.semconv import (
    ACK_ACTIONS,
    GOFLUX_ACK_ACTION,
    GOFLUX_ACK_ERROR,
    GOFLUX_SETTLEMENT_OUTCOME,
    MESSAGING_DESTINATION_NAME,
)
from goflux._otel.tally import Count
from goflux._otel.telemetry import Telemetry
from goflux.transports._natspy import write_publish
from goflux.transports.jetstream._confirm import Confirmations

__all__ = (
    "JetStreamAcker",
    "Ledger",
    "ack_tokens",
    "delivery_count",
    "delivery_of",
    "first_delivery_prefix",
    "hand_back",
    "write_facts",
)

_ACK = b"+ACK"
_NAK = b"-NAK"
_TERM = b"+TERM"
_PROGRESS = b"+WPI"
_OUTCOME_OF: Final[Mapping[str, Outcome]] = {
    "ack": "ack",
    "nak": "nak",
    "nak_with_delay": "nak",
    "term": "term",
}  # Go goflux's ack action -> the message's outcome


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


def delivery_count(reply: str) -> int:
    """How many times the message ``reply`` acknowledges was delivered, this one included.

    Raises:
        ValueError: ``reply`` is not a JetStream ack subject.
    """
    tokens, offset = ack_tokens(reply)  # the tokens are not kept: memory per message
    return int(tokens[offset + 2])


def first_delivery_prefix(reply: str) -> str:
    """How the reply subject of a first delivery by ``reply``'s consumer starts.

    That is ``reply`` up to its delivery count, with a count of 1 and the dot after
    it: a reply starting with it is a first delivery, read without splitting it.

    Raises:
        ValueError: ``reply`` is not a JetStream ack subject.
    """
    tokens, offset = ack_tokens(reply)
    return ".".join(tokens[: offset + 2]) + ".1."


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


class Ledger:
    """Where a subscription's ackers report: settlements by action, and room given back.

    Each settlement is counted twice, with running totals looked up once here: as Go
    goflux's ``goflux.processor.ack.outcome`` (by ``goflux.ack.action`` = ack, nak,
    nak_with_delay or term, ``goflux.ack.error`` and ``messaging.destination.name``)
    and as goflux's deprecated ``goflux.consumer.settlements`` (by
    ``goflux.settlement.outcome``). An in-progress signal has no Go action: it is
    counted only in the latter. An ack given up unconfirmed is an ack whose operation
    failed (``goflux.ack.error`` true), and ``ack_unconfirmed`` in the latter.

    Args:
        telemetry: Records the metrics.
        attributes: The subscription's metric attributes (system, consumer, subject),
            those of ``goflux.consumer.settlements``.
        release: Gives the in-flight room of so many messages back to the pull engine.
        confirmations: Where acks go to be confirmed (``ack(confirm=True)``).
        confirm_all: Every ack is confirmed (the subscriber's ``confirm_acks``).
        destination: The ``messaging.destination.name`` of the ack outcomes: the
            subject the subscription was started with (as Go goflux labels them).

    Attributes:
        unconfirmed: Acks sent for confirmation and given up unconfirmed.
    """

    __slots__ = (
        "_by_action",
        "_destination",
        "_failed",
        "_progress",
        "_tel",
        "_unconfirmed",
        "confirm_all",
        "confirmations",
        "release",
        "unconfirmed",
    )

    def __init__(
        self,
        telemetry: Telemetry,
        attributes: Mapping[str, AttributeValue],
        release: Callable[[int], None],
        confirmations: Confirmations | None = None,
        *,
        confirm_all: bool = False,
        destination: str,
    ) -> None:
        self._tel = telemetry
        self._destination = destination

        def settled(outcome: str) -> Count:
            return telemetry.settlement_count({**attributes, GOFLUX_SETTLEMENT_OUTCOME: outcome})

        self._by_action = {
            action: (settled(_OUTCOME_OF[action]), self._outcome(action, failed=False))
            for action in ACK_ACTIONS
        }
        self._progress = settled("in_progress")
        self._unconfirmed = (settled("ack_unconfirmed"), self._outcome("ack", failed=True))
        self._failed: dict[str, Count] = {}
        self.release = release
        self.confirmations = confirmations
        self.confirm_all = confirm_all and confirmations is not None
        self.unconfirmed = 0

    def _outcome(self, action: str, *, failed: bool) -> Count:
        return self._tel.ack_outcome_count(
            {
                GOFLUX_ACK_ACTION: action,
                GOFLUX_ACK_ERROR: failed,
                MESSAGING_DESTINATION_NAME: self._destination,
            }
        )

    def record(self, action: str | None, count: int = 1) -> None:
        """Count ``count`` settlements sent, by Go's action (``None``: in-progress signals)."""
        if self._tel.metering:
            if action is None:
                self._progress.value += count
            else:
                settled, outcome = self._by_action[action]
                settled.value += count
                outcome.value += count

    def record_failed(self, action: str | None) -> None:
        """Count one settlement that could not be sent (``goflux.ack.error`` true)."""
        if action is None or not self._tel.metering:
            return  # an in-progress signal has no Go action
        found = self._failed.get(action)
        if found is None:
            found = self._failed[action] = self._outcome(action, failed=True)
        found.value += 1

    def record_unconfirmed(self) -> None:
        """Count one ack sent for confirmation and given up (outcome ``ack_unconfirmed``)."""
        self.unconfirmed += 1
        if self._tel.metering:
            settled, outcome = self._unconfirmed
            settled.value += 1
            outcome.value += 1


class JetStreamAcker:
    """One delivered message as received, and its settlement through its ``$JS.ACK`` reply.

    The pull engine keeps nothing else of a delivery: the subject, payload and headers
    nats-py's reader parsed are held here (no nats-py ``Msg`` is built), as long as the
    message is. The reply subject carries the delivery facts (see
    :func:`~goflux.transports.jetstream._acker.ack_tokens`). ``last_progress`` is when
    the server last heard of the message (its arrival, or the last in-progress
    signal): its ``ack_wait`` runs from then.

    Args:
        nc: The connection the message arrived on.
        reply: The message's reply subject.
        ledger: The subscription's ledger.
        arrival: Event-loop time the message arrived.
        delivered: The delivery count, if known (else read from ``reply``).
        message_subject: The subject the message was published to.
        data: Its payload, as received.
        headers: Its headers, as nats-py parsed them, or the header block as received
            (None: it had none; see :data:`~goflux.transports._natspy.Take`).

    Attributes:
        reply: The message's ``$JS.ACK`` reply subject, where settlements go (also
            :attr:`subject`).
        message_subject: The subject the message was published to.
        data: Its payload, as received.
        headers: Its headers, as nats-py parsed them, or the header block as received.

    Raises:
        ValueError: ``reply`` is not a JetStream ack subject.
    """

    __slots__ = (
        "_ledger",
        "_nc",
        "data",
        "deferred",
        "headers",
        "last_progress",
        "message_subject",
        "num_delivered",
        "released",
        "reply",
    )

    def __init__(
        self,
        nc: Client,
        reply: str,
        ledger: Ledger,
        arrival: float,
        delivered: int | None = None,
        message_subject: str = "",
        data: bytes = b"",
        headers: bytes | dict[str, str] | None = None,
    ) -> None:
        if delivered is None:
            delivered = delivery_count(reply)
        self._nc = nc
        self.reply = reply
        self._ledger = ledger
        self.num_delivered = delivered
        self.last_progress = arrival
        self.released = False  # its in-flight room was given back (at most once)
        self.deferred = False  # a confirmed ack.ack() returns once sent (the auto-ack)
        self.message_subject = message_subject
        self.data = data
        self.headers = headers

    @property
    def subject(self) -> str:
        """The message's ``$JS.ACK`` reply subject, where settlements go (:attr:`reply`)."""
        return self.reply

    @property
    def stream_sequence(self) -> int:
        """The message's sequence in its stream."""
        tokens, offset = ack_tokens(self.reply)
        return int(tokens[offset + 3])

    @property
    def delivery(self) -> Delivery:
        """The delivery facts from the reply subject."""
        return delivery_of(self.reply)

    def __call__(self) -> Delivery:
        """The delivery facts, built now (see :attr:`delivery`).

        A message of a consumer without acknowledgement (ordered mode) has no acker
        to settle with; it carries its acker as the facts it builds when asked for.

        Raises:
            ValueError: The reply is not a JetStream ack subject.
        """
        return delivery_of(self.reply)

    def release(self) -> None:
        """Give the message's in-flight room back to the pull engine (once)."""
        if not self.released:
            self.released = True
            self._ledger.release(1)

    async def _send(self, payload: bytes, action: str | None) -> None:
        """The one path of every settlement: send it, count it, give the room back.

        ``action`` is Go goflux's name of the settlement (``ack``, ``nak``,
        ``nak_with_delay``, ``term``), None for an in-progress signal.
        """
        ledger = self._ledger
        try:
            if not write_publish(self._nc, self.reply, payload):  # the common case: queued
                await self._nc.publish(self.reply, payload)
        except nats.errors.Error as exc:
            ledger.record_failed(action)
            what = "in_progress" if action is None else _OUTCOME_OF[action]
            raise SettlementError(f"could not {what} message: {exc}") from exc
        ledger.record(action)
        if action is not None and not self.released:
            self.released = True
            ledger.release(1)

    # ack, nak and term return _send's coroutine rather than awaiting it in one of their
    # own: acking is the hot path, and a coroutine frame is a measurable part of it.

    def ack(self) -> Coroutine[Any, Any, None]:
        """Acknowledge: the consumer will not deliver the message again (awaitable).

        If the subscription confirms every ack, it is confirmed (see
        :meth:`ack_confirmed`); with ``deferred`` set, it returns once sent, and the
        confirmation gives the room back later.

        Raises:
            SettlementError: The acknowledgement could not be sent.
            AckNotConfirmed: The ack was confirmed and waited for, and no
                confirmation came.
        """
        ledger = self._ledger
        if ledger.confirm_all:
            assert ledger.confirmations is not None  # confirm_all says so
            return ledger.confirmations.ack(self, wait=not self.deferred)
        return self._send(_ACK, "ack")

    def ack_confirmed(self) -> Coroutine[Any, Any, None]:
        """Acknowledge, and return once the server confirmed it applied the ack.

        The ack is sent as a request; without a reply within the subscription's
        ``confirm_timeout`` it is sent again, three times in all. The message keeps
        its in-flight room until then.

        Raises:
            SettlementError: The acknowledgement could not be sent.
            AckNotConfirmed: No confirmation came (see the error's cause).
        """
        confirmations = self._ledger.confirmations
        if confirmations is None:  # a ledger without confirmations: nothing to confirm with
            return self._send(_ACK, "ack")
        return confirmations.ack(self, wait=True)

    def confirmed(self) -> None:
        """The server confirmed the ack: count it and give the room back."""
        ledger = self._ledger
        ledger.record("ack")
        self.release()

    def unconfirmed(self) -> None:
        """The ack was given up unconfirmed: count it and give the room back.

        If the server did not apply it, it redelivers the message after ``ack_wait``.
        """
        self._ledger.record_unconfirmed()
        self.release()

    def unsent(self) -> None:
        """The ack for confirmation could not be sent: count it as an ack that failed."""
        self._ledger.record_failed("ack")

    def nak(self, delay: float | None) -> Coroutine[Any, Any, None]:
        """Ask for redelivery, after ``delay`` seconds if given (awaitable).

        Raises:
            SettlementError: The nak could not be sent.
        """
        if delay:
            return self._send(b'%s {"delay": %d}' % (_NAK, int(delay * 1e9)), "nak_with_delay")
        return self._send(_NAK, "nak")

    def term(self, reason: str | None) -> Coroutine[Any, Any, None]:
        """Stop redelivery for good; the reason appears in the server's advisory (awaitable).

        Raises:
            SettlementError: The termination could not be sent.
        """
        text = " ".join(reason.split()).encode("utf-8", "backslashreplace") if reason else b""
        return self._send(_TERM + b" " + text if text else _TERM, "term")

    async def in_progress(self) -> None:
        """Reset the message's ack_wait timer on the server.

        Raises:
            SettlementError: The signal could not be sent.
        """
        await self._send(_PROGRESS, None)
        self.last_progress = asyncio.get_running_loop().time()


async def hand_back(nc: Client, reply: str) -> bool:
    """Nak a message that was received but never taken into the in-flight count.

    Used for messages arriving after a subscription finished, or on a retired inbox; if
    the nak cannot be sent, the server redelivers the message after ``ack_wait``.

    Returns:
        Whether the nak was sent.
    """
    try:
        await nc.publish(reply, _NAK)
    except nats.errors.Error:
        return False
    return True
