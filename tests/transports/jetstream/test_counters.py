"""Distributed counters (ADR-49) against a real nats-server: exact totals, sources, refusals."""

from __future__ import annotations

import asyncio
import contextlib
import decimal
import time
from typing import Any

import nats
import pytest
from nats.js import JetStreamContext

from goflux import (
    BytesCodec,
    DecodeError,
    DuplicateMessageId,
    FeatureUnsupported,
    InvalidSubject,
    PublishError,
    StreamFeatureDisabled,
    StreamNotFound,
    TransportError,
)
from goflux.testing import NatsServer, server_binary
from goflux.transports import jetstream
from goflux.transports.jetstream import Counter, CounterEntry, SubjectOutsideStream
from goflux.transports.jetstream._replies import refused
from goflux.transports.jetstream._status import MSG_COUNTER_BROKEN
from tests.conftest import Otel
from tests.nodejs import run_node

BIG = 2**70
# 20,000 digits: beyond Python's 4,300-digit limit on int/str conversion.
HUGE = int(decimal.Decimal("9" * 20_000))


def digits(value: int) -> str:
    """``value`` in decimal, whatever its size (str() of a HUGE int raises)."""
    return str(decimal.Decimal(value))


async def until_total(counter: Counter, subject: str, total: int, within: float = 10.0) -> None:
    """Wait until ``counter`` reads ``total`` on ``subject`` (sourcing is asynchronous):
    each look is a round trip, and a wrong total fails after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while (seen := await counter.get(subject)) != total:
        assert loop.time() < deadline, f"{subject} of {counter.stream} reads {seen}, not {total}"


@pytest.fixture
async def counted(bare_js: JetStreamContext) -> JetStreamContext:
    """Two counter streams: HITS with direct gets, SLOW without (message get, consumer)."""
    await jetstream.ensure_stream(
        bare_js, name="HITS", subjects=["hits.>"], allow_msg_counter=True, allow_direct=True
    )
    await jetstream.ensure_stream(bare_js, name="SLOW", subjects=["slow.>"], allow_msg_counter=True)
    return bare_js


async def test_ensure_stream_creates_a_counter_stream(counted: JetStreamContext) -> None:
    info = await counted._nc.request("$JS.API.STREAM.INFO.HITS", b"", timeout=5)
    assert b'"allow_msg_counter":true' in info.data


@pytest.mark.parametrize("stream", ["HITS", "SLOW"])
async def test_add_returns_the_total_and_get_reads_it(
    counted: JetStreamContext, stream: str
) -> None:
    counter = Counter(counted, stream=stream)
    subject = f"{stream.lower()}.page"
    assert await counter.get(subject) is None  # no counter yet
    assert await counter.add(subject, 5) == 5
    assert await counter.add(subject, -7) == -2
    assert await counter.add(subject, 0) == -2  # 0 is valid: the total, stored again
    assert await counter.get(subject) == -2
    entry = await counter.entry(subject)
    assert entry is not None
    assert (entry.subject, entry.value, entry.increment, entry.sequence) == (subject, -2, 0, 3)
    assert entry.sources == {}


@pytest.mark.parametrize("stream", ["HITS", "SLOW"])
async def test_values_beyond_2_64_stay_exact(counted: JetStreamContext, stream: str) -> None:
    counter = Counter(counted, stream=stream)
    subject = f"{stream.lower()}.big"
    assert await counter.add(subject, BIG) == BIG
    assert await counter.add(subject, BIG) == 2 * BIG
    assert await counter.get(subject) == 2 * BIG
    assert await counter.totals() == {subject: 2 * BIG}
    huge = 10**200 + 1  # far beyond any float's precision
    assert await counter.add(subject, huge) == 2 * BIG + huge
    assert await counter.add(subject, -huge - 2 * BIG - 1) == -1
    assert await counter.get(subject) == -1


@pytest.mark.slow  # 10,000 adds
@pytest.mark.parametrize("stream", ["HITS", "SLOW"])
async def test_ten_concurrent_adders_give_the_exact_total(
    counted: JetStreamContext, stream: str
) -> None:
    counter = Counter(counted, stream=stream)
    subject = f"{stream.lower()}.shared"
    adders, increments = 10, 1_000
    delta = 2**64 + 3  # each increment beyond 64 bits, so the total is too
    started = time.perf_counter()

    async def adder() -> list[int]:
        return [await counter.add(subject, delta) for _ in range(increments)]

    seen = await asyncio.gather(*(adder() for _ in range(adders)))
    elapsed = time.perf_counter() - started
    total = adders * increments * delta
    assert await counter.get(subject) == total
    # Every PubAck gave a distinct total: each increment was applied exactly once.
    every = sorted(value for values in seen for value in values)
    assert every == [delta * n for n in range(1, adders * increments + 1)]
    print(f"{adders}x{increments} adds on {stream}: {elapsed:.2f}s")


@pytest.mark.parametrize("stream", ["HITS", "SLOW"])
async def test_totals_reads_every_counter_of_a_pattern(
    counted: JetStreamContext, stream: str
) -> None:
    counter = Counter(counted, stream=stream)
    prefix = stream.lower()
    for region, value in (("eu", 3), ("us", BIG), ("ap", -4)):
        await counter.add(f"{prefix}.clicks.{region}", value)
    await counter.add(f"{prefix}.views.eu", 9)
    await counter.add(f"{prefix}.clicks.eu", 1)
    assert await counter.totals(f"{prefix}.clicks.*") == {
        f"{prefix}.clicks.eu": 4,
        f"{prefix}.clicks.us": BIG,
        f"{prefix}.clicks.ap": -4,
    }
    assert len(await counter.totals()) == 4
    assert await counter.totals(f"{prefix}.none.>") == {}
    entries = [entry async for entry in counter.entries(f"{prefix}.clicks.eu")]
    assert [(e.value, e.increment) for e in entries] == [(4, 1)]


@pytest.mark.parametrize("status", ["404", "204", "408"])
async def test_a_counter_written_with_a_status_header_of_its_own_is_read(
    counted: JetStreamContext, status: str
) -> None:
    """Another client's increment may carry a ``Status`` header: it is data, not a reply status."""
    await counted.publish("hits.raw.a", b"", headers={"Nats-Incr": "+5", "Status": status})
    await counted.publish("hits.raw.b", b"", headers={"Nats-Incr": "+7"})
    counter = Counter(counted, stream="HITS")
    assert await counter.get("hits.raw.a") == 5
    assert await counter.totals("hits.raw.*") == {"hits.raw.a": 5, "hits.raw.b": 7}


async def test_totals_over_more_subjects_than_one_batched_get_answers(
    counted: JetStreamContext,
) -> None:
    # The server's batched direct get answers at most 1,024 subjects ("413 Too Many
    # Results"): the totals are read with a consumer instead.
    counter = Counter(counted, stream="HITS")
    receipts = await jetstream.Publisher(counted, BytesCodec()).publish_many(
        jetstream.Outgoing(f"hits.many.{n}", b"", server_headers={"Nats-Incr": str(n)})
        for n in range(1_100)
    )
    assert receipts[-1].value == 1_099
    totals = await counter.totals("hits.many.*")
    assert totals == {f"hits.many.{n}": n for n in range(1_100)}


async def test_a_publish_receipt_of_a_counter_stream_carries_its_value(
    counted: JetStreamContext,
) -> None:
    publisher = jetstream.Publisher(counted, BytesCodec())
    first = await publisher.publish("hits.r", b"", server_headers={"Nats-Incr": f"+{BIG}"})
    second = await publisher.publish("hits.r", b"", server_headers={"Nats-Incr": "-1"})
    assert (first.value, second.value) == (BIG, BIG - 1)
    await jetstream.ensure_stream(counted, name="PLAIN", subjects=["plain.>"])
    plain = await publisher.publish("plain.x", b"data")
    assert plain.value is None


async def test_a_repeated_message_id_counts_once(counted: JetStreamContext) -> None:
    counter = Counter(counted, stream="HITS")
    assert await counter.add("hits.once", 10, message_id="order-1") == 10
    assert await counter.add("hits.once", 10, message_id="order-1") == 10  # duplicate
    assert await counter.add("hits.once", 1) == 11
    # A retry after others added gives the total its first add gave: the message the
    # ID stored, not the counter's total now.
    assert await counter.add("hits.once", 10, message_id="order-1") == 10
    assert await counter.get("hits.once") == 11


async def test_a_message_id_reused_for_another_subject_is_refused(
    counted: JetStreamContext,
) -> None:
    counter = Counter(counted, stream="HITS")
    assert await counter.add("hits.a", 10, message_id="m1") == 10
    assert await counter.add("hits.b", 7) == 7
    for subject in ("hits.b", "hits.new"):  # a counter, and a subject without one
        with pytest.raises(DuplicateMessageId) as caught:
            await counter.add(subject, 5, message_id="m1")
        error = caught.value
        assert (error.subject, error.stream, error.message_id) == (subject, "HITS", "m1")
        assert (error.counted_subject, error.sequence) == ("hits.a", 1)
        assert (error.may_be_stored, error.permanent) == (False, True)
        assert "'m1'" in str(error)
        assert "'hits.a'" in str(error)
    assert await counter.totals() == {"hits.a": 10, "hits.b": 7}  # nothing added


async def test_a_duplicate_whose_message_is_gone_reads_the_total(
    counted: JetStreamContext,
) -> None:
    counter = Counter(counted, stream="HITS")
    assert await counter.add("hits.a", 10, message_id="m1") == 10  # sequence 1
    assert await counter.add("hits.a", 5) == 15  # sequence 2
    await counted.purge_stream("HITS", seq=2)  # removes sequence 1; the ID is remembered
    assert await counter.add("hits.a", 10, message_id="m1") == 15  # the total now
    # On a subject without a counter it cannot be told where the ID counted.
    with pytest.raises(DuplicateMessageId, match="has no counter") as caught:
        await counter.add("hits.none", 10, message_id="m1")
    assert (caught.value.counted_subject, caught.value.may_be_stored) == (None, False)
    assert await counter.get("hits.none") is None


async def test_aggregation_through_sources_gives_the_exact_sum(
    counted: JetStreamContext,
) -> None:
    js = counted
    for region in ("EU", "US"):
        await jetstream.ensure_stream(
            js, name=region, subjects=[f"{region.lower()}.>"], allow_msg_counter=True
        )
    eu, us = Counter(js, stream="EU"), Counter(js, stream="US")
    await eu.add("eu.hits", BIG)
    await us.add("us.hits", 5)
    await jetstream.ensure_stream(
        js,
        name="GLOBAL",
        allow_msg_counter=True,
        allow_direct=True,
        sources=[
            {"name": region, "subject_transforms": [{"src": f"{low}.>", "dest": "global.>"}]}
            for region, low in (("EU", "eu"), ("US", "us"))
        ],
    )
    await eu.add("eu.hits", 1)
    await us.add("us.hits", -2)
    total = BIG + 1 + 5 - 2
    world = Counter(js, stream="GLOBAL")
    await until_total(world, "global.hits", total)
    entry = await world.entry("global.hits")
    assert entry is not None
    assert entry.sources == {"EU": {"eu.hits": BIG + 1}, "US": {"us.hits": 3}}
    assert await world.totals() == {"global.hits": total}
    # The aggregate has no subjects of its own: adding to it is refused before sending.
    with pytest.raises(InvalidSubject, match="only sums its sources") as caught:
        await world.add("global.hits", 1)
    assert "'GLOBAL'" in str(caught.value)
    # A mirror holds the same counters (it cannot count itself, but reads work).
    await jetstream.ensure_stream(js, name="EU_COPY", mirror={"name": "EU"})
    copy = Counter(js, stream="EU_COPY")
    await until_total(copy, "eu.hits", BIG + 1)
    with pytest.raises(StreamFeatureDisabled, match="mirrors 'EU'") as refused:
        await copy.add("eu.hits", 1)
    assert (refused.value.stream, refused.value.setting) == ("EU_COPY", "allow_msg_counter")


# ------------------------------------------------------------------ refusals


async def test_a_stream_without_counters_is_refused_naming_stream_and_setting(
    counted: JetStreamContext,
) -> None:
    await jetstream.ensure_stream(counted, name="PLAIN", subjects=["plain.>"])
    with pytest.raises(StreamFeatureDisabled) as caught:
        await Counter(counted, stream="PLAIN").add("plain.x", 1)
    assert (caught.value.stream, caught.value.setting) == ("PLAIN", "allow_msg_counter")
    assert "nothing sent" in str(caught.value)
    # What the server answers a raw increment (err_code 10168) maps to the same error.
    with pytest.raises(StreamFeatureDisabled) as answered:
        await jetstream.Publisher(counted, BytesCodec()).publish(
            "plain.x", b"", server_headers={"Nats-Incr": "+1"}
        )
    assert (answered.value.stream, answered.value.setting) == ("PLAIN", "allow_msg_counter")
    assert "message counters is disabled" in str(answered.value)
    # The setting cannot be added to an existing stream: no hint to do so.
    assert "only be given when a stream is created" in str(answered.value)
    assert "ensure_stream(" not in str(answered.value)
    assert (await counted.stream_info("PLAIN")).state.messages == 0


async def test_a_ttl_on_a_counter_stream_is_refused_saying_they_do_not_combine(
    counted: JetStreamContext,
) -> None:
    publisher = jetstream.Publisher(counted, BytesCodec())
    with pytest.raises(StreamFeatureDisabled) as caught:
        await publisher.publish("hits.t", b"", server_headers={"Nats-Incr": "+1"}, ttl=5)
    assert (caught.value.stream, caught.value.setting) == ("HITS", "allow_msg_ttl")
    assert "cannot be combined" in str(caught.value)


@pytest.mark.parametrize(
    ("body", "headers", "err_code", "says"),
    [
        (b"data", {}, 10169, "every publish needs a Nats-Incr header and an empty body"),
        (b"x", {"Nats-Incr": "+1"}, 10170, "an increment (Nats-Incr) has an empty body"),
        (b"", {"Nats-Incr": "1.5"}, 10171, "Nats-Incr is a decimal integer"),
        (b"", {"Nats-Incr": "+1", "Nats-Rollup": "sub"}, 10171, "carries no Nats-Rollup"),
    ],
)
async def test_what_a_counter_stream_refuses_is_named(
    counted: JetStreamContext, body: bytes, headers: dict[str, str], err_code: int, says: str
) -> None:
    publisher = jetstream.Publisher(counted, BytesCodec())
    with pytest.raises(PublishError) as caught:
        await publisher.publish("hits.x", body, server_headers=headers)
    assert (caught.value.err_code, caught.value.permanent) == (err_code, True)
    assert says in str(caught.value)
    assert "stream 'HITS'" in str(caught.value)
    assert (await counted.stream_info("HITS")).state.messages == 0


def test_a_broken_counter_is_named() -> None:
    # No client can store a non-counter message in a counter stream (the server
    # refuses it), so the server's answer for a broken counter is taken as it comes.
    error = refused("hits.x", 400, MSG_COUNTER_BROKEN, "message counter is broken", "HITS")
    assert error.permanent
    assert "the counter 'hits.x' of stream 'HITS' is broken" in str(error)


async def test_a_subject_outside_the_stream_is_refused(counted: JetStreamContext) -> None:
    counter = Counter(counted, stream="HITS")
    with pytest.raises(SubjectOutsideStream, match=r"'slow\.x' is not a subject of counter stream"):
        await counter.add("slow.x", 1)  # another counter stream's subject: never sent
    assert (await counted.stream_info("SLOW")).state.messages == 0


async def test_a_missing_stream_is_named(counted: JetStreamContext) -> None:
    with pytest.raises(StreamNotFound, match="NOPE"):
        await Counter(counted, stream="NOPE").add("nope.x", 1)
    with pytest.raises(StreamNotFound, match="NOPE"):
        await Counter(counted, stream="NOPE").get("nope.x")


class Index:
    """An integer type that is no int (like NumPy's): it has ``__index__``."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


class OddInt(int):
    """An int whose formatting says something else: the number is what counts."""

    def __format__(self, spec: str) -> str:
        return "lots"

    def __str__(self) -> str:
        return "lots"


async def test_any_integer_is_a_delta(counted: JetStreamContext) -> None:
    counter = Counter(counted, stream="HITS")
    assert await counter.add("hits.i", Index(3)) == 3
    assert await counter.add("hits.i", OddInt(-5)) == -2
    numpy = pytest.importorskip("numpy")
    assert await counter.add("hits.i", numpy.int64(7)) == 5
    with pytest.raises(TypeError, match="a counter delta is an int"):
        await counter.add("hits.i", numpy.bool_(True))
    assert await counter.get("hits.i") == 5


@pytest.mark.parametrize("delta", [True, 1.0, "1", None, 2.5])
async def test_a_delta_that_is_not_an_int_is_refused_fast(
    counted: JetStreamContext, delta: Any
) -> None:
    with pytest.raises(TypeError, match="a counter delta is an int"):
        await Counter(counted, stream="HITS").add("hits.x", delta)
    assert (await counted.stream_info("HITS")).state.messages == 0


async def test_bad_subjects_are_refused(counted: JetStreamContext) -> None:
    counter = Counter(counted, stream="HITS")
    with pytest.raises(InvalidSubject):
        await counter.get("hits.*")  # one counter: no wildcard
    with pytest.raises(InvalidSubject):
        await counter.add("hits..x", 1)
    with pytest.raises(InvalidSubject):
        await counter.totals("hits.>.x")
    with pytest.raises(ValueError, match="stream name"):
        Counter(counted, stream="A.B")


async def test_a_message_that_is_not_a_counter_value_is_a_decode_error(
    bare_js: JetStreamContext,
) -> None:
    await jetstream.ensure_stream(bare_js, name="PLAIN", subjects=["plain.>"], allow_direct=True)
    await jetstream.Publisher(bare_js, BytesCodec()).publish("plain.x", b'{"val": 1.5}')
    with pytest.raises(DecodeError, match=r"stream 'PLAIN', subject 'plain\.x', sequence 1"):
        await Counter(bare_js, stream="PLAIN").get("plain.x")
    with pytest.raises(DecodeError):
        await Counter(bare_js, stream="PLAIN").totals()


async def test_a_server_older_than_2_12_is_refused_before_sending() -> None:
    binary = await asyncio.to_thread(server_binary, "2.11.11")
    async with NatsServer(binary=binary) as server:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await jetstream.ensure_stream(js, name="OLD", subjects=["old.>"])
            with pytest.raises(FeatureUnsupported, match=r"2\.12") as caught:
                await Counter(js, stream="OLD").add("old.x", 1)
            assert caught.value.server_version == "2.11.11"
            assert (await js.stream_info("OLD")).state.messages == 0
        finally:
            await nc.close()


# ------------------------------------------------------------------ telemetry


async def test_add_records_a_publish_span_and_metrics(
    counted: JetStreamContext, otel: Otel
) -> None:
    counter = Counter(counted, stream="HITS", telemetry=otel.telemetry)
    await counter.add("hits.traced", 2)
    span = otel.span("send hits.traced")
    assert span.attributes is not None
    assert span.attributes["messaging.destination.name"] == "hits.traced"
    assert "messaging.client.sent.messages" in otel.metrics()


# ------------------------------------------------------------------ interop


async def test_nats_js_and_goflux_read_and_add_to_each_others_counters(
    nats_server: NatsServer, counted: JetStreamContext
) -> None:
    # nats.js v2 has no typed counter: tests/node/counters.mjs increments with a
    # Nats-Incr header and parses "val" itself (as a BigInt).
    counter = Counter(counted, stream="HITS")
    assert await counter.add("hits.py", BIG) == BIG
    delta = 3 * 2**64 + 7
    seen = await run_node("counters.mjs", nats_server.url, "HITS", "hits.py", str(delta), "hits.py")
    total = BIG + delta
    assert seen["ack"] == str(total)  # nats.js added to the goflux counter
    assert seen["added"] == {"direct": str(total), "msg_get": str(total)}
    assert await counter.get("hits.py") == total  # goflux reads the sum

    seen = await run_node("counters.mjs", nats_server.url, "HITS", "hits.js", "-5", "hits.py")
    assert seen["ack"] == "-5"
    assert seen["read"] == {"direct": str(total), "msg_get": str(total)}  # nats.js reads goflux's
    assert await counter.get("hits.js") == -5  # goflux reads the nats.js counter
    assert await counter.add("hits.js", 2**80) == 2**80 - 5
    assert await counter.totals() == {"hits.py": total, "hits.js": 2**80 - 5}


# ------------------------------------------------------------------ edge cases


@pytest.mark.parametrize("stream", ["HITS", "SLOW"])
async def test_counters_of_20_000_digits_stay_exact(
    nats_server: NatsServer, counted: JetStreamContext, stream: str
) -> None:
    counter = Counter(counted, stream=stream)
    prefix = stream.lower()
    assert await counter.add(f"{prefix}.huge", HUGE) == HUGE
    assert await counter.add(f"{prefix}.huge", HUGE) == 2 * HUGE  # 20,001 digits
    assert await counter.add(f"{prefix}.huge", -HUGE - 1) == HUGE - 1
    assert await counter.get(f"{prefix}.huge") == HUGE - 1
    entry = await counter.entry(f"{prefix}.huge")
    assert entry is not None
    assert entry.increment == -HUGE - 1
    assert digits(HUGE - 1) in repr(entry)  # repr() of such an int would raise
    publisher = jetstream.Publisher(counted, BytesCodec())
    receipt = await publisher.publish(
        f"{prefix}.huge", b"", server_headers={"Nats-Incr": "+" + digits(HUGE)}
    )
    assert receipt.value == 2 * HUGE - 1
    assert digits(2 * HUGE - 1) in repr(receipt)
    # Another client adds 20,000 digits of its own.
    nc = await nats.connect(nats_server.url)
    try:
        reply = await nc.request(
            f"{prefix}.other", b"", headers={"Nats-Incr": "-" + digits(HUGE)}, timeout=5
        )
        assert b'"val":"-999' in reply.data
    finally:
        await nc.close()
    assert await counter.get(f"{prefix}.other") == -HUGE
    assert await counter.totals() == {f"{prefix}.huge": 2 * HUGE - 1, f"{prefix}.other": -HUGE}


async def test_an_add_without_message_id_left_unanswered_warns_of_counting_twice(
    counted: JetStreamContext,
) -> None:
    counter = Counter(counted, stream="HITS", timeout=1e-6)  # no PubAck comes so soon
    await counter.get("hits.t")  # read the stream's config: the add only publishes
    with pytest.raises(PublishError) as caught:
        await counter.add("hits.t", 1)
    assert caught.value.may_be_stored
    text = str(caught.value)
    assert "may count it twice" in text
    assert "message_id=" in text
    assert "same message_id" not in text
    assert isinstance(caught.value.__cause__, PublishError)
    # With a message ID, a retry with the same ID is the advice.
    with pytest.raises(PublishError, match="same message_id") as retried:
        await counter.add("hits.t", 1, message_id="t-1")
    assert retried.value.may_be_stored


@pytest.mark.parametrize("read", ["get", "totals"])
async def test_reads_go_on_after_allow_direct_is_turned_off(
    counted: JetStreamContext, read: str
) -> None:
    counter = Counter(counted, stream="HITS")
    await counter.add("hits.d", 4)
    assert await counter.get("hits.d") == 4  # by direct get: cached, the stream allows it
    config = (await counted.stream_info("HITS")).config
    config.allow_direct = False
    await counted.update_stream(config)
    if read == "get":
        assert await counter.get("hits.d") == 4
    else:
        assert await counter.totals() == {"hits.d": 4}
    await counted.delete_stream("HITS")
    with pytest.raises(StreamNotFound, match="HITS"):
        await (counter.get("hits.d") if read == "get" else counter.totals())


async def test_a_deleted_direct_stream_is_not_found(counted: JetStreamContext) -> None:
    counter = Counter(counted, stream="HITS")
    assert await counter.get("hits.d") is None  # config read: direct gets
    await counted.delete_stream("HITS")
    with pytest.raises(StreamNotFound, match="HITS"):
        await counter.get("hits.d")
    with pytest.raises(StreamNotFound, match="HITS"):
        await counter.totals()


@pytest.mark.slow  # bulk data
@pytest.mark.parametrize(
    ("meanwhile", "error"),
    [
        ("purge", r"after \d+ messages, with more to come"),
        ("allow_direct off", r"stopped allowing direct gets after \d+ counters"),
    ],
)
async def test_a_batched_read_whose_messages_go_meanwhile_fails(
    counted: JetStreamContext, meanwhile: str, error: str
) -> None:
    # 40 counters of 20,000 digits: more bytes than one batch of the batched direct
    # get, so it reads them in two; the stream is purged between, or stops allowing
    # direct gets (the rest read by a consumer would give the entries read twice).
    counter = Counter(counted, stream="HITS")
    for n in range(40):
        await counter.add(f"hits.w.{n}", HUGE + n)
    assert await counter.totals("hits.w.*") == {f"hits.w.{n}": HUGE + n for n in range(40)}
    config = (await counted.stream_info("HITS")).config
    config.allow_direct = False
    seen: list[CounterEntry] = []

    async def read_changing() -> None:
        async with contextlib.aclosing(counter.entries("hits.w.*")) as entries:
            async for entry in entries:
                if not seen and meanwhile == "purge":
                    await counted.purge_stream("HITS")
                elif not seen:
                    await counted.update_stream(config)
                seen.append(entry)

    with pytest.raises(TransportError, match=error):
        await read_changing()
    assert 0 < len(seen) < 40
    # Read again: nothing after the purge; all, by a consumer, without direct gets.
    assert len(await counter.totals("hits.w.*")) == (0 if meanwhile == "purge" else 40)


async def test_entries_left_early_leave_no_consumer_behind(counted: JetStreamContext) -> None:
    counter = Counter(counted, stream="SLOW")  # no direct gets: read by a consumer
    for n in range(3):
        await counter.add(f"slow.e.{n}", n)
    async with contextlib.aclosing(counter.entries()) as entries:
        async for entry in entries:
            assert entry.subject == "slow.e.0"
            assert (await counted.stream_info("SLOW")).state.consumer_count == 1
            break
    assert (await counted.stream_info("SLOW")).state.consumer_count == 0


async def test_a_batched_read_left_early_leaves_no_subscription_behind(
    counted: JetStreamContext,
) -> None:
    counter = Counter(counted, stream="HITS")  # direct gets: a reply inbox
    for n in range(3):
        await counter.add(f"hits.e.{n}", n)
    subs = counted._nc._subs
    before = len(subs)
    async with contextlib.aclosing(counter.entries("hits.e.*")) as entries:
        async for entry in entries:
            assert entry.subject == "hits.e.0"
            assert len(subs) == before + 1
            break
    assert len(subs) == before
