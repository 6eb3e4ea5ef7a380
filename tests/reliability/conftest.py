"""Fault tests against real nats-server processes: shared helpers and the summary table.

Each fault test records what it measured with the ``record`` fixture; the table of
all of them is printed at the end of the run (it is the source of the README table).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux.testing import NatsServer

RELIABILITY_STREAM = "REL"


@dataclass
class Measured:
    """What one fault test saw."""

    fault: str
    facts: dict[str, Any] = field(default_factory=dict)


_RESULTS: list[Measured] = []


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Record facts of this test (shown in the summary table)."""
    measured = Measured(request.node.name)
    _RESULTS.append(measured)

    def add(**facts: Any) -> None:
        measured.facts.update(facts)

    return add


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _RESULTS:
        return
    terminalreporter.section("reliability measurements")
    for measured in _RESULTS:
        facts = ", ".join(f"{k}={v}" for k, v in measured.facts.items())
        terminalreporter.write_line(f"{measured.fault}: {facts}")


class Connection:
    """A nats-py client that reports disconnects and reconnects as events."""

    def __init__(self) -> None:
        self.disconnected = asyncio.Event()
        self.reconnected = asyncio.Event()
        self.errors: list[Exception] = []
        self.nc: Client | None = None

    async def connect(self, servers: str | list[str], **options: Any) -> Client:
        async def on_disconnect() -> None:
            self.reconnected.clear()
            self.disconnected.set()

        async def on_reconnect() -> None:
            self.disconnected.clear()
            self.reconnected.set()

        async def on_error(exc: Exception) -> None:
            self.errors.append(exc)

        self.nc = await nats.connect(
            servers,
            disconnected_cb=on_disconnect,
            reconnected_cb=on_reconnect,
            error_cb=on_error,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.25,
            **options,
        )
        return self.nc

    async def close(self) -> None:
        if self.nc is not None and not self.nc.is_closed:
            with contextlib.suppress(Exception):
                await self.nc.close()


@pytest.fixture
async def connection() -> AsyncIterator[Connection]:
    conn = Connection()
    yield conn
    await conn.close()


@pytest.fixture
def server() -> Iterator[NatsServer]:
    """A fresh single server whose store survives kill() for restart()."""
    with NatsServer() as srv:
        yield srv


async def stored_ids(js: JetStreamContext, stream: str) -> list[str]:
    """Every stored message's Nats-Msg-Id, in stream order (direct reads, no consumer)."""
    info = await js.stream_info(stream)
    ids = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(stream, seq)
        ids.append((msg.headers or {}).get("Nats-Msg-Id", ""))
    return ids


class Clock:
    """Seconds since creation, for recovery times."""

    def __init__(self) -> None:
        self._start = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self._start
