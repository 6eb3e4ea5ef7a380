"""Batched direct gets (get_batch, get_last_many) against a real nats-server.

A plain subscription on ``$JS.API.DIRECT.GET.<stream>`` sees every request the
reads send (the stream's responders are a queue group beside it), so the tests
check how much each request asks for, and that a refused call sends nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from goflux import DecodeError, Headers, JsonCodec, StrCodec, TransportError
from goflux.testing import NatsServer, server_binary
from goflux.transports import jetstream
from goflux.transports.jetstream import (
    FeatureUnsupported,
    ResourceLimit,
    StoredMessage,
    StreamFeatureDisabled,
    StreamNotFound,
)
from tests.helpers import stopped
from tests.models import Order

CODEC = StrCodec()
STREAM = "READS"


class Requests:
    """The direct get requests sent to a stream, as JSON."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def record(self, msg: Msg) -> None:
        self.bodies.append(json.loads(msg.data))


@pytest.fixture
async def requests(nc: Client) -> AsyncIterator[Requests]:
    seen = Requests()
    sub = await nc.subscribe(f"$JS.API.DIRECT.GET.{STREAM}", cb=seen.record)
    yield seen
    await sub.unsubscribe()


async def fill(js: JetStreamContext, subjects: list[str], *, data: bytes | None = None) -> None:
    """Publish one message per subject in ``subjects`` (in order), 500 in flight at most."""
    for start in range(0, len(subjects), 500):
        acks = [
            await js.publish_async(subject, data if data is not None else str(i).encode())
            for i, subject in enumerate(subjects[start : start + 500], start + 1)
        ]
        await asyncio.gather(*acks)


async def stream(js: JetStreamContext, **config: Any) -> None:
    config.setdefault("allow_direct", True)
    await jetstream.ensure_stream(js, name=STREAM, subjects=["r.>"], **config)


async def read(js: JetStreamContext, **options: Any) -> list[StoredMessage[str]]:
    return [m async for m in jetstream.get_batch(js, CODEC, stream=STREAM, **options)]


async def synced(nc: Client, requests: Requests) -> list[dict[str, Any]]:
    await nc.flush()  # the spy has seen every request sent before
    return requests.bodies


# ---------------------------------------------------------------- get_batch


@pytest.mark.slow  # bulk data
async def test_get_batch_reads_10_000_messages_in_order_in_bounded_requests(
    nc: Client, bare_js: JetStreamContext, requests: Requests
) -> None:
    await stream(bare_js)
    await fill(bare_js, [f"r.{i % 7}" for i in range(10_000)])
    read_so_far = 0
    previous = 0
    async for message in jetstream.get_batch(bare_js, CODEC, stream=STREAM, batch=500):
        assert message.sequence == previous + 1
        assert message.payload == str(message.sequence)
        assert message.subject == f"r.{(message.sequence - 1) % 7}"
        assert message.stream == STREAM
        previous = message.sequence
        read_so_far += 1
    assert read_so_far == 10_000
    bodies = await synced(nc, requests)
    assert len(bodies) == 20
    assert all(body["batch"] == 500 for body in bodies)
    assert [body["seq"] for body in bodies] == [1 + 500 * i for i in range(20)]


async def test_get_batch_filters_by_subject_and_starts_at_a_sequence(
    bare_js: JetStreamContext,
) -> None:
    await stream(bare_js)
    await fill(bare_js, [f"r.{'ab'[i % 2]}.{i}" for i in range(40)])
    only_a = await read(bare_js, subjects="r.a.>", batch=7)
    assert [m.sequence for m in only_a] == list(range(1, 41, 2))
    assert {m.subject.split(".")[1] for m in only_a} == {"a"}
    from_30 = await read(bare_js, start_seq=30, batch=4)
    assert [m.sequence for m in from_30] == list(range(30, 41))
    b_from_30 = await read(bare_js, subjects="r.b.*", start_seq=30)
    assert [m.sequence for m in b_from_30] == [30, 32, 34, 36, 38, 40]
    assert await read(bare_js, start_seq=41) == []
    assert await read(bare_js, subjects="r.none") == []


async def test_get_batch_stops_after_max_messages(
    nc: Client, bare_js: JetStreamContext, requests: Requests
) -> None:
    await stream(bare_js)
    await fill(bare_js, [f"r.{i}" for i in range(20)])
    got = await read(bare_js, max_messages=7, batch=3)
    assert [m.sequence for m in got] == list(range(1, 8))
    bodies = await synced(nc, requests)
    assert [(b["seq"], b["batch"]) for b in bodies] == [(1, 3), (4, 3), (7, 1)]


async def test_a_batch_cut_by_max_bytes_goes_on_from_where_it_was_cut(
    nc: Client, bare_js: JetStreamContext, requests: Requests
) -> None:
    await stream(bare_js)
    await fill(bare_js, ["r.a"] * 50, data=b"x" * 100)
    # The server counts subject + headers + data (103 bytes here) and stops once it
    # sent 1,000 bytes or more: 10 messages a batch.
    got = await read(bare_js, max_bytes=1_000, batch=1_000)
    assert [m.sequence for m in got] == list(range(1, 51))
    bodies = await synced(nc, requests)
    assert [b["seq"] for b in bodies] == [1, 11, 21, 31, 41]
    # A message larger than max_bytes still comes: one per request.
    requests.bodies.clear()
    assert len(await read(bare_js, max_bytes=10, max_messages=3)) == 3
    assert len(await synced(nc, requests)) == 3


async def test_an_empty_stream_yields_nothing(bare_js: JetStreamContext) -> None:
    await stream(bare_js)
    assert await read(bare_js) == []


async def test_stored_headers_are_kept_and_the_direct_get_headers_taken_off(
    bare_js: JetStreamContext,
) -> None:
    await stream(bare_js)
    publisher = jetstream.Publisher(bare_js, CODEC)
    headers = Headers({"Source": "feed"})
    headers.add("Tag", "a")
    headers.add("Tag", "b")
    await publisher.publish("r.h", "hello", headers=headers, message_id="m-1")
    await publisher.publish("r.h", "plain")
    first, second = await read(bare_js)
    assert first.headers["Source"] == "feed"
    assert first.id == "m-1"
    assert first.headers.get_all("Tag") == ["a", "b"]
    names = {name.lower() for name, _ in first.wire_headers.multi_items()}
    assert "nats-num-pending" not in names
    assert "nats-sequence" not in names
    assert (second.payload, second.sequence) == ("plain", 2)
    assert first.time <= second.time


async def test_a_message_the_codec_cannot_decode_names_subject_and_sequence(
    bare_js: JetStreamContext,
) -> None:
    await stream(bare_js)
    await bare_js.publish("r.bad", b"not json")
    with pytest.raises(DecodeError, match=r"stream 'READS', subject 'r.bad', sequence 1: "):
        async for _ in jetstream.get_batch(bare_js, JsonCodec(Order), stream=STREAM):
            pass


# ---------------------------------------------------------------- get_last_many


async def test_get_last_many_reads_the_last_message_of_500_subjects(
    nc: Client, bare_js: JetStreamContext, requests: Requests
) -> None:
    await stream(bare_js)
    # Subjects r.k.0 .. r.k.399 get two messages each; r.k.400 .. r.k.499 none.
    await fill(bare_js, [f"r.k.{i}" for i in range(400)] * 2)
    wanted = [f"r.k.{i}" for i in range(500)]
    last = await jetstream.get_last_many(bare_js, CODEC, stream=STREAM, subjects=wanted)
    assert sorted(last) == sorted(wanted[:400])
    for i in range(400):
        message = last[f"r.k.{i}"]
        assert message.sequence == 401 + i
        assert message.payload == str(401 + i)
    assert len(await synced(nc, requests)) == 1


async def test_get_last_many_pages_an_answer_cut_by_max_bytes(
    nc: Client, bare_js: JetStreamContext, requests: Requests
) -> None:
    await stream(bare_js)
    await fill(bare_js, [f"r.k.{i}" for i in range(30)] * 2, data=b"x" * 100)
    # r.k.0's last message is now the stream's last (sequence 61): in stream order it
    # comes last, in the third page.
    await bare_js.publish("r.k.0", b"newer")
    wanted = [f"r.k.{i}" for i in range(30)]
    last = await jetstream.get_last_many(
        bare_js, CODEC, stream=STREAM, subjects=wanted, max_bytes=1_000
    )
    assert {s: m.sequence for s, m in last.items()} == {
        "r.k.0": 61,
        **{f"r.k.{i}": 31 + i for i in range(1, 30)},
    }
    bodies = await synced(nc, requests)
    assert len(bodies) == 3  # 10 messages of about 106 bytes a page
    assert [b.get("seq") for b in bodies] == [None, 42, 52]
    assert {b.get("up_to_seq") for b in bodies[1:]} == {61}


async def test_get_last_many_sends_more_than_1024_subjects_in_chunks(
    nc: Client, bare_js: JetStreamContext, requests: Requests
) -> None:
    await stream(bare_js)
    await fill(bare_js, [f"r.k.{i}" for i in range(0, 2_000, 3)])
    wanted = [f"r.k.{i}" for i in range(2_000)]
    last = await jetstream.get_last_many(bare_js, CODEC, stream=STREAM, subjects=wanted)
    assert sorted(last) == sorted(f"r.k.{i}" for i in range(0, 2_000, 3))
    bodies = await synced(nc, requests)
    assert [len(b["multi_last"]) for b in bodies] == [1024, 976]
    # Both chunks read up to the stream's last sequence before the first request.
    assert [b["up_to_seq"] for b in bodies] == [667, 667]


async def test_get_last_many_takes_wildcards_and_splits_a_chunk_that_matches_too_many(
    nc: Client, bare_js: JetStreamContext, requests: Requests
) -> None:
    await stream(bare_js)
    subjects = [f"r.a.{i}" for i in range(600)] + [f"r.b.{i}" for i in range(600)]
    await fill(bare_js, [*subjects, "r.x.1", "r.x.2", "r.x.1"])
    few = await jetstream.get_last_many(bare_js, CODEC, stream=STREAM, subjects=["r.x.*"])
    assert {s: m.sequence for s, m in few.items()} == {"r.x.1": 1_203, "r.x.2": 1_202}
    with pytest.raises(ResourceLimit, match=r"'r\.>'.*more than 1024 subjects") as caught:
        await jetstream.get_last_many(bare_js, CODEC, stream=STREAM, subjects=["r.>"])
    assert caught.value.code == 413
    requests.bodies.clear()
    # Together they match 1,200 subjects, each alone 600: the chunk is split in two.
    both = await jetstream.get_last_many(bare_js, CODEC, stream=STREAM, subjects=["r.a.*", "r.b.*"])
    assert sorted(both) == sorted(subjects)
    bodies = await synced(nc, requests)
    assert [b["multi_last"] for b in bodies] == [["r.a.*", "r.b.*"], ["r.a.*"], ["r.b.*"]]
    # The refused request read nothing; the halves read up to where the stream was then.
    assert [b.get("up_to_seq") for b in bodies] == [None, 1_203, 1_203]
    # Of several subjects, the one that matches too many is named.
    with pytest.raises(ResourceLimit, match=r"'r\.b\.\*' and 1 more.*: 'r\.>' matches more"):
        await jetstream.get_last_many(bare_js, CODEC, stream=STREAM, subjects=["r.b.*", "r.>"])


# ---------------------------------------------------------------- refusals


async def test_a_stream_without_direct_gets_is_named_with_its_setting(
    bare_js: JetStreamContext,
) -> None:
    await stream(bare_js, allow_direct=False)
    await bare_js.publish("r.a", b"1")
    with pytest.raises(StreamFeatureDisabled, match=r"'READS'.*allow_direct") as caught:
        await read(bare_js)
    assert (caught.value.stream, caught.value.setting) == (STREAM, "allow_direct")
    with pytest.raises(StreamFeatureDisabled, match="allow_direct"):
        await jetstream.get_last_many(bare_js, CODEC, stream=STREAM, subjects=["r.a"])


async def test_a_missing_stream_is_stream_not_found(bare_js: JetStreamContext) -> None:
    with pytest.raises(StreamNotFound, match="'NOPE'"):
        async for _ in jetstream.get_batch(bare_js, CODEC, stream="NOPE"):
            pass
    with pytest.raises(StreamNotFound, match="'NOPE'"):
        await jetstream.get_last_many(bare_js, CODEC, stream="NOPE", subjects=["a"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_messages": 0}, "max_messages must be a positive integer, not 0"),
        ({"max_messages": -3}, "max_messages must be a positive integer"),
        ({"max_bytes": 0}, "max_bytes must be a positive integer"),
        ({"batch": 0}, "batch must be a positive integer"),
        ({"start_seq": 0}, "start_seq must be a sequence from 1 to"),
        ({"start_seq": 2**64}, "start_seq must be a sequence from 1 to 18446744073709551615"),
        ({"up_to_seq": 0}, "up_to_seq must be a sequence from 1 to"),
        ({"up_to_seq": 2**64}, "up_to_seq must be a sequence from 1 to"),
        ({"max_bytes": 2**63}, "max_bytes must be at most 9223372036854775807"),
        ({"batch": 2**63}, "batch must be at most 9223372036854775807"),
        ({"stream": "A.B"}, "invalid stream name"),
        ({"subjects": ["r.a", "r.b"]}, "one subject or wildcard pattern"),
    ],
)
async def test_bad_arguments_fail_at_the_call_and_send_nothing(
    nc: Client, bare_js: JetStreamContext, requests: Requests, options: Any, message: str
) -> None:
    options.setdefault("stream", STREAM)
    with pytest.raises(ValueError, match=message):
        jetstream.get_batch(bare_js, CODEC, **options)  # no iteration needed
    assert await synced(nc, requests) == []


async def test_get_last_many_refuses_no_subjects_and_a_string(
    nc: Client, bare_js: JetStreamContext, requests: Requests
) -> None:
    with pytest.raises(ValueError, match="at least one subject"):
        await jetstream.get_last_many(bare_js, CODEC, stream=STREAM, subjects=[])
    with pytest.raises(ValueError, match=r"not the string 'r\.a'"):
        await jetstream.get_last_many(bare_js, CODEC, stream=STREAM, subjects="r.a")
    with pytest.raises(ValueError, match="max_bytes must be at most 9223372036854775807"):
        await jetstream.get_last_many(
            bare_js, CODEC, stream=STREAM, subjects=["r.a"], max_bytes=2**63
        )
    assert await synced(nc, requests) == []


async def test_an_older_server_is_refused_before_anything_is_sent() -> None:
    binary = await asyncio.to_thread(server_binary, "2.10.26")
    async with NatsServer(binary=binary) as server:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await jetstream.ensure_stream(js, name=STREAM, subjects=["r.>"], allow_direct=True)
            seen = Requests()
            await nc.subscribe(f"$JS.API.DIRECT.GET.{STREAM}", cb=seen.record)
            with pytest.raises(FeatureUnsupported, match=r"batched direct get.*2\.11\.0.*2\.10"):
                jetstream.get_batch(js, CODEC, stream=STREAM)
            with pytest.raises(FeatureUnsupported, match=r"batched direct get"):
                await jetstream.get_last_many(js, CODEC, stream=STREAM, subjects=["r.a"])
            await nc.flush()
            assert seen.bodies == []
        finally:
            await nc.close()


# ---------------------------------------------------------------- mirrors


async def test_a_mirror_with_direct_gets_is_read_too(bare_js: JetStreamContext) -> None:
    await stream(bare_js)
    await fill(bare_js, [f"r.{i}" for i in range(100)])
    await jetstream.ensure_stream(
        bare_js, name="COPY", mirror={"name": STREAM}, allow_direct=True, mirror_direct=True
    )
    async with asyncio.timeout(10):  # the mirror copies later
        while (await bare_js.stream_info("COPY")).state.messages < 100:
            await bare_js._nc.flush()
    got = [m async for m in jetstream.get_batch(bare_js, CODEC, stream="COPY", batch=30)]
    assert [m.sequence for m in got] == list(range(1, 101))
    assert {m.stream for m in got} == {"COPY"}


async def test_a_read_left_early_leaves_no_subscription(
    nc: Client, bare_js: JetStreamContext
) -> None:
    await stream(bare_js)
    await fill(bare_js, [f"r.{i}" for i in range(100)])
    before = len(nc._subs)

    async def first() -> StoredMessage[str]:
        reads = jetstream.get_batch(bare_js, CODEC, stream=STREAM, batch=10)
        return await anext(reads)  # dropped here, never closed

    assert (await first()).sequence == 1
    gc.collect()
    async with asyncio.timeout(10):
        while len(nc._subs) > before:
            await nc.flush()


# ---------------------------------------------------------------- what a message holds


async def test_a_message_with_a_status_header_of_its_own_is_read_as_a_message(
    bare_js: JetStreamContext,
) -> None:
    # Another client (a bridge, nats.go) stores messages with a "Status" header.
    await stream(bare_js)
    await bare_js.publish("r.a", b"one")
    await bare_js.publish("r.a", b"two", headers={"Status": "404"})
    await bare_js.publish("r.b", b"bee", headers={"Status": "204", "Description": "EOB"})
    await bare_js.publish("r.c", b"cee", headers={"Status": "200"})
    await bare_js.publish("r.a", b"three")
    got = await read(bare_js)
    assert [(m.sequence, m.payload) for m in got] == [
        (1, "one"),
        (2, "two"),
        (3, "bee"),
        (4, "cee"),
        (5, "three"),
    ]
    assert got[1].wire_headers.get_all("Status") == ["404"]
    assert [m.payload for m in await read(bare_js, subjects="r.c")] == ["cee"]
    assert [m.payload for m in await read(bare_js, subjects="r.b", batch=1)] == ["bee"]
    last = await jetstream.get_last_many(
        bare_js, CODEC, stream=STREAM, subjects=["r.a", "r.b", "r.c"]
    )
    assert {s: m.payload for s, m in last.items()} == {"r.a": "three", "r.b": "bee", "r.c": "cee"}
    assert dict(last["r.b"].wire_headers.multi_items()) == {"Status": "204", "Description": "EOB"}
    # get_last (STREAM.MSG.GET) keeps the header too.
    single = await jetstream.get_last(bare_js, CODEC, stream=STREAM, subject="r.c")
    assert single is not None
    assert single.wire_headers.get_all("Status") == ["200"]


async def test_stored_headers_named_like_the_direct_get_ones_are_kept(
    bare_js: JetStreamContext,
) -> None:
    # A republished message stores Nats-Stream, Nats-Subject, Nats-Sequence,
    # Nats-Time-Stamp and Nats-Last-Sequence of its origin; the direct get appends its own.
    await jetstream.ensure_stream(
        bare_js, name="ORIGIN", subjects=["o.>"], republish={"src": "o.>", "dest": "r.o.>"}
    )
    await stream(bare_js)
    await bare_js.publish("o.x", b"hello")
    await bare_js.publish("o.x", b"again")
    async with asyncio.timeout(10):  # republished after the origin's ack
        while (await bare_js.stream_info(STREAM)).state.messages < 2:
            await bare_js._nc.flush()
    single = await jetstream.get_last(bare_js, CODEC, stream=STREAM, subject="r.o.x")
    assert single is not None
    stored = list(single.wire_headers.multi_items())
    assert [name for name, _ in stored] == [
        "Nats-Stream",
        "Nats-Subject",
        "Nats-Sequence",
        "Nats-Time-Stamp",
        "Nats-Last-Sequence",
    ]
    assert ("Nats-Stream", "ORIGIN") in stored
    batch = await read(bare_js)
    assert list(batch[-1].wire_headers.multi_items()) == stored
    assert (batch[-1].stream, batch[-1].sequence, batch[-1].subject) == (STREAM, 2, "r.o.x")
    many = await jetstream.get_last_many(bare_js, CODEC, stream=STREAM, subjects=["r.o.x"])
    assert list(many["r.o.x"].wire_headers.multi_items()) == stored
    assert many["r.o.x"].sequence == 2


# ---------------------------------------------------------------- ending a read


async def test_up_to_seq_ends_the_read_there_while_a_writer_keeps_ahead(
    nc: Client, bare_js: JetStreamContext, requests: Requests
) -> None:
    await stream(bare_js)
    await fill(bare_js, [f"r.{i % 2}" for i in range(30)])
    got = await read(bare_js, up_to_seq=25, batch=10)
    assert [m.sequence for m in got] == list(range(1, 26))
    bodies = await synced(nc, requests)
    assert [(b["seq"], b["batch"]) for b in bodies] == [(1, 10), (11, 10), (21, 5)]
    filtered = await read(bare_js, subjects="r.1", up_to_seq=20, batch=4)
    assert [m.sequence for m in filtered] == list(range(2, 21, 2))
    # A writer that keeps ahead of the read: it still ends at up_to_seq.
    written = 30
    async with contextlib.aclosing(
        jetstream.get_batch(bare_js, CODEC, stream=STREAM, up_to_seq=60, batch=5)
    ) as reads:
        sequences = []
        async for message in reads:
            sequences.append(message.sequence)
            await bare_js.publish("r.more", b"x")
            written += 1
    assert sequences == list(range(1, 61))
    assert written == 90


async def test_aclosing_a_read_left_early_removes_its_subscription_at_once(
    nc: Client, bare_js: JetStreamContext
) -> None:
    await stream(bare_js)
    await fill(bare_js, [f"r.{i}" for i in range(50)])
    before = len(nc._subs)
    async with contextlib.aclosing(
        jetstream.get_batch(bare_js, CODEC, stream=STREAM, batch=10)
    ) as reads:
        async for message in reads:
            assert len(nc._subs) == before + 1
            if message.sequence == 3:
                break
    assert len(nc._subs) == before


@pytest.mark.slow  # a 0.5 s timeout
async def test_a_server_that_stops_answering_mid_read_is_named_with_the_sequence() -> None:
    async with NatsServer() as server:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream(timeout=0.5)
            await stream(js)
            await fill(js, [f"r.{i}" for i in range(10)])
            assert server.pid is not None
            reads = jetstream.get_batch(js, CODEC, stream=STREAM, batch=3)
            async with contextlib.aclosing(reads):
                for sequence in (1, 2, 3):
                    assert (await anext(reads)).sequence == sequence
                await nc.flush()  # the first batch's end is in: the next request is next
                os.kill(server.pid, signal.SIGSTOP)
                try:
                    await stopped(server.pid)
                    with pytest.raises(
                        TransportError,
                        match=r"from sequence 1: the server stopped answering at sequence 3 ",
                    ):
                        await anext(reads)
                finally:
                    os.kill(server.pid, signal.SIGCONT)
        finally:
            await nc.close()


# ---------------------------------------------------------------- one point in time


async def test_get_last_many_over_several_chunks_reads_one_point_in_time(
    nats_server: NatsServer, nc: Client, bare_js: JetStreamContext, requests: Requests
) -> None:
    await stream(bare_js)
    await bare_js.publish("r.k.1500", b"old")  # only the second chunk finds something
    wanted = [f"r.k.{i}" for i in range(2_000)]
    writer = await nats.connect(nats_server.url)

    async def write_when_asked(msg: Msg) -> None:
        # Another client writes while the read is under way.
        if json.loads(msg.data).get("multi_last") and not written.done():
            written.set_result(None)
            wjs = writer.jetstream()
            await wjs.publish("r.k.0", b"new-0")
            await wjs.publish("r.k.1500", b"new-1500")

    written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    spy = await writer.subscribe(f"$JS.API.DIRECT.GET.{STREAM}", cb=write_when_asked)
    await writer.flush()
    try:
        last = await jetstream.get_last_many(bare_js, CODEC, stream=STREAM, subjects=wanted)
    finally:
        await spy.unsubscribe()
    # The first chunk found nothing: without the stream's last sequence asked for first,
    # the second chunk would read later than the first.
    assert {s: (m.sequence, m.payload) for s, m in last.items()} == {"r.k.1500": (1, "old")}
    bodies = await synced(nc, requests)
    assert [(len(b["multi_last"]), b["up_to_seq"]) for b in bodies] == [(1024, 1), (976, 1)]
    await writer.close()


# ---------------------------------------------------------------- nats-server 2.11


async def test_get_last_many_on_2_11_reads_the_subject_after_a_cut_answer() -> None:
    # nats-server 2.11 counts the pending subjects of a multi_last answer one short:
    # an answer cut just before the last subject says none is left.
    binary = await asyncio.to_thread(server_binary, "2.11.11")
    async with NatsServer(binary=binary) as server:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await stream(js)
            await fill(js, [f"r.k.{i}" for i in range(11)], data=b"x" * 100)
            wanted = [f"r.k.{i}" for i in range(11)]
            for max_bytes in (1_000, 1, 10_000):
                last = await jetstream.get_last_many(
                    js, CODEC, stream=STREAM, subjects=wanted, max_bytes=max_bytes
                )
                assert sorted(last) == sorted(wanted), max_bytes
            assert len(await read(js, max_bytes=1_000)) == 11
        finally:
            await nc.close()
