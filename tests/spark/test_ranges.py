"""RangeReader: exact sequence ranges with a short-lived consumer (no Spark needed)."""

from __future__ import annotations

import json

import nats
import pytest
from nats.aio.client import Client

from goflux._wire import RepeatedHeaders
from goflux.testing import NatsServer
from goflux.transports._natspy import LineKeepingClient
from goflux.transports.spark._datasource.ranges import RangeReader, stream_bounds


@pytest.fixture
async def client(nats_server: NatsServer) -> Client:
    nc = LineKeepingClient()
    await nc.connect(nats_server.url)
    yield nc
    await nc.close()


async def fill(nc: Client, count: int, subject_of: object = None) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    acks = [
        await js.publish_async(
            subject_of(n) if callable(subject_of) else "s.all", str(n + 1).encode()
        )
        for n in range(count)
    ]
    for ack in acks:
        await ack


async def read(nc: Client, start: int, end: int, **kwargs: object) -> list[int]:
    reader = RangeReader(nc, "S", start, end, **kwargs)  # type: ignore[arg-type]
    await reader.open()
    seqs: list[int] = []
    try:
        while chunk := await reader.next_chunk():
            seqs.extend(int(m.data) for m in chunk)
    finally:
        await reader.close()
    return seqs


async def test_whole_and_partial_ranges_read_exactly(client: Client) -> None:
    await fill(client, 5_000)
    assert await read(client, 1, 5_001) == list(range(1, 5_001))
    assert await read(client, 1_234, 3_456, chunk=100) == list(range(1_234, 3_456))
    assert await read(client, 4_999, 5_001, chunk=1) == [4_999, 5_000]
    assert await read(client, 7, 7) == []


@pytest.mark.slow  # 6,000 messages
async def test_sparse_filter_finds_every_match(client: Client) -> None:
    await fill(client, 6_000, lambda n: "s.rare" if n % 120 == 0 else "s.common")
    expected = [n + 1 for n in range(6_000) if n % 120 == 0]
    assert await read(client, 1, 6_001, filters=["s.rare"]) == expected
    assert await read(client, 1, 3_001, filters=["s.rare"], chunk=3) == expected[:25]
    assert await read(client, 2, 120, filters=["s.rare"]) == []


@pytest.mark.slow
async def test_deleted_messages_inside_the_range_are_skipped(client: Client) -> None:
    await fill(client, 3_000)
    js = client.jetstream()
    for seq in range(1_000, 2_500):
        await js.delete_msg("S", seq)
    kept = [*range(1, 1_000), *range(2_500, 3_001)]
    assert await read(client, 1, 3_001) == kept
    assert await read(client, 1_000, 2_500) == []
    assert await read(client, 900, 2_600, chunk=7) == [*range(900, 1_000), *range(2_500, 2_600)]


async def test_range_ignores_what_was_stored_after_it(client: Client) -> None:
    await fill(client, 100)
    reader = RangeReader(client, "S", 50, 101, chunk=10)
    await reader.open()
    seqs = [int(m.data) for m in await reader.next_chunk()]
    js = client.jetstream()
    for n in range(100, 150):
        await js.publish("s.all", str(n + 1).encode())
    while chunk := await reader.next_chunk():
        seqs.extend(int(m.data) for m in chunk)
    await reader.close()
    assert seqs == list(range(50, 101))


async def test_repeated_header_lines_are_kept(client: Client, nats_server: NatsServer) -> None:
    js = client.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    plain = await nats.connect(nats_server.url)
    headers = RepeatedHeaders()
    headers["A"] = "1"
    headers.repeated.append(("A", "2"))
    # A request, not publish + flush: the reply is the PubAck, sent once the stream
    # has stored the message (a flush only says the server read it, and the stream
    # stores it a moment later: "last == 0" failed on a loaded machine).
    ack = await plain.request("s.h", b"1", headers=headers, timeout=5)
    await plain.close()
    stored = json.loads(ack.data)
    assert (stored["stream"], stored["seq"]) == ("S", 1), stored
    assert (await stream_bounds(client, "S")).last == 1
    reader = RangeReader(client, "S", 1, 2)
    await reader.open()
    (msg,) = await reader.next_chunk()
    await reader.close()
    assert msg.headers == {"A": "2"}  # what nats-py itself would give
    assert msg.headers.lines == [("A", "1"), ("A", "2")]  # type: ignore[union-attr]


async def test_the_consumer_is_deleted_after_reading(client: Client) -> None:
    await fill(client, 10)
    assert await read(client, 1, 11) == list(range(1, 11))
    info = await client.jetstream().stream_info("S")
    assert info.state.consumer_count == 0


@pytest.mark.slow
async def test_idle_timeout_counts_silence_not_total_waiting(client: Client) -> None:
    await fill(client, 250_000)
    # One chunk of everything takes seconds to arrive, longer than the idle timeout,
    # but messages keep coming, so the task must not give up.
    got = await read(client, 1, 250_001, chunk=500_000, idle_timeout=1.0)
    assert len(got) == 250_000
