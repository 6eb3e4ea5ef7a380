"""TLS, user/password and nkey authentication through the transports; secrets never leak."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import nkeys
import pytest
import trustme
from nats.aio.client import Client

from goflux import JsonCodec, Message, TransportError
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports import nats as gnats
from goflux.transports.spark._connection import ConnectionOptions
from tests.conftest import Otel
from tests.models import Order, order

pytestmark = pytest.mark.timeout(60)

CODEC = JsonCodec(Order)
SECRET = "s3cret-pa55-do-not-log"  # a test password, searched for in outputs
WRONG = "wr0ng-guess-do-not-log"


async def round_trip(nc: Client, subject: str) -> None:
    """A JetStream publish/consume and a core NATS publish/subscribe, typed, over ``nc``."""
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name="SECURE", subjects=["secure.>"])
    got: asyncio.Queue[Message[Order]] = asyncio.Queue()
    sub = jetstream.Subscriber(js, CODEC, stream="SECURE")
    subscription = await sub.start(f"secure.{subject}", got.put)
    receipt = await jetstream.Publisher(js, CODEC).publish(f"secure.{subject}", order(7))
    assert receipt is not None
    async with asyncio.timeout(10):
        assert (await got.get()).payload == order(7)
    await subscription.stop()

    core: asyncio.Queue[Message[Order]] = asyncio.Queue()
    core_sub = await gnats.Subscriber(nc, CODEC).start(f"plain.{subject}", core.put)
    await nc.flush()
    await gnats.Publisher(nc, CODEC).publish(f"plain.{subject}", order(8))
    async with asyncio.timeout(10):
        assert (await core.get()).payload == order(8)
    await core_sub.stop()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_server(ca: trustme.CA, tmp_path: Path) -> Iterator[NatsServer]:
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file = tmp_path / "server.pem", tmp_path / "server.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    args = ["--tls", "--tlscert", str(cert_file), "--tlskey", str(key_file)]
    with NatsServer(args=args) as server:
        yield server


async def test_tls_carries_both_transports(
    tls_server: NatsServer, ca: trustme.CA, tmp_path: Path
) -> None:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    nc = await nats.connect(f"tls://127.0.0.1:{tls_server.port}", tls=context)
    try:
        assert nc.connected_url.scheme == "tls"
        await round_trip(nc, "tls")
    finally:
        await nc.close()
    # The Spark adapter's connection settings take a CA file.
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    settings = ConnectionOptions(
        servers=(f"tls://127.0.0.1:{tls_server.port}",), tls_ca_file=str(ca_file)
    )
    spark_nc = await settings.connect()
    await spark_nc.close()
    # Without trusting the CA the handshake fails: TLS is really on.
    with pytest.raises(TransportError):
        await ConnectionOptions(servers=(f"tls://127.0.0.1:{tls_server.port}",)).connect()


@pytest.fixture
async def password_server() -> AsyncIterator[NatsServer]:
    async with NatsServer(args=["--user", "alice", "--pass", SECRET]) as server:
        yield server


async def test_user_and_password_carry_both_transports_and_never_leak(
    password_server: NatsServer, otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"nats://alice:{SECRET}@127.0.0.1:{password_server.port}"
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name="SECURE", subjects=["secure.>"])
        got: asyncio.Queue[Message[Order]] = asyncio.Queue()
        sub = jetstream.Subscriber(js, CODEC, stream="SECURE", telemetry=otel.telemetry)
        subscription = await sub.start("secure.traced", got.put)
        await jetstream.Publisher(js, CODEC, telemetry=otel.telemetry).publish(
            "secure.traced", order(1)
        )
        async with asyncio.timeout(10):
            await got.get()
        await subscription.stop()
        await round_trip(nc, "pw")
    finally:
        await nc.close()
    spans = otel.spans()
    assert spans
    for span in spans:
        assert SECRET not in str(dict(span.attributes or {})), span.name

    # Wrong credentials: a clear error that names neither password.
    bad = f"nats://alice:{WRONG}@127.0.0.1:{password_server.port}"
    with pytest.raises(TransportError) as refused:
        await ConnectionOptions(servers=(bad,)).connect()
    assert "Authorization Violation" in str(refused.value)  # the URL's credentials were lifted
    settings = ConnectionOptions(servers=(url,))
    assert SECRET not in repr(settings)
    works = await settings.connect()
    await works.close()
    text = caplog.text + str(refused.value) + repr(refused.value.__cause__)
    assert SECRET not in text
    assert WRONG not in text


def test_the_cli_never_prints_credentials(password_server: NatsServer) -> None:
    unreachable = NatsServer().start()  # a port nobody listens on once stopped
    dead_port = unreachable.port
    unreachable.stop()
    for password in (SECRET, WRONG):
        for port in (password_server.port, dead_port):
            url = f"nats://alice:{password}@127.0.0.1:{port}"
            for command in ("streams", "consumers"):
                result = subprocess.run(
                    [sys.executable, "-m", "goflux", command, "--url", url],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
                assert password not in result.stdout + result.stderr, (command, port)
                if password == WRONG or port == dead_port:
                    assert result.returncode != 0
                    assert "***@127.0.0.1" in result.stderr


async def test_a_token_in_the_url_works_and_never_leaks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with NatsServer(args=["--auth", SECRET]) as server:
        nc = await nats.connect(f"nats://{SECRET}@127.0.0.1:{server.port}")
        try:
            await round_trip(nc, "token")
        finally:
            await nc.close()
        with pytest.raises(TransportError) as refused:
            await ConnectionOptions(servers=(f"nats://{WRONG}@127.0.0.1:{server.port}",)).connect()
        settings = ConnectionOptions(servers=(f"nats://{SECRET}@127.0.0.1:{server.port}",))
        assert SECRET not in repr(settings)
        await (await settings.connect()).close()
    text = caplog.text + str(refused.value) + repr(refused.value.__cause__)
    assert SECRET not in text
    assert WRONG not in text


async def test_nkey_authentication_carries_both_transports(tmp_path: Path) -> None:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(seed).public_key.decode()
    config = tmp_path / "nkey.conf"
    config.write_text(
        "authorization { users = [ { nkey: %s } ] }\n" % public  # noqa: UP031
    )
    async with NatsServer(args=["-c", str(config)]) as server:
        with pytest.raises(TransportError, match="Authorization Violation"):  # a key is needed
            await ConnectionOptions(servers=(server.url,)).connect()
        nc = await nats.connect(server.url, nkeys_seed_str=seed.decode())
        try:
            await round_trip(nc, "nkey")
        finally:
            await nc.close()
        seed_file = tmp_path / "user.nk"
        seed_file.write_bytes(seed)
        settings = ConnectionOptions(servers=(server.url,), nkey_seed_file=str(seed_file))
        spark_nc = await settings.connect()
        await spark_nc.close()
