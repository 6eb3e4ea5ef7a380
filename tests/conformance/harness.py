"""Transport harnesses for the conformance suite.

Each harness builds publishers and subscribers of one transport, against real
infrastructure (a real nats-server for the NATS transports). A transport joins the
suite by adding a harness and its capabilities here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import nats
from nats.js import JetStreamContext

from goflux import Codec, Handler, Publisher, Subscriber, Telemetry
from goflux.testing import NatsServer
from goflux.transports import channel, jetstream
from goflux.transports import nats as gnats

T = TypeVar("T")

STREAM = "CONFORMANCE"
STREAM_SUBJECTS = ["orders.>", "invoices.>"]


class Harness(Protocol):
    name: str
    capabilities: frozenset[str]

    def publisher(self, codec: Codec[T], *, telemetry: Telemetry | None = None) -> Publisher[T]: ...

    def subscriber(
        self,
        codec: Codec[T],
        *,
        telemetry: Telemetry | None = None,
        queue: str | None = None,
        manual_ack: bool = False,
    ) -> Subscriber[T]: ...


@dataclass
class ChannelHarness:
    name: str = "channel"
    capabilities: frozenset[str] = frozenset({"queue_groups", "multi_value_headers"})
    buses: dict[int, channel.Bus[Any]] = field(default_factory=dict)

    def _bus(self, codec: Codec[Any]) -> channel.Bus[Any]:
        # One bus per codec: publishers and subscribers of a test share it.
        return self.buses.setdefault(id(codec), channel.Bus(codec=codec))

    def publisher(self, codec: Codec[T], *, telemetry: Telemetry | None = None) -> Publisher[T]:
        return channel.Publisher(self._bus(codec), telemetry=telemetry)

    def subscriber(
        self,
        codec: Codec[T],
        *,
        telemetry: Telemetry | None = None,
        queue: str | None = None,
        manual_ack: bool = False,
    ) -> Subscriber[T]:
        return channel.Subscriber(self._bus(codec), telemetry=telemetry, queue=queue)


class DurableGroupSubscriber(jetstream.Subscriber[T]):
    """Competing JetStream consumers: provisions the shared durable for the subject."""

    async def start(self, subject: str, handler: Handler[T]) -> jetstream.JetStreamSubscription[T]:
        assert self._consumer is not None
        await jetstream.ensure_consumer(
            self._js, stream=self._stream, name=self._consumer, filter_subject=subject
        )
        return await super().start(subject, handler)


@dataclass
class JetStreamHarness:
    js: JetStreamContext
    name: str = "jetstream"
    capabilities: frozenset[str] = frozenset({"queue_groups", "acks"})

    def publisher(self, codec: Codec[T], *, telemetry: Telemetry | None = None) -> Publisher[T]:
        return jetstream.Publisher(self.js, codec, telemetry=telemetry)

    def subscriber(
        self,
        codec: Codec[T],
        *,
        telemetry: Telemetry | None = None,
        queue: str | None = None,
        manual_ack: bool = False,
    ) -> Subscriber[T]:
        if queue is not None:
            return DurableGroupSubscriber(
                self.js, codec, stream=STREAM, consumer=queue, telemetry=telemetry
            )
        return jetstream.Subscriber(
            self.js, codec, stream=STREAM, manual_ack=manual_ack, telemetry=telemetry
        )


@dataclass
class NatsHarness:
    nc: nats.aio.client.Client
    name: str = "nats"
    capabilities: frozenset[str] = frozenset({"queue_groups"})

    def publisher(self, codec: Codec[T], *, telemetry: Telemetry | None = None) -> Publisher[T]:
        return gnats.Publisher(self.nc, codec, telemetry=telemetry)

    def subscriber(
        self,
        codec: Codec[T],
        *,
        telemetry: Telemetry | None = None,
        queue: str | None = None,
        manual_ack: bool = False,
    ) -> Subscriber[T]:
        return gnats.Subscriber(self.nc, codec, queue=queue, telemetry=telemetry)


@asynccontextmanager
async def nats_harness() -> AsyncIterator[Harness]:
    async with NatsServer(jetstream=False) as server:
        nc = await nats.connect(server.url)
        try:
            yield NatsHarness(nc)
        finally:
            await nc.close()


@asynccontextmanager
async def channel_harness() -> AsyncIterator[Harness]:
    yield ChannelHarness()


@asynccontextmanager
async def jetstream_harness() -> AsyncIterator[Harness]:
    async with NatsServer() as server:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await jetstream.ensure_stream(js, name=STREAM, subjects=STREAM_SUBJECTS)
            yield JetStreamHarness(js)
        finally:
            await nc.close()


HARNESSES: dict[str, Callable[[], AbstractAsyncContextManager[Harness]]] = {
    "channel": channel_harness,
    "jetstream": jetstream_harness,
    "nats": nats_harness,
}
CAPABILITIES: dict[str, frozenset[str]] = {
    "channel": ChannelHarness.capabilities,
    "jetstream": JetStreamHarness.capabilities,
    "nats": NatsHarness.capabilities,
}
