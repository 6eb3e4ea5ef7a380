"""Limits changed under a running client, and core publishes to a denied subject.

One nats-server runs with a config file: ``max_payload`` 64 KiB, JetStream, a user
``admin`` and a user ``nopub`` that may not publish to ``denied.>``. The limit tests
lower ``max_payload`` by a config reload (SIGHUP), which the server tells no client;
every client here is a default ``nats.connect`` one (``allow_reconnect`` on).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from goflux import BytesCodec, MaxPayloadLowered, PayloadTooLarge, PermissionDenied, PublishError
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports import nats as gnats
from tests.reliability.cutting_proxy import CuttingProxy

pytestmark = [pytest.mark.timeout(60)]

PASSWORD = "pw"
STREAM = "LIMITS"
ANNOUNCED = 65536
LOWERED = 1024
BIG = b"x" * 2000  # under the announced limit, over the lowered one
RECOVERY = 5.0  # seconds: nats-py waits up to reconnect_time_wait (2 s) to reconnect


def config(store: Path, max_payload: int) -> str:
    return f"""
listen: 127.0.0.1:-1
max_payload: {max_payload}
jetstream {{ store_dir: "{store}" }}
accounts {{ APP {{ jetstream: enabled, users: [
  {{ user: admin, password: {PASSWORD} }},
  {{ user: nopub, password: {PASSWORD}, permissions: {{ publish: {{ deny: ["denied.>"] }} }} }}
] }} }}
"""


class Server:
    """The server, its config file, and default clients that record their errors."""

    def __init__(self, tmp: Path) -> None:
        self.conf = tmp / "server.conf"
        self.store = tmp / "js"
        self.conf.write_text(config(self.store, ANNOUNCED))
        self.server = NatsServer(jetstream=False, args=["-c", str(self.conf)])
        self.clients: list[Client] = []
        self.errors: list[Exception] = []
        self.error_seen = asyncio.Event()

    async def connect(self, user: str = "admin", url: str | None = None, **options: Any) -> Client:
        async def on_error(exc: Exception) -> None:  # the user's own callback
            self.errors.append(exc)
            self.error_seen.set()

        nc = await nats.connect(
            url or self.server.url, user=user, password=PASSWORD, error_cb=on_error, **options
        )
        self.clients.append(nc)
        return nc

    async def lower_max_payload(self) -> None:
        """Reload the config with ``max_payload`` lowered; returns once the server has."""
        self.conf.write_text(config(self.store, LOWERED))
        await self.server.reload()

    async def violation(self) -> None:
        """Wait until a client's error callback saw the server's "maximum payload violation"."""
        async with asyncio.timeout(RECOVERY):
            while not any("maximum payload violation" in str(e) for e in self.errors):
                self.error_seen.clear()
                await self.error_seen.wait()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    srv = Server(tmp_path)
    async with srv.server:
        admin = await srv.connect()
        await jetstream.ensure_stream(admin.jetstream(), name=STREAM, subjects=["js.>"])
        yield srv
        for nc in srv.clients:
            if not nc.is_closed:
                with contextlib.suppress(OSError):  # a test that failed may leave it broken
                    await nc.close()


async def collector(nc: Client, subject: str) -> asyncio.Queue[bytes]:
    """What ``nc`` receives on ``subject``, from now on."""
    received: asyncio.Queue[bytes] = asyncio.Queue()

    async def collect(msg: Msg) -> None:
        await received.put(msg.data)

    await nc.subscribe(subject, cb=collect)
    await nc.flush()
    return received


async def timed(make: Callable[[], Any]) -> tuple[BaseException, float]:
    """Await ``make()``; return the exception it raised and the seconds it took."""
    began = time.perf_counter()
    with pytest.raises(Exception) as caught:  # noqa: PT011  # the callers check the type
        await make()
    return caught.value, time.perf_counter() - began


# ------------------------------------------------------- max_payload lowered


async def test_a_core_publish_over_a_lowered_max_payload_raises_on_the_next_and_recovers(
    server: Server,
) -> None:
    nc = await server.connect()
    received = await collector(await server.connect(), "core.x")
    pub = gnats.Publisher(nc, BytesCodec())
    await server.lower_max_payload()
    began = time.perf_counter()
    await pub.publish("core.x", BIG)  # returns: the server answers by closing the connection
    await server.violation()  # the user's error callback hears of it (nats-py kept it silent)

    error, _ = await timed(lambda: pub.publish("core.x", b"next"))
    assert isinstance(error, MaxPayloadLowered)
    assert (error.limit, error.announced) == (LOWERED, ANNOUNCED)
    assert f"lowered to {LOWERED} bytes" in str(error)
    assert not error.permanent
    assert not error.may_be_stored, "it was not sent"

    await pub.publish("core.x", b"small")  # the client reconnected by itself
    async with asyncio.timeout(RECOVERY):
        assert await received.get() == b"small"
    assert time.perf_counter() - began < RECOVERY
    assert received.empty(), "neither the large message nor the refused one was delivered"
    assert not nc.is_closed
    assert nc.max_payload == LOWERED
    with pytest.raises(PayloadTooLarge, match=f"max_payload of {LOWERED} bytes"):
        await pub.publish("core.x", BIG)  # refused before sending, the connection stays
    await pub.publish("core.x", b"still", confirm=True)


async def test_a_confirmed_core_publish_over_a_lowered_max_payload_raises_payload_too_large(
    server: Server,
) -> None:
    nc = await server.connect()
    received = await collector(await server.connect(), "core.y")
    pub = gnats.Publisher(nc, BytesCodec())
    await server.lower_max_payload()
    error, took = await timed(lambda: pub.publish("core.y", BIG, confirm=True))
    assert isinstance(error, PayloadTooLarge)
    assert (error.size, error.limit) == (len(BIG), LOWERED)
    assert error.permanent
    assert not error.may_be_stored
    assert took < RECOVERY
    await pub.publish("core.y", b"small")  # the refusal was reported once, on its publish
    async with asyncio.timeout(RECOVERY):
        assert await received.get() == b"small"


async def test_a_jetstream_publish_over_a_lowered_max_payload_fails_at_once(
    server: Server,
) -> None:
    nc = await server.connect()
    pub = jetstream.Publisher(nc.jetstream(), BytesCodec(), timeout=30.0)
    await pub.publish("js.big", BIG)
    await server.lower_max_payload()
    error, took = await timed(lambda: pub.publish("js.big", BIG, message_id="big"))
    assert isinstance(error, PayloadTooLarge), error
    assert error.limit == LOWERED
    assert error.permanent
    assert not error.may_be_stored, "never both: a message over the limit is never stored"
    assert took < RECOVERY, "not the 30 s PubAck timeout"
    receipt = await pub.publish("js.small", b"small")
    assert receipt.sequence == 2, "the large one was not stored"


async def test_a_jetstream_publish_behind_a_message_over_the_limit_may_be_stored(
    server: Server,
) -> None:
    nc = await server.connect()
    core = gnats.Publisher(nc, BytesCodec())
    pub = jetstream.Publisher(nc.jetstream(), BytesCodec(), timeout=30.0)
    await server.lower_max_payload()
    await core.publish("core.z", BIG)  # the server closes the connection when it reads it
    error, took = await timed(lambda: pub.publish("js.after", b"small", message_id="after"))
    assert isinstance(error, MaxPayloadLowered), error
    assert error.may_be_stored
    assert not error.permanent, "never both: it may be stored, so retry with its ID"
    assert error.limit == LOWERED
    assert took < RECOVERY
    first = await pub.publish("js.after", b"small", message_id="after")
    again = await pub.publish("js.after", b"small", message_id="after")
    assert again.duplicate
    assert again.sequence == first.sequence, "stored once"


async def test_without_reconnect_a_jetstream_publish_over_the_limit_fails_at_once(
    server: Server,
) -> None:
    nc = await server.connect(allow_reconnect=False)  # closed for good: the new limit unknown
    pub = jetstream.Publisher(nc.jetstream(), BytesCodec(), timeout=30.0)
    await server.lower_max_payload()
    error, took = await timed(lambda: pub.publish("js.big", BIG))
    assert isinstance(error, MaxPayloadLowered), error
    assert "Maximum Payload Violation" in str(error)
    assert error.may_be_stored, "the client cannot tell it was this one"
    assert not error.permanent, "never both"
    assert took < RECOVERY, "not the 30 s PubAck timeout"
    assert nc.is_closed
    error, _ = await timed(lambda: pub.publish("js.small", b"small"))
    assert isinstance(error, PublishError)
    assert error.permanent
    assert "maximum payload violation" in str(error)


# ------------------------------- the connection dropped before a confirmation came
#
# A client that writes to a connection the server has closed gets a reset, which can
# discard the server's last words (its -ERR): the proxy stands for that, cutting the
# connection on the publish without a word. The client reconnects through it.


@contextlib.asynccontextmanager
async def proxied(server: Server) -> AsyncIterator[tuple[CuttingProxy, Client, asyncio.Event]]:
    """A proxy, a client connected through it, and an event set on each reconnection."""
    back = asyncio.Event()

    async def reconnected() -> None:
        back.set()

    async with CuttingProxy(port_of(server.server.url)) as proxy:
        nc = await server.connect(
            url=proxy.url, reconnect_time_wait=0.05, reconnected_cb=reconnected
        )
        try:
            yield proxy, nc, back
        finally:
            await nc.close()  # before the proxy goes


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def test_a_confirmed_core_publish_lost_with_its_connection_is_not_reported_as_confirmed(
    server: Server,
) -> None:
    received = await collector(await server.connect(), "core.z")
    async with proxied(server) as (proxy, nc, _):
        pub = gnats.Publisher(nc, BytesCodec())
        proxy.arm(b"PUB core.z ")
        error, took = await timed(lambda: pub.publish("core.z", b"lost", confirm=True))
        assert proxy.cut.is_set()
        assert type(error) is PublishError, error
        assert error.may_be_stored, "it may have been read before the connection dropped"
        assert "dropped before the server confirmed" in str(error)
        assert took < RECOVERY
        await pub.publish("core.z", b"after", confirm=True)  # the new connection works
        async with asyncio.timeout(RECOVERY):
            assert await received.get() == b"after", "the lost one never arrived"


async def test_a_confirmed_core_publish_over_a_lowered_max_payload_whose_error_was_lost(
    server: Server,
) -> None:
    async with proxied(server) as (proxy, nc, _):
        pub = gnats.Publisher(nc, BytesCodec())
        await server.lower_max_payload()
        proxy.arm(b"PUB core.y ")
        error, _ = await timed(lambda: pub.publish("core.y", BIG, confirm=True))
        assert isinstance(error, PayloadTooLarge), error
        assert (error.size, error.limit) == (len(BIG), LOWERED)
        assert not error.may_be_stored


async def test_an_unconfirmed_core_publish_over_a_lowered_max_payload_whose_error_was_lost(
    server: Server,
) -> None:
    async with proxied(server) as (proxy, nc, back):
        pub = gnats.Publisher(nc, BytesCodec())
        await server.lower_max_payload()
        proxy.arm(b"PUB core.x ")
        await pub.publish("core.x", BIG)  # returns: nothing tells the client yet
        async with asyncio.timeout(RECOVERY):
            await back.wait()
        assert nc.max_payload == LOWERED
        error, _ = await timed(lambda: pub.publish("core.x", b"next"))
        assert isinstance(error, MaxPayloadLowered), error
        assert (error.limit, error.announced) == (LOWERED, ANNOUNCED)
        await pub.publish("core.x", b"small", confirm=True)  # reported once


# ------------------------------------------------ core publishes, denied subject


async def test_a_burst_of_core_publishes_to_a_denied_subject_returns_until_the_refusal_is_read(
    server: Server,
) -> None:
    """The bound docs/refusals.md states: nothing raises before the client read the -ERR."""
    nc = await server.connect("nopub")
    pub = gnats.Publisher(nc, BytesCodec())
    for _ in range(20):  # nats-py's publish never suspends: the -ERR cannot be read
        await pub.publish("denied.burst", b"x")
    await server.error_seen.wait()
    with pytest.raises(PermissionDenied):
        await pub.publish("denied.burst", b"x")


async def test_confirm_first_raises_on_the_first_publish_to_a_denied_subject(
    server: Server,
) -> None:
    nc = await server.connect("nopub")
    received = await collector(await server.connect(), "ok.first")
    pub = gnats.Publisher(nc, BytesCodec(), confirm_first=True)
    for _ in range(2):  # a refused subject is confirmed again each time
        error, took = await timed(lambda: pub.publish("denied.first", b"x"))
        assert isinstance(error, PermissionDenied)
        assert error.subject == "denied.first"
        assert took < 1.0

    # A refusal can raise before the PONG of its publish's round trip has come: the
    # flush waits for it (PONGs come in order), so the counter below counts only new ones.
    await nc.flush()
    pongs = nc._pongs_received  # the round trips nats-py made (a real client's counter)
    await pub.publish("ok.first", b"0")
    assert nc._pongs_received == pongs + 1, "the first publish to a subject is confirmed"
    for n in range(1, 100):
        await pub.publish("ok.first", str(n).encode())
    assert nc._pongs_received == pongs + 1, "later publishes to it cost no round trip"
    async with asyncio.timeout(RECOVERY):
        got = [await received.get() for _ in range(100)]
    assert got == [str(n).encode() for n in range(100)]
