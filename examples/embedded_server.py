"""A real nats-server in one line, and a message round trip through it.

With NATS_URL unset, this starts an embedded nats-server (from ``goflux[server]``)
on a free loopback port with JetStream and a temporary store; with NATS_URL set, it
uses that server instead.

Run: python examples/embedded_server.py
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import nats
from nats.aio.msg import Msg

from goflux.testing import NatsServer


async def main() -> None:
    async with contextlib.AsyncExitStack() as stack:
        url = os.environ.get("NATS_URL")
        if url:
            print(f"using the NATS server at {url}")
        else:
            server = await stack.enter_async_context(NatsServer(jetstream=True))
            url = server.url
            assert server.startup_seconds is not None
            print(f"embedded nats-server ready on {url} in {server.startup_seconds * 1000:.0f} ms")

        nc = await nats.connect(url, allow_reconnect=False)
        stack.push_async_callback(nc.close)
        received: asyncio.Queue[Msg] = asyncio.Queue()

        async def on_message(msg: Msg) -> None:
            await received.put(msg)

        await nc.subscribe("smoke.ping", cb=on_message)
        await nc.flush()  # the subscription is registered on the server
        await nc.publish("smoke.ping", b"hello", headers={"X-Message-ID": "ping-1"})
        msg = await asyncio.wait_for(received.get(), timeout=5)
        assert msg.data == b"hello"
        headers = msg.headers or {}
        version = nc.connected_server_version
        print(
            f"round trip through nats-server {version.major}.{version.minor}.{version.patch}: "
            f"{msg.subject} {msg.data.decode()!r} id={headers.get('X-Message-ID')}"
        )
        jetstream = nc.jetstream()
        info = await jetstream.account_info()
        print(f"JetStream enabled: {info.streams} streams, {info.storage} bytes stored")


if __name__ == "__main__":
    asyncio.run(main())
