"""Typed Key-Value buckets against a real server: writes, reads, history, watches."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux import (
    BucketNotFound,
    BytesCodec,
    DecodeError,
    InvalidKey,
    InvalidSubject,
    JsonCodec,
    KeyExists,
    Message,
    PublishError,
    RevisionMismatch,
    SubscribeError,
    TransportError,
)
from goflux.transports import jetstream
from goflux.transports.jetstream import Entry
from tests.conftest import Otel
from tests.models import Order, order

CODEC = JsonCodec(Order)


async def bucket(
    js: JetStreamContext, name: str = "orders", **config: object
) -> jetstream.KeyValue[Order]:
    return await jetstream.key_value(js, name, CODEC, **config)  # type: ignore[arg-type]


async def test_put_get_update_create(bare_js: JetStreamContext) -> None:
    kv = await bucket(bare_js)
    first = await kv.put("o.1", order(1))
    entry = await kv.get("o.1")
    assert entry is not None
    assert (entry.key, entry.value, entry.revision, entry.operation) == (
        "o.1",
        order(1),
        first,
        "put",
    )
    assert entry.created.tzinfo is UTC
    assert abs((datetime.now(UTC) - entry.created).total_seconds()) < 30
    second = await kv.update("o.1", order(2), revision=first)
    assert second > first
    with pytest.raises(RevisionMismatch, match=f"revision {second}, not {first}") as caught:
        await kv.update("o.1", order(3), revision=first)
    assert (caught.value.expected, caught.value.actual) == (first, second)
    assert caught.value.key == "o.1"
    with pytest.raises(KeyExists, match=r"'o\.1' has a value") as exists:
        await kv.create("o.1", order(4))
    assert exists.value.revision == second
    got = await kv.get("o.1")
    assert got is not None
    assert got.value == order(2)
    assert await kv.get("o.none") is None


async def test_create_after_a_delete_succeeds(bare_js: JetStreamContext) -> None:
    kv = await bucket(bare_js)
    await kv.create("k", order(1))
    await kv.delete("k")
    assert await kv.get("k") is None
    revision = await kv.create("k", order(2))
    latest = await kv.get("k")
    assert latest is not None
    assert (latest.value, latest.revision) == (order(2), revision)


async def test_history_keeps_5_with_history_5(bare_js: JetStreamContext) -> None:
    kv = await bucket(bare_js, history=5)
    for n in range(8):
        await kv.put("k", order(n))
    await kv.put("other", order(99))
    history = await kv.history("k")
    assert [e.value for e in history] == [order(n) for n in range(3, 8)]
    assert [e.delta for e in history] == [4, 3, 2, 1, 0]
    assert all(e.key == "k" for e in history)
    at = await kv.get("k", revision=history[1].revision)
    assert at is not None
    assert at.value == order(4)
    assert await kv.get("k", revision=1) is None  # no longer kept
    assert await kv.get("k", revision=9) is None  # a write of "other"


async def test_delete_and_purge_markers(bare_js: JetStreamContext) -> None:
    kv = await bucket(bare_js, history=10)
    await kv.put("a", order(1))
    await kv.put("a", order(2))
    deleted = await kv.delete("a")
    history = await kv.history("a")
    assert [e.operation for e in history] == ["put", "put", "delete"]
    assert history[-1].value is None
    marker = await kv.get("a", revision=deleted)
    assert marker is not None
    assert marker.operation == "delete"
    await kv.put("b", order(3))
    await kv.purge("b")
    assert [e.operation for e in await kv.history("b")] == ["purge"]


async def test_keys_lists_live_keys_matching_a_pattern(bare_js: JetStreamContext) -> None:
    kv = await bucket(bare_js)
    for key in ("user.1", "user.2", "user.3", "team.1"):
        await kv.put(key, order(1))
    await kv.delete("user.2")
    assert sorted([k async for k in kv.keys(">")]) == ["team.1", "user.1", "user.3"]
    assert sorted([k async for k in kv.keys("user.*")]) == ["user.1", "user.3"]
    empty = await bucket(bare_js, "empty")
    assert [k async for k in empty.keys(">")] == []
    assert await empty.history("nothing") == []


async def test_key_value_is_idempotent_and_applies_changes(bare_js: JetStreamContext) -> None:
    kv = await bucket(bare_js, history=2)
    await kv.put("k", order(1))
    again = await bucket(bare_js, history=2)
    got = await again.get("k")
    assert got is not None
    assert got.value == order(1)
    await bucket(bare_js, history=5)
    info = await bare_js.stream_info("KV_orders")
    assert info.config.max_msgs_per_subject == 5
    assert info.state.messages == 1


async def test_buckets_are_shared_with_nats_py_key_value(bare_js: JetStreamContext) -> None:
    kv = await bucket(bare_js, history=3)
    await kv.put("k", order(1))
    raw = await bare_js.key_value("orders")
    got = await raw.get("k")
    assert CODEC.decode(got.value or b"") == order(1)
    revision = await raw.put("k2", CODEC.encode(order(2)))
    ours = await kv.get("k2")
    assert ours is not None
    assert (ours.value, ours.revision) == (order(2), revision)
    made_by_nats_py = await bare_js.create_key_value(bucket="theirs", history=2)
    await made_by_nats_py.put("x", CODEC.encode(order(7)))
    theirs = await bucket(bare_js, "theirs", history=2)
    entry = await theirs.get("x")
    assert entry is not None
    assert entry.value == order(7)


async def test_bad_keys_and_settings_are_refused(bare_js: JetStreamContext) -> None:
    kv = await bucket(bare_js)
    for bad in ("", ".a", "a.", "a..b", "a b", "a*", ">", "ä"):
        with pytest.raises(InvalidKey):
            await kv.put(bad, order(1))
    with pytest.raises(InvalidKey):
        await jetstream.key_value(bare_js, "bad.name", CODEC)
    with pytest.raises(ValueError, match="history"):
        await jetstream.key_value(bare_js, "b", CODEC, history=65)
    with pytest.raises(TypeError, match="max_value_sise"):
        await jetstream.key_value(bare_js, "b", CODEC, max_value_sise=10)
    with pytest.raises(InvalidKey):
        kv.watch("a.>.b")


async def test_an_undecodable_value_is_a_decode_error_naming_the_key(
    nc: Client, bare_js: JetStreamContext
) -> None:
    kv = await bucket(bare_js)
    await nc.request("$KV.orders.bad", b"not json")
    with pytest.raises(DecodeError, match="bucket 'orders', key 'bad', revision 1"):
        await kv.get("bad")


async def test_a_missing_bucket_says_so(bare_js: JetStreamContext) -> None:
    kv = await bucket(bare_js, "gone")
    await bare_js.delete_stream("KV_gone")
    with pytest.raises(BucketNotFound, match="'gone'"):
        await kv.put("k", order(1))
    with pytest.raises(BucketNotFound):
        await kv.get("k")
    with pytest.raises(BucketNotFound):
        [k async for k in kv.keys(">")]


async def test_reads_without_direct_get(bare_js: JetStreamContext) -> None:
    await bare_js.add_stream(
        name="KV_plain", subjects=["$KV.plain.>"], allow_rollup_hdrs=True, max_msgs_per_subject=3
    )
    kv = jetstream.KeyValue(bare_js, "plain", CODEC, direct=False)
    revision = await kv.put("k", order(1))
    await kv.put("k", order(2))
    latest = await kv.get("k")
    assert latest is not None
    assert latest.value == order(2)
    old = await kv.get("k", revision=revision)
    assert old is not None
    assert old.value == order(1)
    await kv.delete("k")
    assert await kv.get("k") is None


# ----------------------------------------------------------------- watches


async def test_a_watch_with_history_gets_every_key_then_updates_then_a_delete(
    bare_js: JetStreamContext,
) -> None:
    kv = await bucket(bare_js)
    for n in range(100):
        await kv.put(f"k.{n}", order(n))
    seen: list[Entry[Order]] = []
    async with kv.watch(include_history=True) as entries:
        async for entry in entries:
            seen.append(entry)
            if len(seen) == 100:
                break
        assert [e.value for e in seen] == [order(n) for n in range(100)]
        assert seen[-1].delta == 0
        await kv.put("k.5", order(500))
        await kv.put("k.6", order(600))
        await kv.delete("k.5")
        updates = [await anext(entries) for _ in range(3)]
    assert [(e.key, e.value, e.operation) for e in updates] == [
        ("k.5", order(500), "put"),
        ("k.6", order(600), "put"),
        ("k.5", None, "delete"),
    ]


async def test_a_watch_whose_consumer_is_lost_resumes_right_after_the_last_revision(
    bare_js: JetStreamContext,
) -> None:
    kv = await bucket(bare_js)
    await kv.put("a", order(1))
    await kv.put("b", order(2))
    async with kv.watch(include_history=True) as entries:
        first = [await anext(entries), await anext(entries)]
        assert [(e.key, e.revision) for e in first] == [("a", 1), ("b", 2)]
        # The watch's consumer goes away (deleted by an operator, a server restart
        # of a memory consumer): the watch makes a new one, starting after revision 2.
        stream = "KV_orders"
        (consumer,) = [c.name for c in await bare_js.consumers_info(stream)]
        await kv.put("a", order(3))  # revision 3, written before or after the swap
        await bare_js.delete_consumer(stream, consumer)
        await kv.put("c", order(4))  # revision 4
        async with asyncio.timeout(15):
            after = [await anext(entries), await anext(entries)]
    # Exactly the writes after the last one seen: none skipped, none twice.
    assert [(e.key, e.revision, e.value) for e in after] == [
        ("a", 3, order(3)),
        ("c", 4, order(4)),
    ]


async def test_watch_options(bare_js: JetStreamContext) -> None:
    kv = await bucket(bare_js, history=5)
    await kv.put("a", order(1))
    await kv.put("a", order(2))
    await kv.put("b", order(3))
    async with kv.watch() as latest:  # the latest write of each key first
        assert [(e.key, e.value) for e in [await anext(latest), await anext(latest)]] == [
            ("a", order(2)),
            ("b", order(3)),
        ]
    async with kv.watch("a", updates_only=True, ignore_deletes=True) as updates:
        await kv.delete("a")
        await kv.put("b", order(4))
        await kv.put("a", order(5))
        entry = await anext(updates)
    assert (entry.key, entry.value) == ("a", order(5))
    with pytest.raises(ValueError, match="exclude"):
        kv.watch(include_history=True, updates_only=True)


async def test_an_undecodable_value_is_skipped_by_a_watcher(
    nc: Client, bare_js: JetStreamContext
) -> None:
    kv = await bucket(bare_js)
    await kv.put("a", order(1))
    await nc.request("$KV.orders.bad", b"not json")
    await kv.put("c", order(3))
    watcher = kv.watcher(include_history=True)
    async with watcher.stream(">") as entries:
        got = [(await anext(entries)).payload.key for _ in range(2)]
    assert got == ["a", "c"]
    assert watcher.undecodable == 1


async def test_a_watcher_is_a_subscriber_with_keys_as_subjects(
    bare_js: JetStreamContext, otel: Otel
) -> None:
    kv = await jetstream.key_value(bare_js, "traced", CODEC, telemetry=otel.telemetry)
    got: asyncio.Queue[Message[Entry[Order]]] = asyncio.Queue()

    async def handle(msg: Message[Entry[Order]]) -> None:
        await got.put(msg)

    async with kv.watcher() as watcher, await watcher.start("user.*", handle):
        await kv.put("user.7", order(7))
        await kv.put("team.1", order(1))  # not matched
        await kv.put("user.8", order(8))
        first, second = await got.get(), await got.get()
    assert (first.subject, first.payload.value) == ("user.7", order(7))
    assert second.subject == "user.8"
    assert got.empty()
    put = otel.span("send $KV.traced.user.7").context
    process = [s for s in otel.spans() if s.name == "process $KV.traced.user.*"]
    assert put.span_id in {link.context.span_id for s in process for link in s.links}


async def test_a_watcher_on_a_missing_bucket_fails_to_start(bare_js: JetStreamContext) -> None:
    kv = jetstream.KeyValue(bare_js, "nobucket", CODEC)

    async def ignore(msg: Message[Entry[Order]]) -> None:
        pass

    with pytest.raises(Exception, match="nobucket"):
        await kv.watcher().start(">", ignore)
    with pytest.raises(InvalidSubject):
        await kv.watcher().start("a..b", ignore)


async def test_binding_keeps_an_existing_buckets_history_and_ttl(bare_js: JetStreamContext) -> None:
    theirs = await bare_js.create_key_value(bucket="cfg", history=10, ttl=3600)
    for n in range(5):
        await theirs.put("k", CODEC.encode(order(n)))
    kv = await bucket(bare_js, "cfg")  # no settings given: nothing changes
    assert [e.revision for e in await kv.history("k")] == [1, 2, 3, 4, 5]
    config = (await bare_js.stream_info("KV_cfg")).config
    assert (config.max_msgs_per_subject, config.max_age) == (10, 3600)
    fresh = await bucket(bare_js, "fresh")
    fresh_config = (await bare_js.stream_info("KV_fresh")).config
    assert (fresh_config.max_msgs_per_subject, fresh_config.max_age) == (1, 0)
    await fresh.put("k", order(1))


@pytest.mark.parametrize("ttl", [0.01, -1, "5", float("nan")])
async def test_a_ttl_the_server_would_refuse_is_a_value_error(
    bare_js: JetStreamContext, ttl: object
) -> None:
    with pytest.raises(ValueError, match="ttl"):
        await jetstream.key_value(bare_js, "t", CODEC, ttl=ttl)  # type: ignore[arg-type]


@pytest.mark.parametrize("revision", [0, -1, True, "1"])
async def test_a_revision_that_cannot_be_is_a_value_error(
    bare_js: JetStreamContext, revision: object
) -> None:
    kv = await bucket(bare_js)
    with pytest.raises(ValueError, match="revision"):
        await kv.get("k", revision=revision)  # type: ignore[arg-type]


async def test_a_value_of_the_buckets_max_size_fits_with_tracing_on(
    bare_js: JetStreamContext, otel: Otel
) -> None:
    kv = await jetstream.key_value(
        bare_js, "small", BytesCodec(), max_value_size=100, telemetry=otel.telemetry
    )
    await kv.put("k", b"x" * 100)  # the trace context is left off to fit
    got = await kv.get("k")
    assert got is not None
    assert got.value == b"x" * 100
    assert otel.span("send $KV.small.k")  # the write is still traced
    with pytest.raises(PublishError, match="size"):
        await kv.put("k", b"x" * 101)


async def test_a_keys_read_whose_consumer_vanishes_fails_instead_of_spinning(
    bare_js: JetStreamContext,
) -> None:
    kv = await jetstream.key_value(bare_js, "many", BytesCodec())
    await jetstream.Publisher(bare_js, BytesCodec()).publish_many(
        jetstream.Outgoing(f"$KV.many.k{n}", b"v") for n in range(1500)
    )
    keys = kv.keys(">")
    await anext(keys)
    (scanner,) = await bare_js.consumers_info("KV_many")
    await bare_js.delete_consumer("KV_many", scanner.name)

    async def drain() -> None:
        async for _ in keys:
            pass

    with pytest.raises(TransportError, match="to go"):
        await asyncio.wait_for(drain(), 10)


async def test_a_slow_reader_holds_the_watch_back_and_misses_nothing(
    bare_js: JetStreamContext,
) -> None:
    kv = await bucket(bare_js)
    for n in range(60):
        await kv.put(f"k.{n}", order(n))
    async with kv.watch(include_history=True, buffer=2) as entries:
        got = [await anext(entries) for _ in range(60)]
    assert [e.revision for e in got] == list(range(1, 61))


async def test_a_watch_whose_bucket_is_deleted_ends_with_the_error(
    bare_js: JetStreamContext,
) -> None:
    kv = await bucket(bare_js)
    await kv.put("a", order(1))
    async with kv.watch() as entries:
        assert (await anext(entries)).key == "a"
        await bare_js.delete_stream("KV_orders")
        with pytest.raises(SubscribeError):
            await asyncio.wait_for(anext(entries), 20)


async def test_a_watcher_sees_a_keys_writes_in_order_and_at_least_the_latest(
    bare_js: JetStreamContext,
) -> None:
    kv = await bucket(bare_js, history=1)
    got: list[int] = []
    done = asyncio.Event()

    async def handle(msg: Message[Entry[Order]]) -> None:
        got.append(msg.payload.revision)
        if msg.payload.value == order(299):
            done.set()

    async with kv.watcher(updates_only=True) as watcher, await watcher.start("k", handle):
        for n in range(300):
            await kv.put("k", order(n))
        await asyncio.wait_for(done.wait(), 20)
    assert got == sorted(set(got))  # in order, none twice
    assert got[-1] == 300  # the latest write always arrives


@pytest.mark.slow  # the server's pause and resume
@pytest.mark.parametrize(("history", "seen"), [(1, ["delete"]), (2, ["put", "delete"])])
async def test_a_write_replaced_before_the_watch_received_it_is_gone_with_history_1(
    bare_js: JetStreamContext, history: int, seen: list[str]
) -> None:
    """The race of a put and a delete right after it: the delete may land first.

    The server holds the watch's consumer (paused) while both land, as a loaded
    server's delivery may lag: with history 1 the delete replaced the put, which is
    gone, so the watch gets the delete only (anyone waiting for two changes waits
    for ever); with history 2 it gets both. Reading the put before deleting never
    depends on it.
    """
    kv = await bucket(bare_js, history=history)
    await kv.put("k", order(1))
    async with kv.watch() as entries:
        assert (await anext(entries)).revision == 1
        [watch] = await bare_js.consumers_info("KV_orders")  # the watch's ordered consumer
        await jetstream.pause_consumer(bare_js, "KV_orders", watch.name, until=3600)
        await kv.put("k", order(2))
        await kv.delete("k")
        await jetstream.resume_consumer(bare_js, "KV_orders", watch.name)
        got = [await asyncio.wait_for(anext(entries), 20) for _ in seen]
        assert [e.operation for e in got] == seen
        assert got[-1].revision == 3  # the latest always arrives
        await kv.put("k", order(4))  # and the watch goes on after it
        assert (await asyncio.wait_for(anext(entries), 20)).revision == 4


async def test_a_watch_says_when_it_has_caught_up_with_the_old_writes(
    bare_js: JetStreamContext,
) -> None:
    kv = await bucket(bare_js)
    for key in ("a", "b", "c"):
        await kv.put(key, order(1))
    async with kv.watch() as entries:
        seen = []
        for _ in range(3):
            assert not entries.caught_up
            seen.append((await anext(entries)).key)
        assert entries.caught_up  # a, b and c were what the bucket held
        await kv.put("d", order(2))
        assert (await anext(entries)).key == "d"
        assert entries.caught_up
    assert seen == ["a", "b", "c"]
    empty = await bucket(bare_js, "empty")
    async with empty.watch() as nothing_old:
        assert nothing_old.caught_up
    async with kv.watch(updates_only=True) as updates:
        assert updates.caught_up
