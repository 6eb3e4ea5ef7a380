"""Dead letters: where a message goes when it will not be processed, and what it carries."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from typing import Final, Literal, TypeAlias

from goflux._errors import PayloadTooLarge, PublishError
from goflux._headers import Headers, escape_header_value
from goflux._interfaces import Publisher
from goflux._message import Message
from goflux._otel.semconv import GOFLUX_DEAD_LETTER_REASON, MESSAGING_DESTINATION_NAME, error_type
from goflux._otel.telemetry import Telemetry
from goflux._receipt import PublishReceipt
from goflux._subjects import validate_subject

__all__ = (
    "DEAD_LETTER_HEADER_PREFIX",
    "DEAD_LETTER_RETRY_DELAY",
    "DeadLetter",
    "DeadLetterReason",
    "dead_letter_headers",
    "is_dead_letter",
    "refused_for_good",
)


def refused_for_good(failure: BaseException) -> bool:
    """Whether a failed :meth:`DeadLetter.send` can never succeed for this message.

    True when the letter itself is refused: too large for the server even in compact
    form (:class:`PayloadTooLarge`), or refused by JetStream with an error code (for
    example 10097, more than 64 KiB of headers). Retrying later would only bring the
    message back forever, so the caller terminates it without a dead letter instead.
    A broken destination (a closed publisher or connection) is not the message's
    fault: the message is kept for a later try.
    """
    if isinstance(failure, PayloadTooLarge):
        return True
    return isinstance(failure, PublishError) and failure.permanent and failure.err_code is not None


DEAD_LETTER_RETRY_DELAY: Final = 5.0
"""Seconds before a message whose dead letter could not be published is tried again."""


DeadLetterReason: TypeAlias = Literal[
    "non_retryable", "max_attempts", "undecodable", "crashed_worker"
]
"""Why a message was dead-lettered: a permanent failure, retries exhausted, a payload
that could not be decoded, or a message its worker process died handling, again and
again (see :class:`~goflux.PoisonMessage`)."""

DEAD_LETTER_HEADER_PREFIX: Final = "Dead-Letter-"
"""Every failure metadata header starts with this (they replace earlier ones)."""

REASON: Final = "Dead-Letter-Reason"
ERROR_TYPE: Final = "Dead-Letter-Error-Type"
ERROR: Final = "Dead-Letter-Error"
SUBJECT: Final = "Dead-Letter-Subject"
MESSAGE_ID: Final = "Dead-Letter-Message-Id"
STREAM: Final = "Dead-Letter-Stream"
SEQUENCE: Final = "Dead-Letter-Sequence"
CONSUMER: Final = "Dead-Letter-Consumer"
DELIVERY_COUNT: Final = "Dead-Letter-Delivery-Count"
TIMESTAMP: Final = "Dead-Letter-Timestamp"
FAILED_AT: Final = "Dead-Letter-Failed-At"
_PREFIX_LOWER: Final = DEAD_LETTER_HEADER_PREFIX.lower()

MAX_ERROR_LENGTH: Final = 1024
_UNSAFE = re.compile(r"[\r\n\x00]+")

logger = logging.getLogger("goflux.middleware")


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _error_text(error: BaseException) -> str:
    text = _UNSAFE.sub(" ", str(error)).strip() or type(error).__name__
    if not text.isascii():  # lone surrogates (from os.fsdecode, say) cannot be sent
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > MAX_ERROR_LENGTH:
        text = text[: MAX_ERROR_LENGTH - 3] + "..."
    return text


def dead_letter_headers(
    message: Message[object],
    error: BaseException,
    reason: DeadLetterReason,
    *,
    attempts: int | None = None,
    now: datetime | None = None,
    headers: Headers | None = None,
    compact: bool = False,
) -> Headers:
    """Return the headers of ``message``'s dead letter: its user headers plus failure metadata.

    Metadata headers (all starting with ``Dead-Letter-``, replacing any the message
    already had from an earlier dead-lettering): ``Reason``, ``Error-Type`` (the
    exception's qualified class name), ``Error`` (its message, on one line, at most
    1024 characters), ``Subject``, ``Message-Id``, ``Failed-At`` and, where the
    transport knows them, ``Stream``, ``Sequence``, ``Consumer``, ``Delivery-Count``
    and ``Timestamp`` (when the stream stored the original; RFC 3339, UTC).

    User headers a peer sent that cannot be published again (see
    :meth:`Headers.sendable`) are left out or escaped, so building a dead letter
    never fails.

    Args:
        message: The failed message.
        error: Why it failed.
        reason: Why it is dead-lettered.
        attempts: How many times it was processed, where the attempts ran in place
            (the transport cannot redeliver); otherwise the delivery count is used.
        now: The failure time; default: the current time.
        headers: The user headers to carry (default: the message's); pass the headers
            as received when the handler may have changed them.
        compact: Leave out the user headers and the error message (for a dead letter
            that would otherwise exceed the server's size limit).
    """
    source = headers if headers is not None else message.headers
    out, dropped = (Headers(), []) if compact else source.sendable()
    if dropped:
        logger.warning(
            "dead letter of the message on %r leaves out headers that cannot be sent: %r",
            message.subject,
            dropped,
        )
    for name in [n for n in out if n.lower().startswith(_PREFIX_LOWER)]:
        del out[name]
    out[REASON] = reason
    out[ERROR_TYPE] = error_type(error)
    if not compact:
        out[ERROR] = _error_text(error)
    out[SUBJECT] = escape_header_value(message.subject)
    if message.id is not None:
        out[MESSAGE_ID] = escape_header_value(message.id)
    delivery = message.delivery
    if delivery is not None:
        out[STREAM] = delivery.stream
        out[SEQUENCE] = str(delivery.stream_sequence)
        out[CONSUMER] = delivery.consumer
        out[TIMESTAMP] = _timestamp(delivery.timestamp)
    if attempts is not None:
        out[DELIVERY_COUNT] = str(attempts)
    elif delivery is not None:
        out[DELIVERY_COUNT] = str(delivery.num_delivered)
    out[FAILED_AT] = _timestamp(now or datetime.now(UTC))
    return out


def is_dead_letter(message: Message[object], subject: str) -> bool:
    """Whether ``message`` is a dead letter that arrived on the dead-letter ``subject``.

    Dead-lettering it again would publish to where it came from: a loop.
    """
    return message.subject == subject and REASON in message.headers


class DeadLetter:
    """A dead-letter destination: a bytes publisher and the subject to publish to.

    A dead letter carries the original payload bytes unchanged, the original user
    headers, and failure metadata headers (see :func:`dead_letter_headers`). Use a
    JetStream publisher: :meth:`send` then returns only once the dead letter is stored,
    and its message ID (derived from the original's stream, consumer and sequence) lets
    the server drop a second copy if the original is dead-lettered again after a crash
    (keep the dead-letter stream's duplicate window longer than your retry delays).

    Args:
        publisher: Publishes the dead letters (``Publisher[bytes]``, e.g. with a
            ``BytesCodec``). The caller owns it and closes it.
        subject: Where dead letters are published.
        telemetry: Counts dead letters (``goflux.consumer.dead_letters``, by reason);
            default: OpenTelemetry globals.

    Raises:
        InvalidSubject: ``subject`` is not a valid publish subject.
    """

    __slots__ = ("_publisher", "_subject", "_tel")

    def __init__(
        self,
        publisher: Publisher[bytes],
        subject: str,
        *,
        telemetry: Telemetry | None = None,
    ) -> None:
        validate_subject(subject)
        self._publisher = publisher
        self._subject = subject
        self._tel = Telemetry.or_default(telemetry)

    @property
    def publisher(self) -> Publisher[bytes]:
        """The publisher dead letters go through."""
        return self._publisher

    @property
    def subject(self) -> str:
        """The subject dead letters are published to."""
        return self._subject

    def __repr__(self) -> str:
        return f"DeadLetter(subject={self._subject!r})"

    async def send(
        self,
        message: Message[object],
        error: BaseException,
        reason: DeadLetterReason,
        *,
        attempts: int | None = None,
        headers: Headers | None = None,
    ) -> PublishReceipt | None:
        """Publish ``message``'s dead letter and return the publisher's receipt.

        A dead letter too large for the server (the metadata headers come on top of
        the original) is sent again without the user headers and the error message.

        Args:
            message: The failed message; its payload bytes (``message.data``) are sent.
            error: Why it failed.
            reason: Why it is dead-lettered.
            attempts: Processing attempts made, where the transport does not count them.
            headers: The user headers as received (default: ``message.headers``).

        Raises:
            PublishError: The dead letter could not be published, or ``message`` has no
                payload bytes (an in-process channel without a codec carries values).
        """
        data = message.data
        if data is None:
            if not isinstance(message.payload, bytes):
                raise PublishError(
                    f"cannot dead-letter the message on {message.subject!r}: the transport "
                    "kept no payload bytes (give the channel bus a codec)",
                    subject=self._subject,
                    permanent=True,
                )
            data = message.payload
        delivery = message.delivery
        message_id = (
            f"dead-letter:{delivery.stream}:{delivery.consumer}:{delivery.stream_sequence}"
            if delivery is not None
            else None  # no redelivery, so no second copy to de-duplicate
        )
        letter = dead_letter_headers(message, error, reason, attempts=attempts, headers=headers)
        try:
            receipt = await self._publisher.publish(
                self._subject, data, headers=letter, message_id=message_id
            )
        except PayloadTooLarge:
            letter = dead_letter_headers(
                message, error, reason, attempts=attempts, headers=headers, compact=True
            )
            receipt = await self._publisher.publish(
                self._subject, data, headers=letter, message_id=message_id
            )
        if receipt is None or not receipt.duplicate:
            self._tel.record_dead_letter(
                {GOFLUX_DEAD_LETTER_REASON: reason, MESSAGING_DESTINATION_NAME: self._subject}
            )
        return receipt
