"""JetStream transport: durable, acknowledged publish/subscribe (needs ``goflux[nats]``).

::

    from goflux.transports import jetstream

    await jetstream.ensure_stream(js, name="ORDERS", subjects=["orders.>"])
    publisher = jetstream.Publisher(js, JsonCodec(Order))
    receipt = await publisher.publish("orders.created", order, message_id=order.id)
    subscriber = jetstream.Subscriber(js, JsonCodec(Order), stream="ORDERS")
    await subscriber.start("orders.*", handle)

The caller owns the nats-py connection and its JetStream context.
"""

try:
    import nats  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "goflux.transports.jetstream needs nats-py: pip install 'goflux[nats]'"
    ) from exc

from goflux._errors import (
    ConsumerNotFound,
    ExpectationFailed,
    IncompatibleConfig,
    ProvisioningError,
    StreamNotFound,
    SubjectOverlap,
)
from goflux.transports.jetstream._acker import JetStreamAcker
from goflux.transports.jetstream._kv import KeyValue, key_value
from goflux.transports.jetstream._kv_entry import Entry, Operation
from goflux.transports.jetstream._kv_watch import EntryFeed, KeyWatcher
from goflux.transports.jetstream._messages import StoredMessage, get_last
from goflux.transports.jetstream._objectinfo import ObjectInfo
from goflux.transports.jetstream._objectread import ObjectReader
from goflux.transports.jetstream._objects import ObjectStore, object_store
from goflux.transports.jetstream._objectwatch import ObjectWatch
from goflux.transports.jetstream._pause import ConsumerPause, pause_consumer, resume_consumer
from goflux.transports.jetstream._priority import PRIORITY_POLICIES, unpin_consumer
from goflux.transports.jetstream._provision import ensure_consumer, ensure_stream
from goflux.transports.jetstream._publisher import Outgoing, Publisher
from goflux.transports.jetstream._subscriber import Subscriber
from goflux.transports.jetstream._subscription import JetStreamSubscription
from goflux.transports.jetstream._system import SYSTEM

__all__ = (
    "PRIORITY_POLICIES",
    "SYSTEM",
    "ConsumerNotFound",
    "ConsumerPause",
    "Entry",
    "EntryFeed",
    "ExpectationFailed",
    "IncompatibleConfig",
    "JetStreamAcker",
    "JetStreamSubscription",
    "KeyValue",
    "KeyWatcher",
    "ObjectInfo",
    "ObjectReader",
    "ObjectStore",
    "ObjectWatch",
    "Operation",
    "Outgoing",
    "ProvisioningError",
    "Publisher",
    "StoredMessage",
    "StreamNotFound",
    "SubjectOverlap",
    "Subscriber",
    "ensure_consumer",
    "ensure_stream",
    "get_last",
    "key_value",
    "object_store",
    "pause_consumer",
    "resume_consumer",
    "unpin_consumer",
)
