"""goflux: typed publish/subscribe for asyncio, wire compatible with Go goflux.

Application code is written against ``Publisher[T]``, ``Subscriber[T]``,
``Requester[Req, Resp]`` and ``Responder[Req, Resp]`` and never sees bytes; transports
(``goflux.transports.channel``, ``nats``, ``jetstream``, ``spark``) implement them.
"""

from goflux._version import __version__
from goflux.chain import chain
from goflux.codecs import BytesCodec, Codec, JsonCodec, StrCodec
from goflux.errors import (
    AlreadySettled,
    CodecError,
    ConsumerNotFound,
    DecodeError,
    EncodeError,
    ExpectationFailed,
    GofluxError,
    IncompatibleConfig,
    InvalidHeader,
    InvalidSubject,
    NonRetryable,
    NoResponders,
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
from goflux.headers import Headers, HeadersLike
from goflux.interfaces import (
    Closeable,
    Handler,
    Middleware,
    Publisher,
    Requester,
    RequestHandler,
    Responder,
    Subscriber,
    Subscription,
)
from goflux.message import Acker, Delivery, Message
from goflux.receipt import PublishReceipt
from goflux.telemetry import Telemetry

__all__ = (
    "Acker",
    "AlreadySettled",
    "BytesCodec",
    "Closeable",
    "Codec",
    "CodecError",
    "ConsumerNotFound",
    "DecodeError",
    "Delivery",
    "EncodeError",
    "ExpectationFailed",
    "GofluxError",
    "Handler",
    "Headers",
    "HeadersLike",
    "IncompatibleConfig",
    "InvalidHeader",
    "InvalidSubject",
    "JsonCodec",
    "Message",
    "Middleware",
    "NoResponders",
    "NonRetryable",
    "ProvisioningError",
    "PublishError",
    "PublishReceipt",
    "Publisher",
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
    "TransportError",
    "__version__",
    "chain",
    "is_non_retryable",
)
