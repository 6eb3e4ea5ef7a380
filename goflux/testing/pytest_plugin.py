"""pytest plugin (registered by installing goflux): real nats-server fixtures.

Fixtures:
    nats_server: a fresh :class:`~goflux.testing.NatsServer` with JetStream for one test.
    nats_url: that server's client URL.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from goflux.testing._server import NatsServer

__all__ = ("nats_server", "nats_url")


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    """A real nats-server with JetStream and a temporary store, stopped after the test."""
    with NatsServer(jetstream=True) as server:
        yield server


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    """The client URL of the test's :func:`nats_server`."""
    return nats_server.url
