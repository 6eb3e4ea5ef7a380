"""In-process transport: a typed bus with NATS subject semantics and no dependencies.

Use it for tests, for wiring components inside one process, and as a stand-in for a
network transport (give the bus a codec to send payloads through bytes)::

    bus = channel.Bus(codec=JsonCodec(Order))
    publisher = channel.Publisher(bus)
    subscriber = channel.Subscriber(bus)
"""

from goflux.transports.channel.bus import Bus
from goflux.transports.channel.publisher import Publisher
from goflux.transports.channel.subscriber import ChannelSubscription, Subscriber
from goflux.transports.channel.system import SYSTEM

__all__ = ("SYSTEM", "Bus", "ChannelSubscription", "Publisher", "Subscriber")
