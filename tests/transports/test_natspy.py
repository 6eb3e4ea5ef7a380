"""The one place goflux leans on nats-py internals: each helper against a real server."""

from __future__ import annotations

import asyncio
import os
import signal

import nats
import pytest
from nats.aio.client import Client

from goflux.testing import NatsServer
from goflux.transports import _natspy
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


HEADER_BLOCKS = [
    b"NATS/1.0\r\nA: 1\r\n\r\n",
    b"NATS/1.0\r\nA: 1\r\nB:2\r\nA:  3 \r\n\r\n",
    b"NATS/1.0\r\nno colon here\r\nC: x:y:z\r\n\r\n",
    b"NATS/1.0\r\nBad Name: 1\r\nOk: 2\r\n\r\n",
    "NATS/1.0\r\nN\u00e4me: 1\r\nV: caf\u00e9\r\n\r\n".encode(),
    b"NATS/1.0\r\nV: \xff\xfe\r\n\r\n",
    b"NATS/1.0\r\nEmpty:\r\n\r\n",
    b"NATS/1.0\r\n\r\n",
    b"NATS/1.0 503\r\n\r\n",
    b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 5\r\n\r\n",
]


@pytest.mark.parametrize("block", HEADER_BLOCKS)
async def test_kept_header_lines_read_as_nats_py_reads_them(block: bytes) -> None:
    client = Client()
    ours = await _natspy._keep_lines(client, block)
    theirs = await Client._process_headers(client, block)
    assert (dict(ours) if ours is not None else None) == theirs


async def test_kept_header_lines_know_when_a_name_repeats() -> None:
    client = Client()
    repeated = await _natspy._keep_lines(client, b"NATS/1.0\r\nA: 1\r\nB: 2\r\nA: 3\r\n\r\n")
    single = await _natspy._keep_lines(client, b"NATS/1.0\r\nA: 1\r\nB: 2\r\n\r\n")
    assert isinstance(repeated, _natspy.HeaderLines)
    assert isinstance(single, _natspy.HeaderLines)
    assert repeated.repeated
    assert not single.repeated
    assert repeated.lines == [("A", "1"), ("B", "2"), ("A", "3")]
