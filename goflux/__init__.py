"""goflux: typed publish/subscribe for asyncio, wire compatible with Go goflux.

Application code is written against ``Publisher[T]``, ``Subscriber[T]``,
``Requester[Req, Resp]`` and ``Responder[Req, Resp]`` and never sees bytes; transports
(``goflux.transports.channel``, ``nats``, ``jetstream``, ``spark``) implement them.

The JetStream errors (``StreamNotFound``, ``KeyExists``, ...) are defined by
:mod:`goflux.transports.jetstream` and importable from here too (the same objects),
with or without nats-py; they are loaded on first use, so that importing goflux
imports no nats-py.
"""

from typing import TYPE_CHECKING

from goflux._codecs import BytesCodec, Codec, JsonCodec, StrCodec
from goflux._compose.batches import MicroBatches, micro_batches
from goflux._compose.chain import chain, chain_publishers
from goflux._compose.deadletter import DeadLetter, DeadLetterReason
from goflux._compose.endpoints import About, Endpoint, HeaderDocs
from goflux._compose.group import Group
from goflux._compose.pipes import pipe, pipe_flat_map, pipe_map
from goflux._compose.processing import ProcessStats, process
from goflux._compose.readiness import Check, GroupState, Readiness
from goflux._compose.streams import MessageStream, message_stream
from goflux._compose.topics import (
    BoundPublisher,
    BoundSubscriber,
    Topic,
    bind_publisher,
    bind_subscriber,
    bind_topic,
)
from goflux._errors import (
    AckNotConfirmed,
    AlreadySettled,
    CodecError,
    DecodeError,
    EncodeError,
    GofluxError,
    HandlerTimeout,
    InvalidHeader,
    InvalidSubject,
    MaxPayloadLowered,
    MissingDependency,
    NonRetryable,
    NoResponders,
    PayloadTooLarge,
    PermissionDenied,
    PoisonMessage,
    PublishError,
    RemoteError,
    RequestError,
    RequestTimeout,
    ServiceError,
    SettlementError,
    SubjectError,
    SubjectMismatch,
    SubscribeError,
    TransportError,
    is_non_retryable,
)
from goflux._exports import publish_names as _publish_names
from goflux._headers import Headers, HeadersLike
from goflux._interfaces import (
    Closeable,
    GenericMiddleware,
    GenericPublisherMiddleware,
    Handler,
    Middleware,
    Publisher,
    PublisherMiddleware,
    Requester,
    RequestHandler,
    Responder,
    Subscriber,
    Subscription,
)
from goflux._message import Acker, Delivery, Message
from goflux._otel.telemetry import Telemetry
from goflux._receipt import PublishReceipt
from goflux._subject_builder import SubjectDomain, SubjectEntity, SubjectEvent, Subjects
from goflux._subject_template import SubjectTemplate
from goflux._subjects import MAX_SUBJECT_BYTES
from goflux._version import __version__

if TYPE_CHECKING:
    from goflux.transports.jetstream._errors import (
        BucketNotFound,
        ConfigNotApplied,
        ConsumerNotFound,
        DigestMismatch,
        DuplicateMessageId,
        ExpectationFailed,
        FastBatchError,
        FeatureUnsupported,
        IncompatibleConfig,
        InvalidKey,
        InvalidSchedule,
        JetStreamUnavailable,
        KeyExists,
        NotASchedule,
        ObjectNotFound,
        ProvisioningError,
        ResourceLimit,
        RevisionMismatch,
        StreamFeatureDisabled,
        StreamNotFound,
        SubjectOutsideStream,
        SubjectOverlap,
    )

__all__ = (
    "MAX_SUBJECT_BYTES",
    "About",
    "AckNotConfirmed",
    "Acker",
    "AlreadySettled",
    "BoundPublisher",
    "BoundSubscriber",
    "BucketNotFound",
    "BytesCodec",
    "Check",
    "Closeable",
    "Codec",
    "CodecError",
    "ConfigNotApplied",
    "ConsumerNotFound",
    "DeadLetter",
    "DeadLetterReason",
    "DecodeError",
    "Delivery",
    "DigestMismatch",
    "DuplicateMessageId",
    "EncodeError",
    "Endpoint",
    "ExpectationFailed",
    "FastBatchError",
    "FeatureUnsupported",
    "GenericMiddleware",
    "GenericPublisherMiddleware",
    "GofluxError",
    "Group",
    "GroupState",
    "Handler",
    "HandlerTimeout",
    "HeaderDocs",
    "Headers",
    "HeadersLike",
    "IncompatibleConfig",
    "InvalidHeader",
    "InvalidKey",
    "InvalidSchedule",
    "InvalidSubject",
    "JetStreamUnavailable",
    "JsonCodec",
    "KeyExists",
    "MaxPayloadLowered",
    "Message",
    "MessageStream",
    "MicroBatches",
    "Middleware",
    "MissingDependency",
    "NoResponders",
    "NonRetryable",
    "NotASchedule",
    "ObjectNotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "PoisonMessage",
    "ProcessStats",
    "ProvisioningError",
    "PublishError",
    "PublishReceipt",
    "Publisher",
    "PublisherMiddleware",
    "Readiness",
    "RemoteError",
    "RequestError",
    "RequestHandler",
    "RequestTimeout",
    "Requester",
    "ResourceLimit",
    "Responder",
    "RevisionMismatch",
    "ServiceError",
    "SettlementError",
    "StrCodec",
    "StreamFeatureDisabled",
    "StreamNotFound",
    "SubjectDomain",
    "SubjectEntity",
    "SubjectError",
    "SubjectEvent",
    "SubjectMismatch",
    "SubjectOutsideStream",
    "SubjectOverlap",
    "SubjectTemplate",
    "Subjects",
    "SubscribeError",
    "Subscriber",
    "Subscription",
    "Telemetry",
    "Topic",
    "TransportError",
    "__version__",
    "bind_publisher",
    "bind_subscriber",
    "bind_topic",
    "chain",
    "chain_publishers",
    "is_non_retryable",
    "message_stream",
    "micro_batches",
    "pipe",
    "pipe_flat_map",
    "pipe_map",
    "process",
)

# The names __all__ lists that no import above binds: the JetStream errors, which
# goflux.transports.jetstream defines; __getattr__ loads them on first use (they need
# no nats-py; with it installed, that package loads it).
_LAZY = frozenset(__all__) - frozenset(globals())

_publish_names(__name__, globals())


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from goflux.transports import jetstream  # noqa: PLC0415 - see above

        return getattr(jetstream, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
