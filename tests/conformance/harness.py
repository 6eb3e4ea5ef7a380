"""Transport harnesses for the conformance suite.

Each harness builds publishers and subscribers of one transport. Later transports
(core NATS, JetStream) add a harness here and the whole suite runs against them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from goflux import Codec, Publisher, Subscriber, Telemetry
from goflux.transports import channel

T = TypeVar("T")


class Harness(Protocol):
    name: str
    capabilities: frozenset[str]

    def publisher(self, codec: Codec[T], *, telemetry: Telemetry | None = None) -> Publisher[T]: ...

    def subscriber(
        self, codec: Codec[T], *, telemetry: Telemetry | None = None, queue: str | None = None
    ) -> Subscriber[T]: ...


@dataclass
class ChannelHarness:
    name: str = "channel"
    capabilities: frozenset[str] = frozenset({"queue_groups"})
    buses: dict[int, channel.Bus[Any]] = field(default_factory=dict)

    def _bus(self, codec: Codec[Any]) -> channel.Bus[Any]:
        # One bus per codec: publishers and subscribers of a test share it.
        return self.buses.setdefault(id(codec), channel.Bus(codec=codec))

    def publisher(self, codec: Codec[T], *, telemetry: Telemetry | None = None) -> Publisher[T]:
        return channel.Publisher(self._bus(codec), telemetry=telemetry)

    def subscriber(
        self, codec: Codec[T], *, telemetry: Telemetry | None = None, queue: str | None = None
    ) -> Subscriber[T]:
        return channel.Subscriber(self._bus(codec), telemetry=telemetry, queue=queue)


@asynccontextmanager
async def channel_harness() -> AsyncIterator[Harness]:
    yield ChannelHarness()


HARNESSES: dict[str, Callable[[], AbstractAsyncContextManager[Harness]]] = {
    "channel": channel_harness,
}
CAPABILITIES: dict[str, frozenset[str]] = {"channel": ChannelHarness.capabilities}
