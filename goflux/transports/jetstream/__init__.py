"""JetStream transport: durable, acknowledged publish/subscribe (needs ``goflux[nats]``).

::

    from goflux.transports import jetstream

    await jetstream.ensure_stream(js, name="ORDERS", subjects=["orders.>"])
    publisher = jetstream.Publisher(js, JsonCodec(Order))
    receipt = await publisher.publish("orders.created", order, message_id=order.id)
    subscriber = jetstream.Subscriber(js, JsonCodec(Order), stream="ORDERS")
    await subscriber.start("orders.*", handle)

The caller owns the nats-py connection and its JetStream context.

The errors (``StreamNotFound``, ``KeyExists``, ...) need no nats-py, and ``goflux``
re-exports them: without nats-py this package holds them alone, and every other name
raises ``ImportError`` saying which extra to install.
"""

from goflux._errors import MissingDependency
from goflux._exports import publish_names as _publish_names
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

try:
    import nats  # noqa: F401
except ImportError as exc:
    _NO_NATS: ImportError | None = exc
else:
    _NO_NATS = None
    from goflux.transports.jetstream._acker import JetStreamAcker
    from goflux.transports.jetstream._batch_get import get_batch, get_last_many
    from goflux.transports.jetstream._counter import Counter, CounterEntry
    from goflux.transports.jetstream._fast_batch import FastBatchReceipt
    from goflux.transports.jetstream._kv.bucket import KeyValue, key_value
    from goflux.transports.jetstream._kv.entry import Entry, Operation
    from goflux.transports.jetstream._kv.watch import EntryFeed, KeyWatcher
    from goflux.transports.jetstream._objects.info import InvalidObjectMeta, ObjectInfo, ObjectList
    from goflux.transports.jetstream._objects.read import ObjectReader
    from goflux.transports.jetstream._objects.store import ObjectStore, object_store
    from goflux.transports.jetstream._objects.watch import ObjectWatch
    from goflux.transports.jetstream._options import SubscriberSettings
    from goflux.transports.jetstream._priority import PRIORITY_POLICIES, unpin_consumer
    from goflux.transports.jetstream._provision import (
        ConsumerPause,
        ensure_consumer,
        ensure_stream,
        pause_consumer,
        resume_consumer,
    )
    from goflux.transports.jetstream._publisher import Outgoing, Publisher
    from goflux.transports.jetstream._reset import ConsumerReset, reset_consumer
    from goflux.transports.jetstream._schedule import Schedule, cancel_schedule
    from goflux.transports.jetstream._stored import StoredMessage, get_last
    from goflux.transports.jetstream._subscriber import Subscriber
    from goflux.transports.jetstream._subscription import JetStreamSubscription
    from goflux.transports.jetstream._system import SYSTEM

__all__ = (
    "PRIORITY_POLICIES",
    "SYSTEM",
    "BucketNotFound",
    "ConfigNotApplied",
    "ConsumerNotFound",
    "ConsumerPause",
    "ConsumerReset",
    "Counter",
    "CounterEntry",
    "DigestMismatch",
    "DuplicateMessageId",
    "Entry",
    "EntryFeed",
    "ExpectationFailed",
    "FastBatchError",
    "FastBatchReceipt",
    "FeatureUnsupported",
    "IncompatibleConfig",
    "InvalidKey",
    "InvalidObjectMeta",
    "InvalidSchedule",
    "JetStreamAcker",
    "JetStreamSubscription",
    "JetStreamUnavailable",
    "KeyExists",
    "KeyValue",
    "KeyWatcher",
    "NotASchedule",
    "ObjectInfo",
    "ObjectList",
    "ObjectNotFound",
    "ObjectReader",
    "ObjectStore",
    "ObjectWatch",
    "Operation",
    "Outgoing",
    "ProvisioningError",
    "Publisher",
    "ResourceLimit",
    "RevisionMismatch",
    "Schedule",
    "StoredMessage",
    "StreamFeatureDisabled",
    "StreamNotFound",
    "SubjectOutsideStream",
    "SubjectOverlap",
    "Subscriber",
    "SubscriberSettings",
    "cancel_schedule",
    "ensure_consumer",
    "ensure_stream",
    "get_batch",
    "get_last",
    "get_last_many",
    "key_value",
    "object_store",
    "pause_consumer",
    "reset_consumer",
    "resume_consumer",
    "unpin_consumer",
)


def __getattr__(name: str) -> object:
    if _NO_NATS is not None and name in __all__:
        raise MissingDependency(
            f"goflux.transports.jetstream.{name} needs nats-py, which is not installed: "
            "pip install 'goflux[nats]'"
        ) from _NO_NATS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_publish_names(__name__, globals())
