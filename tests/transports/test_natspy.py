"""The one place goflux leans on nats-py internals: each helper against a real server."""

from __future__ import annotations

import asyncio
import os
import signal

import nats
import pytest

from goflux.testing import NatsServer
from goflux.transports._natspy import flush


async def test_a_cancelled_flush_leaves_the_connection_reading(nats_server: NatsServer) -> None:
    # nats-py resolves a PONG future without checking whether it was cancelled: a flush
    # cancelled while its PONG is outstanding kills the read loop (InvalidStateError),
    # and the connection stops reading while it still says it is connected.
    nc = await nats.connect(nats_server.url)
    assert nats_server.pid is not None
    os.kill(nats_server.pid, signal.SIGSTOP)  # no PONG can come until SIGCONT
    try:
        flushing = asyncio.create_task(flush(nc))
        while not nc._pongs:  # noqa: ASYNC110 - no event for it: the PING is out
            await asyncio.sleep(0)
        flushing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await flushing
    finally:
        os.kill(nats_server.pid, signal.SIGCONT)
    await nc.flush(timeout=5)  # the PONGs arrive and are read: the loop is alive
    await nc.close()
