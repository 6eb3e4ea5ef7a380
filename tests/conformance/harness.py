"""Transport harnesses for the conformance suite.

Each harness builds publishers and subscribers of one transport, against real
infrastructure (a real nats-server for the NATS transports). A transport joins the
suite by adding a harness and its capabilities here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import nats
from nats.js import JetStreamContext

from goflux import (
    BytesCodec,
    Codec,
    Handler,
    HeadersLike,
    Message,
    Publisher,
    PublishError,
    PublishReceipt,
    Subscriber,
    Subscription,
    Telemetry,
)
from goflux._message import received
from goflux._wire import outgoing
from goflux.service._http import HttpServer
from goflux.testing import NatsServer
from goflux.transports import channel, jetstream
from goflux.transports import http as ghttp
from goflux.transports import nats as gnats

T = TypeVar("T")

STREAM = "CONFORMANCE"
STREAM_SUBJECTS = ["orders.>", "invoices.>"]
BUCKET = "CONFORMANCE"
# What a message publisher carries beyond the value: user headers, a message ID, and
# send/process spans named after the subject. A Key-Value bucket's writes have none.
MESSAGE_FEATURES = frozenset({"headers", "message_ids", "spans_named_by_subject"})
# Every message published reaches a subscriber that falls behind. A bucket keeps a
# key's last writes only (its history): a watcher that falls further behind sees the
# latest ones, in order, and not those the server already dropped.
EVERY_MESSAGE = "every_message"
# A broker stands between publisher and subscriber: a publish succeeds whatever the
# handler does, and every plain subscriber of a subject gets each message (fan-out).
# Over HTTP the publisher waits for the handler's outcome, and one route serves a path.
DECOUPLED = "decoupled"


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
    capabilities: frozenset[str] = frozenset(
        {"queue_groups", "multi_value_headers", EVERY_MESSAGE, DECOUPLED, *MESSAGE_FEATURES}
    )
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
    capabilities: frozenset[str] = frozenset(
        {"queue_groups", "acks", EVERY_MESSAGE, DECOUPLED, *MESSAGE_FEATURES}
    )

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
    capabilities: frozenset[str] = frozenset(
        {"queue_groups", EVERY_MESSAGE, DECOUPLED, *MESSAGE_FEATURES}
    )

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


class KeyValuePublisher(Generic[T]):
    """Puts each published value under the key named like the subject."""

    def __init__(self, kv: jetstream.KeyValue[T]) -> None:
        self._kv = kv
        self._closed = False

    async def publish(
        self,
        subject: str,
        value: T,
        /,
        *,
        headers: HeadersLike | None = None,
        message_id: str | None = None,
    ) -> PublishReceipt:
        outgoing(subject, headers, message_id, jetstream=True)  # the same input checks
        if self._closed:
            raise PublishError(f"cannot put {subject!r}: publisher is closed", subject=subject)
        revision = await self._kv.put(subject, value)
        return PublishReceipt(stream=self._kv.stream, sequence=revision)

    async def close(self) -> None:
        self._closed = True

    async def __aenter__(self) -> KeyValuePublisher[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class EntryValues(Generic[T]):
    """A Key-Value watcher whose messages carry the entry's value, as a message would.

    Deletes and purges are left out by the watcher itself (``ignore_deletes``).
    """

    def __init__(self, watcher: jetstream.KeyWatcher[T]) -> None:
        self._watcher = watcher

    async def start(self, subject: str, handler: Handler[T]) -> Subscription:
        async def on_entry(msg: Message[jetstream.Entry[T]]) -> None:
            entry = msg.payload
            assert entry.value is not None
            await handler(received(msg.subject, entry.value, None, msg.id, msg.data, None))

        return await self._watcher.start(subject, on_entry)

    async def subscribe(self, subject: str, handler: Handler[T]) -> None:
        subscription = await self.start(subject, handler)
        try:
            await subscription.wait()
        finally:
            await subscription.stop()

    async def close(self) -> None:
        await self._watcher.close()

    async def __aenter__(self) -> EntryValues[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@dataclass
class KeyValueHarness:
    """A Key-Value watcher (updates only) as the subscriber, puts as the publishes."""

    js: JetStreamContext
    name: str = "key_value"
    capabilities: frozenset[str] = frozenset({DECOUPLED})

    def _bucket(self, codec: Codec[T], telemetry: Telemetry | None) -> jetstream.KeyValue[T]:
        return jetstream.KeyValue(self.js, BUCKET, codec, telemetry=telemetry)

    def publisher(self, codec: Codec[T], *, telemetry: Telemetry | None = None) -> Publisher[T]:
        return KeyValuePublisher(self._bucket(codec, telemetry))

    def subscriber(
        self,
        codec: Codec[T],
        *,
        telemetry: Telemetry | None = None,
        queue: str | None = None,
        manual_ack: bool = False,
    ) -> Subscriber[T]:
        watcher = self._bucket(codec, telemetry).watcher(updates_only=True, ignore_deletes=True)
        return EntryValues(watcher)


@dataclass
class HttpHarness:
    """Subscribers on one router served by uvicorn; publishers POST to it over loopback."""

    base_url: str
    router: ghttp.Router
    name: str = "http"
    # Spans: the handler's is a child of the sender's (tests/transports/http checks it).
    capabilities: frozenset[str] = frozenset(
        {"multi_value_headers", "headers", "message_ids", EVERY_MESSAGE}
    )

    def publisher(self, codec: Codec[T], *, telemetry: Telemetry | None = None) -> Publisher[T]:
        return ghttp.Publisher(self.base_url, codec, telemetry=telemetry)

    def subscriber(
        self,
        codec: Codec[T],
        *,
        telemetry: Telemetry | None = None,
        queue: str | None = None,
        manual_ack: bool = False,
    ) -> Subscriber[T]:
        return ghttp.Subscriber(codec, telemetry=telemetry, router=self.router)


@asynccontextmanager
async def http_harness() -> AsyncIterator[Harness]:
    router = ghttp.Router()
    async with HttpServer(router, "127.0.0.1", 0) as server:
        yield HttpHarness(f"http://127.0.0.1:{server.port}", router)


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


@asynccontextmanager
async def key_value_harness() -> AsyncIterator[Harness]:
    async with NatsServer() as server:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await jetstream.key_value(js, BUCKET, BytesCodec(), history=64)
            yield KeyValueHarness(js)
        finally:
            await nc.close()


HARNESSES: dict[str, Callable[[], AbstractAsyncContextManager[Harness]]] = {
    "channel": channel_harness,
    "http": http_harness,
    "jetstream": jetstream_harness,
    "key_value": key_value_harness,
    "nats": nats_harness,
}
CAPABILITIES: dict[str, frozenset[str]] = {
    "channel": ChannelHarness.capabilities,
    "http": HttpHarness.capabilities,
    "jetstream": JetStreamHarness.capabilities,
    "key_value": KeyValueHarness.capabilities,
    "nats": NatsHarness.capabilities,
}
