"""Fixtures for the transport tests: a client of the test's own nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux.testing import NatsServer
from goflux.transports import jetstream

STREAM = "ORDERS"


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    yield client
    if not client.is_closed:
        await client.close()


@pytest.fixture
async def bare_js(nc: Client) -> JetStreamContext:
    """A JetStream context on a server with no streams yet."""
    return nc.jetstream()


@pytest.fixture
async def js(bare_js: JetStreamContext) -> JetStreamContext:
    """A JetStream context with the ORDERS stream capturing orders.>."""
    await jetstream.ensure_stream(bare_js, name=STREAM, subjects=["orders.>"])
    return bare_js
