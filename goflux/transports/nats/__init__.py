"""Core NATS transport: publish/subscribe, queue groups, request/reply, micro services.

Import it module-qualified (it shares its name with the nats-py package)::

    from goflux.transports import nats as gnats

    publisher = gnats.Publisher(nc, JsonCodec(Order))
    subscriber = gnats.Subscriber(nc, JsonCodec(Order), queue="billing")
    requester = gnats.Requester(nc, JsonCodec(Quote), JsonCodec(Price))
    responder = gnats.Responder(nc, JsonCodec(Quote), JsonCodec(Price), queue="pricing")

A :class:`MicroService` makes responders discoverable with the NATS micro protocol
(``$SRV.PING``, ``$SRV.INFO``, ``$SRV.STATS``)::

    svc = gnats.MicroService(nc, name="pricing", version="1.0.0")
    responder = gnats.Responder(nc, JsonCodec(Quote), JsonCodec(Price), service=svc)

Needs ``goflux[nats]``. The caller owns the nats-py connection.
"""

try:
    import nats  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("goflux.transports.nats needs nats-py: pip install 'goflux[nats]'") from exc

from goflux._exports import publish_names as _publish_names
from goflux.transports.nats._micro import MicroService
from goflux.transports.nats._micro_types import (
    EndpointInfo,
    EndpointStats,
    ServiceInfo,
    ServicePing,
    ServiceStats,
)
from goflux.transports.nats._publisher import Publisher
from goflux.transports.nats._requester import ERROR_CODE_HEADER, ERROR_HEADER, Requester
from goflux.transports.nats._responder import Responder, ResponderSubscription
from goflux.transports.nats._subscriber import NatsSubscription, Subscriber
from goflux.transports.nats._subscription import CoreSubscription, DispatchOptions
from goflux.transports.nats._system import SYSTEM

__all__ = (
    "ERROR_CODE_HEADER",
    "ERROR_HEADER",
    "SYSTEM",
    "CoreSubscription",
    "DispatchOptions",
    "EndpointInfo",
    "EndpointStats",
    "MicroService",
    "NatsSubscription",
    "Publisher",
    "Requester",
    "Responder",
    "ResponderSubscription",
    "ServiceInfo",
    "ServicePing",
    "ServiceStats",
    "Subscriber",
)

_publish_names(__name__, globals())
