"""Mirrors, sources, stream options, consumer pauses and get_last against a real server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import RePublish, StreamSource

from goflux import DecodeError, Headers, JsonCodec, StrCodec
from goflux.transports import jetstream
from tests.conftest import STREAM
from tests.helpers import Inbox
from tests.models import Order, order

DEADLINE = 10.0  # seconds a test waits for the server to reach a state


async def raw_info(js: JetStreamContext, kind: str, *names: str) -> dict[str, Any]:
    """The raw JSON of ``$JS.API.<kind>.INFO.<names>`` (fields nats-py may not map)."""
    reply = await js._nc.request(f"$JS.API.{kind}.INFO.{'.'.join(names)}", b"", timeout=5)
    info: dict[str, Any] = json.loads(reply.data)
    assert "error" not in info, info
    return info


class Updates:
    """Counts the stream updates sent through ``nc`` (its own API requests, seen raw)."""

    def __init__(self, nc: Client, subscription: Subscription) -> None:
        self._nc = nc
        self._subscription = subscription

    async def count(self) -> int:
        await self._nc.flush()  # the server routed our requests to us before the PONG
        return self._subscription.pending_msgs


@pytest.fixture
async def updates(nc: Client) -> AsyncIterator[Updates]:
    subscription = await nc.subscribe("$JS.API.STREAM.UPDATE.>")
    await nc.flush()
    yield Updates(nc, subscription)
    await subscription.unsubscribe()


async def messages_reach(js: JetStreamContext, stream: str, count: int) -> int:
    """Wait until ``stream`` holds ``count`` messages (mirrors and sources copy later)."""
    async with asyncio.timeout(DEADLINE):
        while (held := (await js.stream_info(stream)).state.messages) < count:
            await js._nc.flush()
    return held


async def publish_orders(js: JetStreamContext, subject: str, count: int) -> None:
    publisher = jetstream.Publisher(js, JsonCodec(Order))
    for n in range(1, count + 1):
        await publisher.publish(subject, order(n))


# ensure_stream: mirrors and sources


async def test_a_mirror_has_no_subjects_and_gets_the_messages(
    js: JetStreamContext, updates: Updates
) -> None:
    await publish_orders(js, "orders.eu", 3)
    info = await jetstream.ensure_stream(js, name="ORDERS_COPY", mirror={"name": STREAM})
    assert info.config.mirror is not None
    assert info.config.mirror.name == STREAM
    assert not info.config.subjects
    assert await messages_reach(js, "ORDERS_COPY", 3) == 3

    again = await jetstream.ensure_stream(js, name="ORDERS_COPY", mirror=StreamSource(name=STREAM))
    assert again.created == info.created  # the same config: neither recreated nor updated
    assert await updates.count() == 0


async def test_re_ensuring_a_mirror_does_not_update_it(
    bare_js: JetStreamContext, updates: Updates
) -> None:
    await jetstream.ensure_stream(bare_js, name="SRC", subjects=["src.>"])
    mirror = {"name": "SRC", "filter_subject": "src.eu.>"}
    await jetstream.ensure_stream(bare_js, name="M", mirror=mirror, storage="memory")
    # A mirror's config cannot be updated: an update attempt would be refused.
    await jetstream.ensure_stream(bare_js, name="M", mirror=mirror, storage="memory")
    assert await updates.count() == 0
    with pytest.raises(jetstream.IncompatibleConfig, match="mirror configuration"):
        await jetstream.ensure_stream(bare_js, name="M", mirror={"name": "SRC"})


async def test_a_mirror_with_subjects_is_refused_before_the_server(
    bare_js: JetStreamContext,
) -> None:
    with pytest.raises(ValueError, match=r"stream 'M': a mirror has no subjects"):
        await jetstream.ensure_stream(bare_js, name="M", subjects=["m.>"], mirror={"name": "S"})
    with pytest.raises(ValueError, match=r"stream 'M': subjects are required"):
        await jetstream.ensure_stream(bare_js, name="M")
    with pytest.raises(TypeError, match=r"stream 'M': mirror: unknown key\(s\) nmae"):
        await jetstream.ensure_stream(bare_js, name="M", mirror={"nmae": "S"})
    assert [s async for s in _stream_names(bare_js)] == []


async def _stream_names(js: JetStreamContext) -> Any:
    for info in await js.streams_info():
        yield info.config.name


async def test_sources_copy_several_streams_into_one(
    bare_js: JetStreamContext, updates: Updates
) -> None:
    await jetstream.ensure_stream(bare_js, name="EU", subjects=["eu.>"])
    await jetstream.ensure_stream(bare_js, name="US", subjects=["us.>"])
    await bare_js.publish("eu.a", b"1")
    await bare_js.publish("us.a", b"2")
    await bare_js.publish("us.b", b"3")
    sources = [{"name": "EU"}, StreamSource(name="US", filter_subject="us.b")]
    info = await jetstream.ensure_stream(bare_js, name="ALL", sources=sources)
    assert sorted(s.name for s in info.config.sources or []) == ["EU", "US"]
    assert await messages_reach(bare_js, "ALL", 2) == 2
    last = await jetstream.get_last(bare_js, StrCodec(), stream="ALL", subject=">")
    assert last is not None
    assert {last.subject, last.payload} <= {"eu.a", "us.b", "1", "3"}

    await jetstream.ensure_stream(bare_js, name="ALL", sources=list(reversed(sources)))
    assert await updates.count() == 0
    # A source more is an update in place.
    await jetstream.ensure_stream(bare_js, name="JP", subjects=["jp.>"])
    updated = await jetstream.ensure_stream(bare_js, name="ALL", sources=[*sources, {"name": "JP"}])
    assert sorted(s.name for s in updated.config.sources or []) == ["EU", "JP", "US"]
    assert await updates.count() == 1


# ensure_stream: options


async def test_allow_msg_ttl_and_allow_atomic_are_set_and_read_back(
    bare_js: JetStreamContext, updates: Updates
) -> None:
    info = await jetstream.ensure_stream(
        bare_js, name="S", subjects=["s.>"], allow_msg_ttl=True, allow_atomic=True
    )
    assert (info.config.allow_msg_ttl, info.config.allow_atomic) == (True, True)
    raw = await raw_info(bare_js, "STREAM", "S")
    assert (raw["config"]["allow_msg_ttl"], raw["config"]["allow_atomic"]) == (True, True)
    again = await jetstream.ensure_stream(
        bare_js, name="S", subjects=["s.>"], allow_msg_ttl=True, allow_atomic=True
    )
    assert again.created == info.created
    assert await updates.count() == 0
    # The TTL header works: a message stored with a 1s TTL carries it.
    ack = await bare_js.publish("s.x", b"x", headers={"Nats-TTL": "1s"})
    assert ack.seq == 1


async def test_subject_transform_renames_stored_subjects(
    bare_js: JetStreamContext, updates: Updates
) -> None:
    transform = {"src": "in.*", "dest": "stored.{{wildcard(1)}}"}
    info = await jetstream.ensure_stream(
        bare_js, name="T", subjects=["in.*"], subject_transform=transform
    )
    assert info.config.subject_transform is not None
    assert info.config.subject_transform.dest == "stored.{{wildcard(1)}}"
    await bare_js.publish("in.a", b"hello")
    last = await jetstream.get_last(bare_js, StrCodec(), stream="T", subject="stored.a")
    assert last is not None
    assert (last.subject, last.payload) == ("stored.a", "hello")
    again = await jetstream.ensure_stream(
        bare_js, name="T", subjects=["in.*"], subject_transform=transform
    )
    assert again.created == info.created
    assert await updates.count() == 0


async def test_republish_sends_stored_messages_on(nc: Client, bare_js: JetStreamContext) -> None:
    republished: asyncio.Queue[Msg] = asyncio.Queue()

    async def got(msg: Msg) -> None:
        await republished.put(msg)

    await nc.subscribe("copies.>", cb=got)
    await nc.flush()
    await jetstream.ensure_stream(
        bare_js, name="R", subjects=["r.>"], republish={"src": "r.>", "dest": "copies.>"}
    )
    await bare_js.publish("r.one", b"payload")
    msg = await asyncio.wait_for(republished.get(), DEADLINE)
    assert (msg.subject, msg.data) == ("copies.one", b"payload")
    assert msg.headers is not None
    assert msg.headers["Nats-Stream"] == "R"
    # A RePublish object works as well, and changing it is an update.
    info = await jetstream.ensure_stream(
        bare_js,
        name="R",
        subjects=["r.>"],
        republish=RePublish(src="r.>", dest="copies.>", headers_only=True),
    )
    assert info.config.republish is not None
    assert info.config.republish.headers_only


async def test_every_server_field_passes_and_a_typo_is_a_type_error(
    bare_js: JetStreamContext, updates: Updates
) -> None:
    # allow_batched (nats-server 2.14) travels as raw JSON like every field; the
    # server's own reply shows it, and ensuring it again changes nothing.
    info = await jetstream.ensure_stream(
        bare_js, name="B", subjects=["b.>"], allow_batched=True, metadata={"team": "core"}
    )
    raw = await raw_info(bare_js, "STREAM", "B")
    assert raw["config"]["allow_batched"] is True
    assert raw["config"]["metadata"]["team"] == "core"
    again = await jetstream.ensure_stream(
        bare_js, name="B", subjects=["b.>"], allow_batched=True, metadata={"team": "core"}
    )
    assert again.created == info.created
    assert await updates.count() == 0  # the server's own metadata keys do not count
    with pytest.raises(TypeError, match=r"allow_batch \(did you mean allow_batched\?\)"):
        await jetstream.ensure_stream(bare_js, name="B", subjects=["b.>"], allow_batch=True)


async def test_an_update_keeps_what_is_not_given(bare_js: JetStreamContext) -> None:
    await jetstream.ensure_stream(
        bare_js, name="K", subjects=["k.>"], allow_msg_ttl=True, description="kept"
    )
    info = await jetstream.ensure_stream(bare_js, name="K", subjects=["k.>"], max_msgs=5)
    assert (info.config.max_msgs, info.config.allow_msg_ttl) == (5, True)
    assert info.config.description == "kept"


# pause_consumer / resume_consumer


async def consumer_state(js: JetStreamContext, consumer: str) -> dict[str, Any]:
    return await raw_info(js, "CONSUMER", STREAM, consumer)


@pytest.mark.slow  # the server's pause and resume
async def test_a_paused_consumer_delivers_nothing_until_resumed(js: JetStreamContext) -> None:
    await jetstream.ensure_consumer(js, stream=STREAM, name="audit", filter_subject="orders.>")
    inbox: Inbox[Order] = Inbox()
    subscriber = jetstream.Subscriber(js, JsonCodec(Order), stream=STREAM, consumer="audit")
    async with await subscriber.start("orders.>", inbox):
        before = datetime.now(UTC)
        paused = await jetstream.pause_consumer(js, STREAM, "audit", until=timedelta(hours=1))
        assert paused.paused
        assert paused.until is not None
        assert paused.until > before + timedelta(minutes=59)
        assert 3500 < paused.remaining <= 3600
        await publish_orders(js, "orders.eu", 3)

        # The server holds the messages: a pull of the subscriber waits at the
        # server, three messages are pending, and none was delivered.
        async with asyncio.timeout(DEADLINE):
            while True:
                state = await consumer_state(js, "audit")
                if state["num_waiting"] >= 1 and state["num_pending"] == 3:
                    break
                await js._nc.flush()
        assert state["paused"] is True
        assert state["delivered"]["stream_seq"] == 0
        assert inbox.messages == []

        resumed = await jetstream.resume_consumer(js, STREAM, "audit")
        assert (resumed.paused, resumed.until, resumed.remaining) == (False, None, 0.0)
        messages = await inbox.wait_for(3)
        assert [m.payload.id for m in messages] == ["o-1", "o-2", "o-3"]


@pytest.mark.slow  # a 1 s pause
async def test_a_pause_ends_by_itself_at_until(js: JetStreamContext) -> None:
    await jetstream.ensure_consumer(js, stream=STREAM, name="late", filter_subject="orders.>")
    inbox: Inbox[Order] = Inbox()
    subscriber = jetstream.Subscriber(js, JsonCodec(Order), stream=STREAM, consumer="late")
    async with await subscriber.start("orders.>", inbox):
        until = datetime.now(UTC) + timedelta(seconds=1)
        paused = await jetstream.pause_consumer(js, STREAM, "late", until=until)
        assert paused.paused
        assert paused.until == until
        await publish_orders(js, "orders.eu", 1)
        await inbox.wait_for(1)
        assert datetime.now(UTC) >= until  # delivered only once the pause was over


async def test_pausing_names_what_is_missing(js: JetStreamContext) -> None:
    with pytest.raises(jetstream.StreamNotFound, match="consumer 'c' on stream 'NOPE'"):
        await jetstream.pause_consumer(js, "NOPE", "c", until=60)
    with pytest.raises(jetstream.ConsumerNotFound, match="consumer 'nope' on stream 'ORDERS'"):
        await jetstream.resume_consumer(js, STREAM, "nope")
    with pytest.raises(ValueError, match="no timezone"):
        await jetstream.pause_consumer(js, STREAM, "c", until=datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="zero or more seconds"):
        await jetstream.pause_consumer(js, STREAM, "c", until=-1)


# get_last


async def test_get_last_returns_the_last_message_on_the_subject_typed(
    js: JetStreamContext,
) -> None:
    publisher = jetstream.Publisher(js, JsonCodec(Order))
    for n in range(1, 4):
        headers = Headers({"Tenant": "acme"})
        headers.add("Tag", f"t{n}")
        headers.add("Tag", "again")
        await publisher.publish("orders.eu", order(n), headers=headers, message_id=f"m-{n}")
    await publisher.publish("orders.us", order(9))

    last = await jetstream.get_last(js, JsonCodec(Order), stream=STREAM, subject="orders.eu")
    assert last is not None
    assert isinstance(last.payload, Order)
    assert (last.subject, last.payload, last.id) == ("orders.eu", order(3), "m-3")
    assert last.headers["Tenant"] == "acme"
    assert last.headers.get_all("Tag") == ["t3", "again"]
    assert last.wire_headers["Nats-Msg-Id"] == "m-3"
    assert last.wire_headers.get_all("X-Goflux-Tag") == ["t3", "again"]
    assert last.data == JsonCodec(Order).encode(order(3))
    assert (last.stream, last.sequence) == (STREAM, 3)
    assert last.time.tzinfo is not None
    assert abs(datetime.now(UTC) - last.time) < timedelta(minutes=1)
    assert last.delivery is None
    await last.ack()  # settling reaches nothing
    assert last.settled == "ack"


async def test_get_last_none_when_empty_and_errors(js: JetStreamContext) -> None:
    assert await jetstream.get_last(js, JsonCodec(Order), stream=STREAM, subject="orders.x") is None
    with pytest.raises(jetstream.StreamNotFound, match="stream 'NOPE'"):
        await jetstream.get_last(js, JsonCodec(Order), stream="NOPE", subject="orders.x")
    await js.publish("orders.bad", b"not json")
    with pytest.raises(DecodeError, match=r"stream 'ORDERS', subject 'orders.bad', sequence 1: "):
        await jetstream.get_last(js, JsonCodec(Order), stream=STREAM, subject="orders.bad")
