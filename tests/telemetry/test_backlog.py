"""goflux.consumer.pending while nothing is delivered: the server is asked on a timer.

The refresh interval is shortened here (the module's PENDING_REFRESH, read when a
subscription starts). The consumer info requests are counted by a second connection
subscribed to the JetStream API subjects; each count is read after a round trip on it,
so every request sent before was seen. Some waits here are the time the gauge promises
(a value at most one interval old), not waits for readiness.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from goflux import Message, StrCodec
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports._natspy import flush
from goflux.transports._refusals import refusals
from goflux.transports.jetstream import _backlog
from tests.conftest import STREAM, Otel
from tests.helpers import num_pending_is
from tests.telemetry.test_lag import Busy, level

pytestmark = pytest.mark.timeout(60)

INTERVAL = 0.25


@pytest.fixture(autouse=True)
def short_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backlog, "PENDING_REFRESH", INTERVAL)


class Requests:
    """The JetStream consumer API requests the server received, in order."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.subjects: list[str] = []

    @classmethod
    async def watch(cls, url: str) -> Requests:
        requests = cls(await nats.connect(url))

        async def seen(msg: Msg) -> None:
            requests.subjects.append(msg.subject)

        await requests.nc.subscribe("$JS.API.CONSUMER.>", cb=seen)
        await flush(requests.nc)
        return requests

    async def infos(self) -> int:
        """Consumer info requests so far (after a round trip: all sent before are in)."""
        await flush(self.nc)
        return sum(".CONSUMER.INFO." in subject for subject in self.subjects)


@pytest.fixture
async def requests(nats_server: NatsServer) -> AsyncIterator[Requests]:
    watched = await Requests.watch(nats_server.url)
    yield watched
    await watched.nc.close()


def pending(otel: Otel) -> int | None:
    return level(otel, "goflux.consumer.pending", "orders.created")


async def test_the_backlog_refreshes_while_nothing_is_delivered(
    js: JetStreamContext, otel: Otel
) -> None:
    busy = Busy()
    subscriber = jetstream.Subscriber(
        js, StrCodec(), stream=STREAM, max_in_flight=1, telemetry=otel.telemetry
    )
    subscription = await subscriber.start("orders.created", busy)
    publisher = jetstream.Publisher(js, StrCodec())
    await publisher.publish("orders.created", "first")
    await busy.started.wait()
    loop = asyncio.get_running_loop()
    for round_ in range(3):
        pending(otel)  # a reader collects: the refresh runs from now on
        for n in range(10):  # nothing is delivered: the handler is stuck
            await publisher.publish("orders.created", f"o-{round_}-{n}")
        # The server counts them off a queue of its own, after the PubAcks.
        server = await num_pending_is(js, STREAM, subscription.consumer, 10 * (round_ + 1))
        # Nothing is delivered, so only the refresh can bring the gauge to the
        # server's count: collections see it within an interval or so (a deadline
        # of many intervals keeps a loaded machine from failing the test).
        deadline = loop.time() + 40 * INTERVAL
        while (seen := pending(otel)) != server:
            assert loop.time() < deadline, f"round {round_}: gauge {seen}, server {server}"
            await asyncio.sleep(INTERVAL / 5)
    busy.release.set()
    await subscription.stop()


@pytest.mark.slow  # refresh intervals
async def test_an_unread_gauge_asks_nothing_and_stops_asking_when_reading_stops(
    js: JetStreamContext, otel: Otel, requests: Requests
) -> None:
    subscriber = jetstream.Subscriber(js, StrCodec(), stream=STREAM, telemetry=otel.telemetry)

    async def handle(msg: Message[str]) -> None:
        pass

    subscriptions = [await subscriber.start(f"orders.s{n}", handle) for n in range(5)]
    await asyncio.sleep(4 * INTERVAL)  # idle, a meter provider and no collection
    assert await requests.infos() == 0
    otel.reader.get_metrics_data()  # one collection: each subscription starts asking
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while await requests.infos() < 5:
        assert loop.time() < deadline, "a consumer info request per subscription"
        await asyncio.sleep(INTERVAL / 5)
    # Nobody collects any more: after a few intervals the requests stop.
    await asyncio.sleep((_backlog._IDLE_INTERVALS + 2) * INTERVAL)
    asked = await requests.infos()
    await asyncio.sleep(4 * INTERVAL)
    assert await requests.infos() == asked
    assert asked <= 5 * (_backlog._IDLE_INTERVALS + 2)
    for subscription in subscriptions:
        await subscription.stop()


async def test_no_consumer_info_request_once_the_subscription_stops(
    js: JetStreamContext, otel: Otel, requests: Requests, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_backlog, "PENDING_REFRESH", 0.002)
    subscriber = jetstream.Subscriber(js, StrCodec(), stream=STREAM, telemetry=otel.telemetry)

    async def handle(msg: Message[str]) -> None:
        pass

    collecting = True

    async def collect() -> None:
        while collecting:
            otel.reader.get_metrics_data()
            await asyncio.sleep(0.001)

    collector = asyncio.create_task(collect())
    try:
        for _ in range(20):
            subscription = await subscriber.start("orders.created", handle)
            consumer = subscription.consumer
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while not any(consumer in subject for subject in requests.subjects):
                assert loop.time() < deadline, "the subscription asks for its backlog"
                await requests.infos()
            await subscription.stop()
            await requests.infos()
            mine = [s.split(".")[3] for s in requests.subjects if s.endswith(f".{consumer}")]
            assert mine[-1] == "DELETE", mine  # nothing asked after (or while) deleting
            assert mine.count("DELETE") == 1
    finally:
        collecting = False
        await collector


# ------------------------------------------------------------ no permission to ask

CONFIG = """
listen: 127.0.0.1:-1
jetstream {{ store_dir: "{store}" }}
accounts {{
  APP {{
    jetstream: enabled
    users: [
      {{ user: admin, password: p }}
      {{ user: least, password: p,
         permissions: {{ publish: {{ deny: ["$JS.API.CONSUMER.INFO.>"] }} }} }}
    ]
  }}
}}
"""


@pytest.fixture
def limited_server(tmp_path: Path) -> Iterator[NatsServer]:
    conf = tmp_path / "server.conf"
    conf.write_text(CONFIG.format(store=tmp_path / "js"))
    with NatsServer(jetstream=False, args=["-c", str(conf)]) as server:
        yield server


@pytest.mark.slow  # refresh intervals
async def test_without_permission_to_ask_the_subscription_stops_asking_and_says_so_once(
    limited_server: NatsServer, otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:  # the user's own callback
        errors.append(exc)

    nc = await nats.connect(limited_server.url, user="least", password="p", error_cb=on_error)
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name=STREAM, subjects=["orders.>"])
    got = asyncio.Event()

    async def handle(msg: Message[str]) -> None:
        got.set()

    subscriber = jetstream.Subscriber(js, StrCodec(), stream=STREAM, telemetry=otel.telemetry)
    subscription = await subscriber.start("orders.created", handle)
    await jetstream.Publisher(js, StrCodec()).publish("orders.created", "o-1")
    await got.wait()
    caplog.set_level(logging.DEBUG, logger="goflux.transports.jetstream")

    def warnings() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.WARNING and "goflux.consumer.pending" in r.getMessage()
        ]

    loop = asyncio.get_running_loop()
    started = loop.time()
    while not warnings():  # refused at once, not after the API's timeout
        assert loop.time() < started + 3, "a warning that the backlog is not refreshed"
        otel.reader.get_metrics_data()
        await asyncio.sleep(INTERVAL / 5)
    for _ in range(20):  # collections go on: no further request, refusal or warning
        assert pending(otel) == 0  # the count of the last delivery
        await asyncio.sleep(INTERVAL / 2)
    await flush(nc)
    [warning] = warnings()
    assert repr(subscription.consumer) in warning
    assert f"$JS.API.CONSUMER.INFO.{STREAM}.{subscription.consumer}" in warning
    registry = refusals(nc)
    assert registry.count == 1
    assert len(errors) == 1  # the user's callback sees the server's error, once
    assert registry.take(f"$JS.API.CONSUMER.INFO.{STREAM}.{subscription.consumer}") is None
    assert subscription.running
    await subscription.stop()
    await nc.close()
