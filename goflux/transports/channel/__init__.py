"""In-process transport: a typed bus with NATS subject semantics and no dependencies.

Use it for tests, for wiring components inside one process, and as a stand-in for a
network transport (give the bus a codec to send payloads through bytes)::

    bus = channel.Bus(codec=JsonCodec(Order))
    publisher = channel.Publisher(bus)
    subscriber = channel.Subscriber(bus)
"""

from goflux._exports import publish_names as _publish_names
from goflux.transports.channel._bus import Bus
from goflux.transports.channel._publisher import Publisher
from goflux.transports.channel._subscriber import ChannelSubscription, Subscriber
from goflux.transports.channel._system import SYSTEM

__all__ = ("SYSTEM", "Bus", "ChannelSubscription", "Publisher", "Subscriber")

_publish_names(__name__, globals())
