"""goflux: typed publish/subscribe for asyncio, wire compatible with Go goflux.

Application code is written against ``Publisher[T]``, ``Subscriber[T]``,
``Requester[Req, Resp]`` and ``Responder[Req, Resp]`` and never sees bytes; transports
(``goflux.transports.channel``, ``nats``, ``jetstream``, ``spark``) implement them.
"""

from goflux._batches import MicroBatches, micro_batches
from goflux._chain import chain, chain_publishers
from goflux._codecs import BytesCodec, Codec, JsonCodec, StrCodec
from goflux._deadletter import DeadLetter, DeadLetterReason
from goflux._errors import (
    AckNotConfirmed,
    AlreadySettled,
    CodecError,
    ConsumerNotFound,
    DecodeError,
    EncodeError,
    ExpectationFailed,
    GofluxError,
    HandlerTimeout,
    IncompatibleConfig,
    InvalidHeader,
    InvalidSubject,
    NonRetryable,
    NoResponders,
    PayloadTooLarge,
    ProvisioningError,
    PublishError,
    RemoteError,
    RequestError,
    RequestTimeout,
    ServiceError,
    SettlementError,
    StreamNotFound,
    SubjectOverlap,
    SubscribeError,
    TransportError,
    is_non_retryable,
)
from goflux._group import Group
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
from goflux._pipes import pipe, pipe_flat_map, pipe_map
from goflux._processing import ProcessStats, process
from goflux._receipt import PublishReceipt
from goflux._streams import MessageStream, message_stream
from goflux._subjects import MAX_SUBJECT_BYTES
from goflux._telemetry import Telemetry
from goflux._topics import (
    BoundPublisher,
    BoundSubscriber,
    Topic,
    bind_publisher,
    bind_subscriber,
    bind_topic,
)
from goflux._version import __version__

__all__ = (
    "MAX_SUBJECT_BYTES",
    "AckNotConfirmed",
    "Acker",
    "AlreadySettled",
    "BoundPublisher",
    "BoundSubscriber",
    "BytesCodec",
    "Closeable",
    "Codec",
    "CodecError",
    "ConsumerNotFound",
    "DeadLetter",
    "DeadLetterReason",
    "DecodeError",
    "Delivery",
    "EncodeError",
    "ExpectationFailed",
    "GenericMiddleware",
    "GenericPublisherMiddleware",
    "GofluxError",
    "Group",
    "Handler",
    "HandlerTimeout",
    "Headers",
    "HeadersLike",
    "IncompatibleConfig",
    "InvalidHeader",
    "InvalidSubject",
    "JsonCodec",
    "Message",
    "MessageStream",
    "MicroBatches",
    "Middleware",
    "NoResponders",
    "NonRetryable",
    "PayloadTooLarge",
    "ProcessStats",
    "ProvisioningError",
    "PublishError",
    "PublishReceipt",
    "Publisher",
    "PublisherMiddleware",
    "RemoteError",
    "RequestError",
    "RequestHandler",
    "RequestTimeout",
    "Requester",
    "Responder",
    "ServiceError",
    "SettlementError",
    "StrCodec",
    "StreamNotFound",
    "SubjectOverlap",
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
