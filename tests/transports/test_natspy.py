"""The one place goflux leans on nats-py internals: each helper against a real server."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from collections.abc import Awaitable

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.protocol.command import pub_cmd

from goflux import BytesCodec, _wire
from goflux._headers import Headers
from goflux._message import received
from goflux.testing import NatsServer
from goflux.transports import _natspy, jetstream
from goflux.transports import nats as goflux_nats
from goflux.transports._natspy import flush
from tests.conftest import STREAM
from tests.helpers import Inbox


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
    b"NATS/1.0\r\n: empty name\r\nA: 1\r\n\r\n",
    b"NATS/1.0\r\nA\x1c: 1\r\n\r\n",
    b"NATS/1.0\rXA: 1\r\nB: 2\r\n\r\n",
    b"NATS/1.0\r\nX-Goflux-Tag\x1c: evil\r\n\x1fX-Message-ID: spoof\r\nOk: 1\r\n\r\n",
    b"NATS/1.0\r\n\r\n",
    b"NATS/1.0 503\r\n\r\n",
    b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 5\r\n\r\n",
]


@pytest.mark.parametrize("block", HEADER_BLOCKS)
async def test_kept_header_lines_read_as_nats_py_reads_them(
    block: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_natspy, "_NAMES", {})
    client = Client()
    theirs = await Client._process_headers(client, block)
    for _ in range(2):  # the second time from the names the first remembered
        ours = await _natspy._keep_lines(client, block)
        assert ((dict(ours) if ours is not None else None) or None) == theirs


GOFLUX_BLOCKS = [
    b"NATS/1.0\r\nX-Goflux-Tenant: acme\r\nX-Message-ID: m-1\r\nNats-Msg-Id: m-1\r\n\r\n",
    b"NATS/1.0\r\nx-goflux-tag: a\r\nX-GOFLUX-Tag: b\r\nX-Goflux-Other:  c \r\n\r\n",
    b"NATS/1.0\r\nNats-Msg-Id: only-nats\r\ntraceparent: 00-ab-cd-01\r\n\r\n",
    b"NATS/1.0\r\nX-Message-ID: first\r\nx-message-id: second\r\n\r\n",
    b"NATS/1.0\r\nX-Goflux-: no name\r\n X-Goflux-Padded : v\r\n\r\n",
    b"NATS/1.0\r\nX-Goflux-Tag: \xff\xfe\r\nX-Goflux-Caf\xc3\xa9: x\r\n\r\n",
    b"NATS/1.0\r\nX-Goflux-Bad Name: x\r\nX-Goflux-Tag: a\r\nX-Goflux-Tag: b\r\n\r\n",
    b"NATS/1.0\rX-Goflux-Tag: evil\r\nX-Goflux-B: 2\r\n\r\n",
    b"NATS/1.0\r\n: X-Goflux-Tag\r\nX-Goflux-Tag:\r\n\r\n",
]


def _read(headers: Headers | None, message_id: str | None) -> tuple[object, str | None]:
    return (headers.multi_items() if headers is not None else None), message_id


@pytest.mark.parametrize("block", [b for b in HEADER_BLOCKS + GOFLUX_BLOCKS if b[8:9] == b"\r"])
async def test_a_block_read_when_needed_reads_as_the_client_would_have(
    block: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """User headers, message ID, wire headers and the mapping, from the block itself."""
    client = Client()
    _natspy.keep_header_lines(client)
    assert _natspy._reads_blocks_later(client, block)
    before = await client._process_headers(block)
    monkeypatch.setattr(_wire, "_BLOCK_KINDS", {})
    monkeypatch.setattr(_wire, "_KINDS", {})
    for _ in range(2):  # the second time from the names the first remembered
        assert _read(*_wire.read_headers(block)) == _read(*_wire.read_headers(before))
        lazily = received("s", None, None, None, None, None, block).wire_headers
        at_once = received("s", None, None, None, None, None, before).wire_headers
        assert lazily.multi_items() == at_once.multi_items()
        assert _natspy.received_headers(block) == before


async def test_a_status_or_another_client_s_headers_are_read_at_once() -> None:
    """A block with a status goes to nats-py as it comes; so does every block of a
    client whose header reading goflux did not install."""
    client = Client()
    _natspy.keep_header_lines(client)
    block = b"NATS/1.0\r\nA: 1\r\n\r\n"
    assert not _natspy._reads_blocks_later(client, b"NATS/1.0 408 Request Timeout\r\n\r\n")
    assert not _natspy._reads_blocks_later(Client(), block)
    assert _natspy._reads_blocks_later(_natspy.LineKeepingClient(), block)


async def test_ever_new_names_in_blocks_are_read_without_growing_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_wire, "_BLOCK_KINDS", {})
    monkeypatch.setattr(_wire, "_KINDS", {})
    for n in range(_wire.NAME_CACHE_LIMIT + 100):
        block = b"NATS/1.0\r\nX-Goflux-K%d: v\r\nX-Goflux-Bad Name%d: x\r\n\r\n" % (n, n)
        headers, _ = _wire.read_headers(block)
        assert headers is not None
        assert headers.multi_items() == [(f"K{n}", "v")]
    assert len(_wire._BLOCK_KINDS) == _wire.NAME_CACHE_LIMIT


async def test_long_names_in_blocks_are_read_each_time_not_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_wire, "_BLOCK_KINDS", {})
    monkeypatch.setattr(_wire, "_KINDS", {})
    short = b"X-Goflux-" + b"N" * (_wire.CACHED_NAME_LENGTH - 9)
    long = b"X-Goflux-" + b"L" * (_wire.CACHED_NAME_LENGTH - 8)
    for _ in range(2):
        headers, _ = _wire.read_headers(b"NATS/1.0\r\n%s: 1\r\n%s: 2\r\n\r\n" % (short, long))
        assert headers is not None
        assert headers.multi_items() == [(short[9:].decode(), "1"), (long[9:].decode(), "2")]
    assert list(_wire._BLOCK_KINDS) == [short]


async def test_ever_new_header_names_are_read_without_growing_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A peer sending new names each time: past the bound, each is read at each use."""
    monkeypatch.setattr(_natspy, "_NAMES", {})
    client = Client()
    for n in range(_wire.NAME_CACHE_LIMIT + 100):
        block = b"NATS/1.0\r\nK%d: v\r\nBad Name%d: x\r\n\r\n" % (n, n)
        ours = await _natspy._keep_lines(client, block)
        assert ours is not None
        assert dict(ours) == {f"K{n}": "v"}
    assert len(_natspy._NAMES) == _wire.NAME_CACHE_LIMIT


async def test_long_header_names_are_read_each_time_not_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A peer sending long names (up to max_payload each) leaves none of them held."""
    monkeypatch.setattr(_natspy, "_NAMES", {})
    client = Client()
    short, long = b"N" * _wire.CACHED_NAME_LENGTH, b"L" * (_wire.CACHED_NAME_LENGTH + 1)
    for _ in range(2):
        ours = await _natspy._keep_lines(
            client, b"NATS/1.0\r\n%s: 1\r\n%s: 2\r\n\r\n" % (short, long)
        )
        assert ours == {short.decode(): "1", long.decode(): "2"}
    assert list(_natspy._NAMES) == [short]


async def test_kept_header_lines_know_when_a_name_repeats() -> None:
    client = Client()
    repeated = await _natspy._keep_lines(client, b"NATS/1.0\r\nA: 1\r\nB: 2\r\nA: 3\r\n\r\n")
    dropped = await _natspy._keep_lines(client, b"NATS/1.0\r\nBad Name: 1\r\nOk: 2\r\n\r\n")
    assert isinstance(repeated, _natspy.HeaderLines)
    assert repeated.repeated
    assert repeated.lines == [("A", "1"), ("B", "2"), ("A", "3")]
    assert isinstance(dropped, _natspy.HeaderLines)  # a line nats-py's dict leaves out
    assert dropped.repeated
    assert dropped.lines == [("Bad Name", "1"), ("Ok", "2")]


async def test_headers_that_lose_no_line_stay_a_dict_the_collector_does_not_track() -> None:
    """Queued by the hundred, tracked headers would run a collection every few hundred."""
    client = Client()
    single = await _natspy._keep_lines(client, b"NATS/1.0\r\nA: 1\r\nB: 2\r\n\r\n")
    assert type(single) is dict
    assert single == {"A": "1", "B": "2"}
    assert not getattr(single, "repeated", False)
    assert not gc.is_tracked(single)


# ------------------------------------------------- direct delivery and queued PUBs


@pytest.mark.parametrize(
    ("subject", "payload"),
    [
        ("$JS.ACK.S.c.1.2.3.1732712345123456789.0", b"+ACK"),
        ("$JS.ACK.dom.hash.S.c.1.2.3.1732712345123456789.0.x", b"-NAK"),
        ("a.b", b""),
        ("a.b", b"+TERM poison \xc3\xa9"),
        ("inbox.\u00e9", b"x" * 70_000),
    ],
)
async def test_a_queued_publish_writes_the_command_nats_py_writes(
    nats_server: NatsServer, subject: str, payload: bytes
) -> None:
    nc = await nats.connect(nats_server.url, flush_timeout=5)
    try:
        nc._pending.clear()  # (empty between writes; no other command is queued)
        before = dict(nc.stats)
        assert _natspy.write_publish(nc, subject, payload)
        [ours] = nc._pending
        theirs = pub_cmd(subject, "", payload)
        line, body = ours.split(b"\r\n", 1)
        their_line, their_body = theirs.split(b"\r\n", 1)
        assert line.split(b" ") == [b"PUB", subject.encode(), b"%d" % len(payload)]
        assert line.split() == their_line.split()  # (nats-py puts two spaces: no reply)
        assert body == their_body == payload + b"\r\n"
        assert nc.stats["out_msgs"] == before["out_msgs"] + 1
        assert nc.stats["out_bytes"] == before["out_bytes"] + len(payload)
    finally:
        await nc.close()


async def test_a_queued_publish_reaches_a_subscriber(nats_server: NatsServer) -> None:
    nc = await nats.connect(nats_server.url)
    sub = await nc.subscribe("queued.>")
    await nc.flush()
    for i in range(3):
        assert _natspy.write_publish(nc, f"queued.{i}", b"%d" % i)
    got = [await sub.next_msg(timeout=5) for _ in range(3)]  # no flush: the writer woke
    assert [(m.subject, m.data) for m in got] == [(f"queued.{i}", b"%d" % i) for i in range(3)]
    await nc.close()


async def test_a_queued_publish_is_refused_where_nats_py_must_decide(
    nats_server: NatsServer,
) -> None:
    # Closed, or over the pending buffer's limit: False, nothing queued; the caller's
    # nc.publish then raises or flushes as nats-py does.
    nc = await nats.connect(nats_server.url, pending_size=100)
    nc._pending.clear()
    assert not _natspy.write_publish(nc, "big", b"x" * 200)
    assert nc._pending == []
    await nc.close()
    assert not _natspy.write_publish(nc, "closed", b"+ACK")


async def test_direct_delivery_takes_each_message_at_once_in_order(
    nats_server: NatsServer,
) -> None:
    nc = await nats.connect(nats_server.url)
    taken: list[bytes] = []
    handed: list[bytes] = []
    all_taken = asyncio.Event()

    def take(
        subject: str,
        reply: str,
        data: bytes,
        headers: bytes | dict[str, str] | None,
        delivery: _natspy.DirectDelivery,
    ) -> None:
        taken.append(data)
        if len(taken) == 200:
            all_taken.set()

    delivery = _natspy.DirectDelivery(take)
    sub = await _natspy.subscribe_direct(nc, "direct", delivery)
    assert sub._wait_for_msgs_task is None  # no nats-py task between socket and take
    for i in range(200):
        await nc.publish("direct", b"%d" % i)
    await nc.flush()
    await asyncio.wait_for(all_taken.wait(), 5)
    assert taken == [b"%d" % i for i in range(200)]
    assert sub.pending_msgs == 0  # nothing kept
    assert sub.pending_bytes == 0

    # Work handed to later() runs as tasks a drain waits for.
    release = asyncio.Event()
    waiting = asyncio.Event()

    async def slow(data: bytes) -> None:
        waiting.set()
        await release.wait()
        handed.append(data)

    delivery._take = lambda subject, reply, data, headers, d: d.later(slow(data))
    await nc.publish("direct", b"late")
    await nc.flush()
    await asyncio.wait_for(waiting.wait(), 5)
    draining = asyncio.create_task(_natspy.drain(sub))
    while not nc._pongs:  # noqa: ASYNC110 - no event for it: the drain's PING is out
        await asyncio.sleep(0)
    await nc.flush()  # PONGs come in order: the drain's round trip is over too
    for _ in range(5):
        await asyncio.sleep(0)  # let it go on as far as it goes
    assert not draining.done()  # it waits for the handed-on work
    release.set()
    await draining
    assert handed == [b"late"]
    await nc.close()


async def test_a_take_that_raises_leaves_the_connection_reading(
    nats_server: NatsServer,
) -> None:
    nc = await nats.connect(nats_server.url)
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    nc._error_cb = on_error

    def take(*parts: object) -> None:  # (subject, reply, data, headers, delivery)
        raise RuntimeError("boom")

    await _natspy.subscribe_direct(nc, "raising", _natspy.DirectDelivery(take))
    other = await nc.subscribe("other")
    await nc.publish("raising", b"1")
    await nc.publish("other", b"2")
    assert (await other.next_msg(timeout=5)).data == b"2"  # the reader goes on
    assert nc.is_connected
    assert errors == []  # logged (goflux.transports), not a connection error
    await nc.close()


async def test_direct_delivery_leaves_the_other_subscriptions_to_nats_py(
    nats_server: NatsServer,
) -> None:
    # nats-py's _process_msg is bypassed for the direct subscription only: its
    # messages are counted as nats-py counts them, every other subscription (a
    # callback, an iterator, a request's reply) works as before, and once the direct
    # one is gone its messages are dropped as nats-py drops them.
    nc = await nats.connect(nats_server.url)
    taken: list[tuple[str, bytes, bytes | dict[str, str] | None, str]] = []
    delivery = _natspy.DirectDelivery(
        lambda subject, reply, data, headers, d: taken.append((subject, data, headers, reply))
    )
    direct = await _natspy.subscribe_direct(nc, "mixed.direct", delivery)
    echoed: list[bytes] = []

    async def echo(msg: Msg) -> None:
        echoed.append(msg.data)
        await msg.respond(b"re:" + msg.data)

    await nc.subscribe("mixed.echo", cb=echo)
    plain = await nc.subscribe("mixed.plain")
    before = nc.stats["in_msgs"]
    await nc.publish("mixed.direct", b"d1", headers={"A": "1"})
    reply = await nc.request("mixed.echo", b"e1", timeout=5)
    await nc.publish("mixed.plain", b"p1")
    assert (await plain.next_msg(timeout=5)).data == b"p1"
    assert reply.data == b"re:e1"
    assert echoed == [b"e1"]
    assert taken == [("mixed.direct", b"d1", {"A": "1"}, "")]  # (read at once: see
    # test_a_status_or_another_client_s_headers_are_read_at_once)
    assert nc.stats["in_msgs"] - before == 4  # direct, echo request, its reply, plain
    assert direct.delivered == 1
    nc._remove_sub(direct._id)  # nats-py forgot it; its UNSUB is not at the server yet
    await nc.publish("mixed.direct", b"d2")
    await nc.publish("mixed.plain", b"p2")
    assert (await plain.next_msg(timeout=5)).data == b"p2"  # (after d2: nats-py's order)
    assert [data for _, data, _, _ in taken] == [b"d1"]
    await nc.close()


async def test_a_queued_publish_over_max_payload_is_left_to_nats_py(
    nats_server: NatsServer,
) -> None:
    nc = await nats.connect(nats_server.url)
    nc._pending.clear()
    assert not _natspy.write_publish(nc, "big", b"x" * (nc.max_payload + 1))
    assert nc._pending == []
    assert _natspy.write_publish(nc, "fits", b"x" * nc.max_payload)
    await nc.close()


# ----------------------------------------------------------- widened reads

BIG = 64 * 1024
BURST = 48  # 3 MiB: more than the socket holds before the reader catches up


async def largest_read(reader: Client, publisher: Client, subject: str) -> int:
    """The largest chunk ``reader``'s parser got while ``BURST`` 64 KB messages came.

    They are stored first and fetched in one pull (a burst core NATS could drop parts
    of on a busy machine: a nats-server drops core messages to a client that falls
    behind a fast producer). Each arrives whole and in order.
    """
    pub_js = publisher.jetstream()
    await jetstream.ensure_stream(pub_js, name="BIG", subjects=["big.>"], storage="memory")
    for i in range(BURST):
        await pub_js.publish(subject, b"%05d" % i + b"x" * (BIG - 5))
    pull = await reader.jetstream().pull_subscribe(subject, stream="BIG")
    chunks: list[int] = []
    parse = reader._ps.parse

    async def counted(data: bytes = b"") -> None:
        chunks.append(len(data))
        await parse(data)

    reader._ps.parse = counted
    try:
        got = await pull.fetch(BURST, timeout=10)
    finally:
        reader._ps.parse = parse
        await pull.unsubscribe()
    assert [int(msg.data[:5]) for msg in got] == list(range(BURST))
    assert {len(msg.data) for msg in got} == {BIG}
    return max(chunks)


async def reconnecting_pair(server: NatsServer) -> tuple[list[Client], Awaitable[object]]:
    """Two clients of ``server`` that reconnect at once, and what waits for both to have."""
    back = [asyncio.Event(), asyncio.Event()]
    clients = []
    for event in back:

        async def reconnected(event: asyncio.Event = event) -> None:
            event.set()

        clients.append(
            await nats.connect(server.url, reconnected_cb=reconnected, reconnect_time_wait=0.1)
        )
    return clients, asyncio.gather(*(event.wait() for event in back))


async def test_a_goflux_subscriber_s_connection_reads_large_messages_in_large_chunks(
    nats_server: NatsServer,
) -> None:
    # nats-py reads 32 KiB at a time; a connection goflux subscribes on reads up to
    # 256 KiB (what has come), and another user's subscription still gets every message.
    plain, widened, publisher = [await nats.connect(nats_server.url) for _ in range(3)]
    try:
        assert await largest_read(plain, publisher, "big.plain") <= 32 * 1024
        goflux_nats.Subscriber(widened, BytesCodec())  # core NATS: widens at once
        assert await largest_read(widened, publisher, "big.widened") > 64 * 1024
        # (and the stream reader buffers up to twice that before it pauses the socket)
        assert widened._transport._io_reader._limit == _natspy.READ_SIZE
        assert await largest_read(plain, publisher, "big.plain") <= 32 * 1024  # untouched
    finally:
        for client in (plain, widened, publisher):
            await client.close()


async def test_a_jetstream_subscription_widens_its_connection_s_reads(js: JetStreamContext) -> None:
    nc = _natspy.connection(js)
    publisher = await nats.connect(nc.connected_url.geturl())
    subscriber = jetstream.Subscriber(js, BytesCodec(), stream=STREAM)
    try:
        assert await largest_read(nc, publisher, "big.before") <= 32 * 1024
        async with await subscriber.start("orders.>", Inbox[bytes]()):
            assert await largest_read(nc, publisher, "big.after") > 64 * 1024
    finally:
        await publisher.close()


@pytest.mark.slow  # a server restart
async def test_widened_reads_outlast_a_reconnect() -> None:
    # The transport nats-py makes after a reconnect is widened as its read loop starts.
    with NatsServer() as server:
        (nc, publisher), back = await reconnecting_pair(server)
        try:
            _natspy.widen_reads(nc)
            _natspy.widen_reads(nc)  # (once is enough: a second time changes nothing)
            assert await largest_read(nc, publisher, "big.first") > 64 * 1024
            await server.restart()
            await asyncio.wait_for(back, 20)
            assert nc.stats["reconnects"] == 1
            assert await largest_read(nc, publisher, "big.again") > 64 * 1024
            # (nats-py connects the same transport again, with a new stream reader)
            assert nc._transport._io_reader._limit == _natspy.READ_SIZE
        finally:
            await nc.close()
            await publisher.close()


@pytest.mark.slow  # a server restart
async def test_a_transport_that_cannot_be_widened_still_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another nats-py might make a transport this cannot change (say, one with
    # __slots__): the connection must read as before, now and after a reconnect.
    def refuse(transport: object) -> None:
        raise TypeError("this transport cannot be widened")

    monkeypatch.setattr(_natspy, "_widen", refuse)
    with NatsServer() as server:
        (nc, publisher), back = await reconnecting_pair(server)
        try:
            _natspy.widen_reads(nc)
            assert await largest_read(nc, publisher, "big.narrow") <= 32 * 1024
            await server.restart()
            await asyncio.wait_for(back, 20)
            assert await largest_read(nc, publisher, "big.again") <= 32 * 1024
        finally:
            await nc.close()
            await publisher.close()
