"""The goflux error tree.

Every error goflux raises derives from :class:`GofluxError`, and the underlying cause
(a pydantic ``ValidationError``, a nats-py timeout, ...) is chained as ``__cause__``.
The core defines the errors every transport shares; a transport defines those only
it raises, under these, in its own package (marked below with its name)::

    GofluxError
     ├── CodecError (also ValueError)
     │    ├── EncodeError           a value could not be encoded (wrong type, NaN, ...)
     │    └── DecodeError           bytes could not be decoded into the payload type
     ├── InvalidSubject (also ValueError)    a subject or pattern breaks NATS rules
     │    ├── SubjectError                   a subject segment, template or template
     │    │    │                             value breaks a rule (the segment, the rule)
     │    │    └── SubjectMismatch           a subject does not fit a template
     │    └── SubjectOutsideStream           a subject its stream does not take [jetstream]
     ├── InvalidHeader (also ValueError)     a header name or value cannot travel on the wire
     ├── InvalidKey (also ValueError)        a Key-Value key or object name is bad [jetstream]
     ├── SettlementError                     a message could not be settled
     │    ├── AlreadySettled                 ack/nak/term after the message was settled
     │    └── AckNotConfirmed                a confirmed ack got no confirmation
     ├── PublishError                        a publish failed; ``may_be_stored`` says
     │    │                                  whether the broker may still have stored it
     │    ├── ExpectationFailed              optimistic concurrency: the stream was not
     │    │    │                             in the expected state [jetstream]
     │    │    ├── KeyExists                 Key-Value create: the key has a value
     │    │    └── RevisionMismatch          Key-Value update: the key moved on
     │    ├── StreamFeatureDisabled          the stream does not allow what the publish
     │    │                                  asks for (a TTL, an atomic batch, ...) [jetstream]
     │    ├── InvalidSchedule                the server refused a message schedule [jetstream]
     │    ├── DuplicateMessageId             a counter increment's message ID was counted
     │    │                                  before, on another subject [jetstream]
     │    ├── FastBatchError                 a fast batch ended early: the gap report [jetstream]
     │    ├── PayloadTooLarge                headers and body exceed the server's limit
     │    └── MaxPayloadLowered              the server lowered its limit and closed the
     │                                       connection for an earlier, larger message
     ├── SubscribeError                      a subscription could not start or failed
     ├── PermissionDenied (also PublishError, SubscribeError, RequestError)
     │                                       the server refused an operation on a subject
     ├── TransportError                      the connection or broker failed
     │    ├── JetStreamUnavailable           JetStream is not enabled for the account [jetstream]
     │    │                                  (also PublishError, SubscribeError)
     │    └── ProvisioningError              a stream/consumer could not be provisioned [jetstream]
     │         ├── StreamNotFound
     │         │    └── BucketNotFound       no such Key-Value or Object store bucket
     │         ├── ConsumerNotFound
     │         ├── SubjectOverlap            the subjects belong to another stream
     │         ├── ResourceLimit             the account or server has no room for it
     │         ├── IncompatibleConfig        an existing stream/consumer cannot change so
     │         │    └── ConfigNotApplied     the server took the config, but not as asked
     │         └── FeatureUnsupported        the server's version lacks a feature asked for
     │                                       (also PublishError, SubscribeError) [jetstream]
     ├── ObjectNotFound (also KeyError)      no such object in an Object store bucket [jetstream]
     ├── DigestMismatch                      an object read back is not what was stored [jetstream]
     ├── RequestError                        a request/reply exchange failed
     │    ├── RequestTimeout (also TimeoutError)   no reply within the timeout
     │    ├── NoResponders                   nobody is listening on the subject
     │    └── RemoteError                    the responder replied with an error
     ├── ServiceError                        raised by responders: reply with this code
     ├── HandlerTimeout (also TimeoutError)  a handler ran longer than its timeout
     ├── NonRetryable                        raised by handlers: a permanent failure
     ├── PoisonMessage                       a message crashed the worker processes
     │                                       handling it (what its dead letter names)
     ├── MissingDependency (also ImportError)  an optional dependency is not installed
     └── SparkError                          the Spark adapter [spark]
          ├── SchemaError (also TypeError)   a payload type has no Spark schema
          ├── SourceOptionError (also ValueError)  a bad source/sink option
          └── DataLossError                  a range the query still needed was deleted

[jetstream]: :mod:`goflux.transports.jetstream` (the JetStream errors are importable
from :mod:`goflux` too, the same objects); [spark]: :mod:`goflux.transports.spark`.

``NonRetryable`` is meant to be raised by application handlers (``raise
NonRetryable("bad order") from cause``); :func:`is_non_retryable` recognises it
anywhere in an exception's ``raise ... from`` chain or inside an exception group, so a
wrapper exception raised around it still counts as permanent.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = (
    "AckNotConfirmed",
    "AlreadySettled",
    "CodecError",
    "DecodeError",
    "EncodeError",
    "GofluxError",
    "HandlerTimeout",
    "InvalidHeader",
    "InvalidSubject",
    "MaxPayloadLowered",
    "MissingDependency",
    "NoResponders",
    "NonRetryable",
    "PayloadTooLarge",
    "PermissionDenied",
    "PoisonMessage",
    "PublishError",
    "RemoteError",
    "RequestError",
    "RequestTimeout",
    "ServiceError",
    "SettlementError",
    "SubjectError",
    "SubjectMismatch",
    "SubscribeError",
    "TransportError",
    "find_in_chain",
    "is_non_retryable",
)


class GofluxError(Exception):
    """Root of every error raised by goflux."""


class CodecError(GofluxError, ValueError):
    """A codec could not convert between a value and bytes.

    Attributes:
        type_name: Name of the payload type the codec works with.
    """

    def __init__(self, message: str, *, type_name: str) -> None:
        super().__init__(message)
        self.type_name = type_name


class EncodeError(CodecError):
    """A value could not be encoded: wrong type, NaN/Infinity in JSON, unserialisable data."""


class DecodeError(CodecError):
    """Bytes could not be decoded into the payload type (malformed or invalid data).

    Attributes:
        size: Number of bytes that failed to decode.
    """

    def __init__(self, message: str, *, type_name: str, size: int) -> None:
        super().__init__(message, type_name=type_name)
        self.size = size


class InvalidSubject(GofluxError, ValueError):
    """A subject or subscription pattern breaks the NATS subject rules.

    Attributes:
        subject: The offending subject, as given.
    """

    def __init__(self, message: str, *, subject: object) -> None:
        super().__init__(message)
        self.subject = subject


class SubjectError(InvalidSubject):
    """A subject built from parts breaks a rule: which part, and which rule.

    Raised by the subject builder (:class:`goflux.Subjects`) for a bad segment and by
    :class:`goflux.SubjectTemplate` for a bad template or a value that cannot be one
    token. An :class:`InvalidSubject`, so ``except InvalidSubject`` catches it too.

    Attributes:
        subject: The subject (or template) being built, as far as it is known.
        segment: The offending segment or value, as given (None when the whole subject
            is at fault).
        part: What the segment is (``"domain"``, ``"prefix segment 2"``, ``"parameter
            'region'"``).
        rule: The rule broken, in a few words (``"must not be empty"``).
    """

    def __init__(
        self, message: str, *, subject: object, segment: object, part: str, rule: str
    ) -> None:
        super().__init__(message, subject=subject)
        self.segment = segment
        self.part = part
        self.rule = rule


class SubjectMismatch(SubjectError):
    """A subject does not fit a :class:`goflux.SubjectTemplate`.

    Either its tokens do not match the template's pattern, or its parameter values do
    not validate as the template's parameter type (the pydantic ``ValidationError`` is
    chained as ``__cause__``).

    Attributes:
        template: The template's text (``"orders.{region}.{order_id}.created"``).
    """

    def __init__(
        self,
        message: str,
        *,
        subject: object,
        template: str,
        segment: object = None,
        part: str = "subject",
        rule: str,
    ) -> None:
        super().__init__(message, subject=subject, segment=segment, part=part, rule=rule)
        self.template = template


class InvalidHeader(GofluxError, ValueError):
    """A header name or value cannot travel on the wire (bad characters, CR/LF, empty)."""


class SettlementError(GofluxError):
    """A message could not be acknowledged, negatively acknowledged or terminated."""


class AlreadySettled(SettlementError):
    """``ack``/``nak``/``term``/``in_progress`` was called on an already settled message.

    Attributes:
        outcome: How the message was settled first (``"ack"``, ``"nak"`` or ``"term"``).
    """

    def __init__(self, message: str, *, outcome: str) -> None:
        super().__init__(message)
        self.outcome = outcome


class AckNotConfirmed(SettlementError):
    """An ack sent for confirmation was not confirmed by the server (JetStream).

    Whether the server applied it is unknown: if it did not, the message is
    redelivered after ``ack_wait``. The cause (no reply in time, or nobody took the ack
    because the consumer is gone) is chained.

    Attributes:
        stream: The stream the message is in.
        consumer: The consumer that delivered it.
        sequence: The message's stream sequence.
    """

    def __init__(self, message: str, *, stream: str, consumer: str, sequence: int) -> None:
        super().__init__(message)
        self.stream = stream
        self.consumer = consumer
        self.sequence = sequence


class PublishError(GofluxError):
    """A publish failed.

    Attributes:
        subject: The subject of the failed publish.
        may_be_stored: True when the broker may have stored the message despite the
            error (for example an acknowledgement timeout): retry with the same
            message ID so the server de-duplicates it.
        permanent: True when publishing the same message again cannot succeed (the
            publisher or its connection is closed, the payload is too large, the
            server refused it as a bad request, an expectation failed); retry
            middleware gives up at once. Never True together with ``may_be_stored``:
            a message that may have been stored is worth one more attempt with the
            same message ID, which the server de-duplicates (or refuses at once, and
            then permanently), so ``may_be_stored=True`` wins.
        err_code: The JetStream error code of a refusal (e.g. 10077), if any.
        retry_after: Seconds the receiver asked to wait before another attempt (an
            HTTP endpoint's ``Retry-After``), if it said; retry middleware waits at
            least that long.
    """

    def __init__(
        self,
        message: str,
        *,
        subject: str,
        may_be_stored: bool = False,
        permanent: bool = False,
        err_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.subject = subject
        self.may_be_stored = may_be_stored
        self.permanent = permanent and not may_be_stored
        self.err_code = err_code
        self.retry_after = retry_after


class PayloadTooLarge(PublishError):
    """The message (headers and body) exceeds the server's ``max_payload``; nothing was sent.

    Sending it anyway would make the server close the connection. When the server had
    lowered the limit without telling the client, the message was sent, and the
    server refused it and closed the connection (the client reconnects): nothing
    delivered or stored either.

    Attributes:
        size: Bytes of headers and body.
        limit: The server's limit in bytes.
    """

    def __init__(self, message: str, *, subject: str, size: int, limit: int) -> None:
        super().__init__(message, subject=subject, permanent=True)
        self.size = size
        self.limit = limit


class MaxPayloadLowered(PublishError):
    """The server lowered its ``max_payload`` and closed the connection for a larger message.

    A config reload may lower the limit; the server tells no client, and closes the
    connection of one that sends a message over it. That message was lost, and so
    was what the client sent after it before the connection dropped; the client
    reconnects (and learns the new limit). Raised by a core NATS publish that comes
    next (then this one was not sent: publish it again) or that was waiting for the
    server's confirmation, and by a JetStream publish that was waiting for its
    PubAck (then it may have been stored: publish it again with the same message
    ID). Not ``permanent``: a message over the new limit is refused with
    :class:`PayloadTooLarge` on its next attempt, before anything is sent.

    Attributes:
        limit: The server's new ``max_payload`` in bytes (0 when the client had not
            reconnected in time to learn it).
        announced: The limit the server had announced before, in bytes.
    """

    def __init__(
        self,
        message: str,
        *,
        subject: str,
        limit: int,
        announced: int,
        may_be_stored: bool = False,
    ) -> None:
        super().__init__(message, subject=subject, may_be_stored=may_be_stored)
        self.limit = limit
        self.announced = announced


class SubscribeError(GofluxError):
    """A subscription could not be started, or failed while running."""


class TransportError(GofluxError):
    """The connection to the broker, or the broker itself, failed."""


class RequestError(GofluxError):
    """A request/reply exchange failed.

    Attributes:
        subject: The subject the request was sent to.
    """

    def __init__(self, message: str, *, subject: str) -> None:
        super().__init__(message)
        self.subject = subject


class RequestTimeout(RequestError, TimeoutError):
    """No reply arrived within the request timeout.

    Attributes:
        timeout: The timeout that expired, in seconds.
    """

    def __init__(self, message: str, *, subject: str, timeout: float) -> None:
        super().__init__(message, subject=subject)
        self.timeout = timeout


class NoResponders(RequestError):
    """Nobody is subscribed to the request subject; reported at once, not after a timeout."""


class RemoteError(RequestError):
    """The responder's handler failed and replied with an error.

    Attributes:
        remote_message: The error description sent by the responder.
        code: The error code sent by the responder (HTTP-like, e.g. 500).
    """

    def __init__(self, message: str, *, subject: str, remote_message: str, code: int) -> None:
        super().__init__(message, subject=subject)
        self.remote_message = remote_message
        self.code = code


class PermissionDenied(PublishError, SubscribeError, RequestError):
    """The server refused an operation on a subject: the credentials lack the permission.

    It is reported at once, from the server's own refusal, never after a timeout. It is
    a :class:`PublishError` (``permanent=True``: a retry cannot succeed until the
    permissions change, when the publish itself was refused; when only the inbox its
    acknowledgement would come to was, it went out: ``may_be_stored=True`` and not
    ``permanent``, and a retry fails at once, permanently, without sending), a
    :class:`SubscribeError` and a :class:`RequestError`, so the handler a caller
    already has for the operation catches it.

    Attributes:
        operation: What was refused: ``"publish"``, ``"subscribe"`` or ``"connect"``
            (the server refused the credentials themselves, e.g. on a reconnect after
            the user was removed).
        subject: The subject refused, or ``""`` for ``"connect"``.
        reason: The server's words.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str,
        subject: str,
        reason: str,
        may_be_stored: bool = False,
    ) -> None:
        GofluxError.__init__(self, message)
        self.operation = operation
        self.subject = subject
        self.reason = reason
        self.may_be_stored = may_be_stored
        self.permanent = not may_be_stored
        self.err_code: int | None = None


class ServiceError(GofluxError):
    """Raise from a responder's handler to reply with a specific error code and message.

    The requester raises :class:`RemoteError` with the same ``code`` and message.
    Any other exception replies with code 500, an undecodable request with 400.

    Attributes:
        code: The error code sent back (HTTP-like, 400 to 599).
        description: The message sent back.

    Raises:
        ValueError: ``code`` is outside 400 to 599.
    """

    def __init__(self, code: int, description: str) -> None:
        if not 400 <= code <= 599:
            raise ValueError(f"service error codes are 400 to 599, got {code}")
        super().__init__(f"{code} {description}")
        self.code = code
        self.description = description


class HandlerTimeout(GofluxError, TimeoutError):
    """A handler ran longer than the ``timeout`` middleware allows (a retryable failure).

    Attributes:
        seconds: The timeout that expired.
    """

    def __init__(self, message: str, *, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class MissingDependency(GofluxError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it.

    Raised where goflux imports it on first use (nats-py, uvicorn, watchfiles), so
    that importing goflux needs none of them.
    """


class NonRetryable(GofluxError):
    """Marks a handler failure as permanent: the message must not be redelivered.

    Raise it from a handler, chaining the real cause::

        raise NonRetryable("order has no lines") from exc

    Retry middleware terminates (and dead-letters) such messages at once instead of
    retrying them. It is recognised through wrapping exceptions; see
    :func:`is_non_retryable`.
    """


class PoisonMessage(GofluxError):
    """A message was being handled each time its worker process died, and is quarantined.

    Under ``goflux run --workers N`` a message in flight when a worker crashed
    (``os._exit``, a segfault, SIGKILL, out of memory) is recognised when it is
    redelivered; after ``--quarantine-after`` such crashes it is dead-lettered (with
    this as the dead letter's ``Dead-Letter-Error-Type`` and the reason
    ``crashed_worker``) if its subscriber has a dead letter, and terminated, before any
    handler sees it again. It is never raised to a caller: a crash raises nothing.
    """


_E = TypeVar("_E", bound=BaseException)


def find_in_chain(exc: BaseException, kind: type[_E], *, context: bool = True) -> _E | None:
    """Return the first exception of type ``kind`` in ``exc``'s chain, or None.

    Looks at ``exc`` itself, its ``__cause__`` links, its ``__context__`` links (unless
    ``context`` is False: then only explicit ``raise ... from`` causes count), and
    inside exception groups, guarding against cycles.
    """
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, kind):
            return current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(reversed(current.exceptions))
        if context and current.__context__ is not None and not current.__suppress_context__:
            stack.append(current.__context__)
        if current.__cause__ is not None:
            stack.append(current.__cause__)
    return None


def is_non_retryable(exc: BaseException) -> bool:
    """Report whether ``exc`` is, or was explicitly caused by, a :class:`NonRetryable`.

    Looks through ``raise ... from`` causes and exception groups, not through the
    implicit context: an error raised while handling a ``NonRetryable`` (a failing
    cleanup, say) is a new failure of its own.
    """
    return find_in_chain(exc, NonRetryable, context=False) is not None
