"""The errors only the JetStream transport raises: streams, consumers, buckets, objects.

Each derives from a core error (:mod:`goflux`'s ``PublishError``, ``TransportError``,
``GofluxError``), so code that catches those catches these too::

    InvalidKey (also ValueError)          a Key-Value key or object name breaks the rules
    InvalidSubject (also ValueError)
     └── SubjectOutsideStream             a subject the stream does not take
    PublishError
     ├── ExpectationFailed                optimistic concurrency: the stream was not in
     │    │                               the expected state
     │    ├── KeyExists                   Key-Value create: the key has a value
     │    └── RevisionMismatch            Key-Value update: the key moved on
     ├── StreamFeatureDisabled            the stream does not allow what the publish asks
     │                                    for (a TTL, an atomic batch, ...)
     ├── InvalidSchedule                  the server refused a message schedule (its
     │                                    pattern, target, TTL or time zone)
     ├── DuplicateMessageId               a counter increment's message ID was already
     │                                    counted, on another subject
     └── FastBatchError                   a fast batch ended early: which of its
                                          messages are stored (the gap report)
    TransportError
     ├── JetStreamUnavailable             JetStream is not enabled for the account
     │                                    (also PublishError, SubscribeError)
     └── ProvisioningError                a stream/consumer could not be provisioned
          ├── StreamNotFound
          │    └── BucketNotFound         no such Key-Value or Object store bucket
          ├── ConsumerNotFound
          ├── SubjectOverlap              the subjects belong to another stream
          ├── ResourceLimit               the account or server has no room for it
          ├── IncompatibleConfig          an existing stream/consumer cannot change so
          │    └── ConfigNotApplied       the server took the config, but not as asked
          └── FeatureUnsupported          the server's version lacks a feature asked for
                                          (also PublishError, SubscribeError)
    NotASchedule (also ValueError)        cancel_schedule: the subject's last message is
                                          not a schedule (nothing deleted)
    ObjectNotFound (also KeyError)        no such object in an Object store bucket
    DigestMismatch                        an object read back is not what was stored

They are importable from :mod:`goflux` too: the same objects.
"""

from __future__ import annotations

from goflux._errors import (
    GofluxError,
    InvalidSubject,
    PublishError,
    SubscribeError,
    TransportError,
)

__all__ = (
    "BucketNotFound",
    "ConfigNotApplied",
    "ConsumerNotFound",
    "DigestMismatch",
    "DuplicateMessageId",
    "ExpectationFailed",
    "FastBatchError",
    "FeatureUnsupported",
    "IncompatibleConfig",
    "InvalidKey",
    "InvalidSchedule",
    "JetStreamUnavailable",
    "KeyExists",
    "NotASchedule",
    "ObjectNotFound",
    "ProvisioningError",
    "ResourceLimit",
    "RevisionMismatch",
    "StreamFeatureDisabled",
    "StreamNotFound",
    "SubjectOutsideStream",
    "SubjectOverlap",
)


class InvalidKey(GofluxError, ValueError):
    """A Key-Value key or an object name cannot be used (empty, bad characters, ...)."""


class NotASchedule(GofluxError, ValueError):
    """:func:`~goflux.transports.jetstream.cancel_schedule` found no schedule to end.

    The last message on the subject has no ``Nats-Schedule`` header: an ordinary
    message (or one a schedule produced), which ``cancel_schedule`` does not delete.

    Attributes:
        stream: The stream asked.
        subject: The subject whose last message is not a schedule.
        sequence: That message's stream sequence.
    """

    def __init__(self, message: str, *, stream: str, subject: str, sequence: int) -> None:
        super().__init__(message)
        self.stream = stream
        self.subject = subject
        self.sequence = sequence


class SubjectOutsideStream(InvalidSubject):
    """A message goes to a subject its stream does not take; nothing of it was sent.

    A fast batch goes to one stream: every message's subject must be one of that
    stream's subjects. An :class:`~goflux.InvalidSubject`, so ``except
    InvalidSubject`` catches it too.

    Attributes:
        subject: The subject the message goes to.
        stream: The stream.
        subjects: The stream's subjects.
    """

    def __init__(self, message: str, *, subject: str, stream: str, subjects: tuple[str, ...]):
        super().__init__(message, subject=subject)
        self.stream = stream
        self.subjects = subjects


class ExpectationFailed(PublishError):
    """The stream was not in the state the publish expected (optimistic concurrency).

    Nothing was stored.

    Attributes:
        expectation: Which expectation failed: ``"stream"``, ``"last_sequence"``,
            ``"last_subject_sequence"`` or ``"last_message_id"``.
    """

    def __init__(self, message: str, *, subject: str, expectation: str) -> None:
        super().__init__(message, subject=subject, may_be_stored=False, permanent=True)
        self.expectation = expectation


class KeyExists(ExpectationFailed):
    """A Key-Value ``create`` found a value under the key; nothing was written.

    Attributes:
        bucket: The bucket.
        key: The key that has a value.
        revision: The key's current revision, where known.
    """

    def __init__(
        self, message: str, *, subject: str, bucket: str, key: str, revision: int | None = None
    ) -> None:
        super().__init__(message, subject=subject, expectation="last_subject_sequence")
        self.bucket = bucket
        self.key = key
        self.revision = revision


class RevisionMismatch(ExpectationFailed):
    """A Key-Value ``update`` expected another revision of the key; nothing was written.

    Attributes:
        bucket: The bucket.
        key: The key.
        expected: The revision the update was made against.
        actual: The key's revision at the server, where known.
    """

    def __init__(
        self,
        message: str,
        *,
        subject: str,
        bucket: str,
        key: str,
        expected: int,
        actual: int | None = None,
    ) -> None:
        super().__init__(message, subject=subject, expectation="last_subject_sequence")
        self.bucket = bucket
        self.key = key
        self.expected = expected
        self.actual = actual


class StreamFeatureDisabled(PublishError):
    """The stream does not allow what the publish asks for; nothing was stored.

    A per-message TTL needs the stream setting ``allow_msg_ttl``, an atomic batch
    ``allow_atomic``, a rollup ``allow_rollup_hdrs``, a schedule
    ``allow_msg_schedules``, a counter increment ``allow_msg_counter``: set it with
    ``ensure_stream(..., <setting>=True)``.

    Attributes:
        stream: The stream that refused the publish.
        setting: The stream setting that would allow it (``"allow_msg_ttl"``, ...).
    """

    def __init__(self, message: str, *, subject: str, stream: str, setting: str) -> None:
        super().__init__(message, subject=subject, permanent=True)
        self.stream = stream
        self.setting = setting


class InvalidSchedule(PublishError):
    """The server refused a message schedule; nothing was stored.

    Its pattern (``Nats-Schedule``), target subject (it must be another subject of
    the same stream), TTL, time zone, rollup or source is not one the server takes.

    Attributes:
        stream: The stream that refused it.
        reason: What was refused: ``"pattern"``, ``"target"``, ``"ttl"``,
            ``"time_zone"``, ``"rollup"``, ``"source"``, or ``"scheduler"`` (a
            ``Nats-Scheduler``/``Nats-Schedule-Next`` pair set by hand that it does
            not take).
        schedule: The schedule as sent (``"@every 1s"``, ...), ``""`` where unknown.
        target: The target subject as sent, ``""`` where unknown.
    """

    def __init__(
        self,
        message: str,
        *,
        subject: str,
        stream: str,
        reason: str,
        schedule: str = "",
        target: str = "",
        err_code: int | None = None,
    ) -> None:
        super().__init__(message, subject=subject, permanent=True, err_code=err_code)
        self.stream = stream
        self.reason = reason
        self.schedule = schedule
        self.target = target


class DuplicateMessageId(PublishError):
    """A counter increment's message ID was counted before, for another subject.

    The stream de-duplicated the increment (nothing was added): within its duplicate
    window the ID belongs to an earlier message on ``counted_subject``, or to one that
    is gone (``counted_subject`` ``None``). Reusing a message ID for a different
    increment is a mistake in the caller: a retry with the same ID is refused the
    same way.

    Attributes:
        stream: The counter stream.
        message_id: The reused message ID.
        counted_subject: The subject the ID counted, ``None`` when its message is gone.
        sequence: The stream sequence of the message the ID counted.
    """

    def __init__(
        self,
        message: str,
        *,
        subject: str,
        stream: str,
        message_id: str,
        counted_subject: str | None,
        sequence: int,
    ) -> None:
        super().__init__(message, subject=subject, permanent=True)
        self.stream = stream
        self.message_id = message_id
        self.counted_subject = counted_subject
        self.sequence = sequence


class FastBatchError(PublishError):
    """A fast batch ended before all its messages were stored: the gap report.

    The batch's first ``stored`` messages are stored, in order, none missing (the
    server ends a batch at its first lost or refused message). When ``may_be_stored``
    is False, none after them is. When it is True the outcome of the messages from
    ``stored`` up to (not including) ``unknown_until`` is unknown (no answer came: a
    timeout, a closed connection, a server that forgot the batch): each may or may
    not be stored; publish them again with their message IDs so the server
    de-duplicates them. None from ``unknown_until`` on is stored.

    Attributes:
        stream: The batch's stream.
        batch_id: The batch's ID.
        stored: How many of the batch's first messages are known to be stored.
        sent: How many messages were sent; any after them were not.
        unknown_until: The position of the first message known not to be stored
            (``stored`` when every other one is known not to be).
        index: The position (from 0) of the message that ended the batch (refused,
            lost, bad input, or the one the message source raised at), if one did.
        last_sequence: The stream sequence of the last message stored, when the
            server said (its PubAck).
        err_code: The JetStream error code of the server's refusal, if it refused.
    """

    def __init__(
        self,
        message: str,
        *,
        subject: str,
        stream: str,
        batch_id: str,
        stored: int,
        sent: int,
        index: int | None,
        last_sequence: int | None,
        may_be_stored: bool,
        unknown_until: int | None = None,
        err_code: int | None = None,
    ) -> None:
        super().__init__(message, subject=subject, may_be_stored=may_be_stored, err_code=err_code)
        self.stream = stream
        self.batch_id = batch_id
        self.stored = stored
        self.sent = sent
        self.unknown_until = stored if unknown_until is None else unknown_until
        self.index = index
        self.last_sequence = last_sequence


class JetStreamUnavailable(TransportError, PublishError, SubscribeError):
    """JetStream is not enabled for the account (or on the server) the connection uses.

    A publish, a subscription and a stream or consumer request all raise it, so it is
    a :class:`~goflux.PublishError` too (``permanent``: nothing can be stored until
    the account gets JetStream; ``may_be_stored`` False) and a
    :class:`~goflux.SubscribeError`.

    Attributes:
        err_code: The JetStream error code (10039 for the account), if the server sent one.
        subject: The subject of the publish it failed, or ``""``.
    """

    def __init__(self, message: str, *, err_code: int | None = None, subject: str = "") -> None:
        GofluxError.__init__(self, message)
        self.err_code = err_code
        self.subject = subject
        self.may_be_stored = False
        self.permanent = True


class ProvisioningError(TransportError):
    """The server refused to create or update a stream or consumer.

    Attributes:
        code: The server's status code (e.g. 400, 404, 500), if it sent one.
        err_code: The JetStream error code (e.g. 10065), if it sent one.
    """

    def __init__(
        self, message: str, *, code: int | None = None, err_code: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.err_code = err_code


class StreamNotFound(ProvisioningError):
    """The stream does not exist."""


class BucketNotFound(StreamNotFound):
    """No Key-Value or Object store bucket of that name exists.

    Attributes:
        bucket: The bucket's name.
    """

    def __init__(self, message: str, *, bucket: str) -> None:
        super().__init__(message)
        self.bucket = bucket


class ConsumerNotFound(ProvisioningError):
    """The consumer does not exist on its stream."""


class SubjectOverlap(ProvisioningError):
    """A stream's subjects overlap those of another stream.

    Attributes:
        streams: Names of the streams already capturing some of the subjects.
    """

    def __init__(
        self,
        message: str,
        *,
        streams: tuple[str, ...] = (),
        code: int | None = None,
        err_code: int | None = None,
    ) -> None:
        super().__init__(message, code=code, err_code=err_code)
        self.streams = streams


class ResourceLimit(ProvisioningError):
    """The account or server has no room for the stream or consumer.

    Storage, memory, or the maximum number of streams or consumers (e.g. err_code
    10047) ran out.
    """


class IncompatibleConfig(ProvisioningError):
    """An existing stream or consumer cannot be changed to the requested config."""


class ConfigNotApplied(IncompatibleConfig):
    """The server took a stream or consumer config, but reports other values than asked.

    A server that does not know a field drops it without a word; one that cannot do
    what was asked may change a value. Fields not asked for (the server's defaults)
    do not count. Where the field is a feature the server's version lacks,
    :class:`FeatureUnsupported` is raised instead.

    Attributes:
        fields: The fields asked for whose value differs in the server's reply.
        server_version: The version of the server hosting the stream or consumer
            (from its ``_nats.ver`` metadata), None where unknown (older than 2.11).
    """

    def __init__(
        self, message: str, *, fields: tuple[str, ...], server_version: str | None
    ) -> None:
        super().__init__(message)
        self.fields = fields
        self.server_version = server_version


class FeatureUnsupported(PublishError, SubscribeError, ProvisioningError):
    """The server's version lacks a feature the call asks for.

    Raised before anything is sent when the connected server's version lacks it (an
    atomic batch needs nats-server 2.12, a per-message TTL 2.11, ...). Raised after
    the fact when a server further away turned out to lack it (a stream hosted by an
    older server behind a leaf node): ``may_be_stored`` then says whether messages
    were stored anyway. It is a :class:`~goflux.PublishError` (``permanent``), a
    :class:`~goflux.SubscribeError` and a :class:`ProvisioningError`, so the handler
    a caller already has for the operation catches it.

    Attributes:
        feature: What the server lacks (``"atomic batch publish"``, ...).
        server_version: The version of the server that lacks it, None where unknown.
        since: The first nats-server version that has it (``"2.12.0"``).
        subject: The subject of the publish it failed, or ``""``.
    """

    def __init__(
        self,
        message: str,
        *,
        feature: str,
        server_version: str | None,
        since: str,
        subject: str = "",
        may_be_stored: bool = False,
    ) -> None:
        GofluxError.__init__(self, message)
        self.feature = feature
        self.server_version = server_version
        self.since = since
        self.subject = subject
        self.may_be_stored = may_be_stored
        self.permanent = True
        self.err_code: int | None = None
        self.code: int | None = None


class ObjectNotFound(GofluxError, KeyError):
    """No object of that name is in the Object store bucket (or it was deleted).

    Attributes:
        bucket: The bucket.
        name: The object's name.
    """

    def __init__(self, message: str, *, bucket: str, name: str) -> None:
        super().__init__(message)
        self.bucket = bucket
        self.name = name

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class DigestMismatch(GofluxError):
    """An object read back does not match the digest stored with it (corrupt or changed).

    Attributes:
        bucket: The bucket.
        name: The object's name.
        expected: The digest stored with the object (``SHA-256=...``).
        actual: The digest of what was read.
    """

    def __init__(self, message: str, *, bucket: str, name: str, expected: str, actual: str) -> None:
        super().__init__(message)
        self.bucket = bucket
        self.name = name
        self.expected = expected
        self.actual = actual
