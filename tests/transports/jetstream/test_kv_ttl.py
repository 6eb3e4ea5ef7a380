"""Key-Value per-key TTLs and limit markers (ADR-48) against a real nats-server (2.15)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta

import pytest
from nats.js import JetStreamContext

from goflux import IncompatibleConfig, StrCodec
from goflux.transports import jetstream

CODEC = StrCodec()
DEADLINE = 10.0


async def stream_config(js: JetStreamContext, bucket: str) -> dict[str, object]:
    reply = await js._nc.request(f"$JS.API.STREAM.INFO.KV_{bucket}", b"", timeout=5)
    config: dict[str, object] = json.loads(reply.data)["config"]
    return config


@pytest.mark.slow  # TTL timers
async def test_a_key_with_a_ttl_is_gone_after_it_and_a_watcher_sees_the_marker(
    bare_js: JetStreamContext,
) -> None:
    kv = await jetstream.key_value(bare_js, "sessions", CODEC, limit_marker_ttl=60)
    await kv.put("forever", "kept")
    async with kv.watch(updates_only=True) as entries:
        created = time.monotonic()
        revision = await kv.create("session.a", "token", ttl=1)
        first = await anext(entries)
        assert (first.key, first.value, first.operation, first.marker_reason) == (
            "session.a",
            "token",
            "put",
            None,
        )
        assert (await kv.get("session.a")) is not None
        async with asyncio.timeout(DEADLINE):
            marker = await anext(entries)  # the server's own write, on expiry
        expired_after = time.monotonic() - created
    assert (marker.key, marker.value, marker.operation, marker.marker_reason) == (
        "session.a",
        None,
        "purge",
        "MaxAge",
    )
    assert marker.revision > revision
    assert (first.ttl, marker.ttl) == (timedelta(seconds=1), timedelta(seconds=60))
    assert expired_after >= 1.0
    assert await kv.get("session.a") is None
    assert [key async for key in kv.keys(">")] == ["forever"]
    latest = await kv.get("session.a", revision=marker.revision)
    assert latest is not None
    assert latest.marker_reason == "MaxAge"
    # A gone key can be created again.
    assert await kv.create("session.a", "again") > marker.revision


@pytest.mark.slow  # TTL timers
async def test_a_purge_with_a_ttl_leaves_nothing_behind(bare_js: JetStreamContext) -> None:
    kv = await jetstream.key_value(bare_js, "purged", CODEC, limit_marker_ttl=timedelta(seconds=30))
    await kv.put("k", "v1")
    await kv.put("k", "v2")
    await kv.put("other", "stays")
    async with kv.watch("k", include_history=True) as entries:
        assert (await anext(entries)).value == "v2"
        purged_at = time.monotonic()
        revision = await kv.purge("k", ttl=timedelta(seconds=1))
        purge = await anext(entries)
        assert (purge.operation, purge.marker_reason, purge.revision) == ("purge", None, revision)
    assert await kv.get("k") is None
    assert (await kv.get("k", revision=revision)) is not None  # the marker, for now
    # The purge marker itself expires (the server writes no marker for a marker):
    # the bucket's stream holds only "other" then. The server's view is the signal.
    async with asyncio.timeout(DEADLINE):
        while (await bare_js.stream_info("KV_purged")).state.messages > 1:
            await bare_js._nc.flush()
    assert time.monotonic() - purged_at >= 1.0
    assert await kv.get("k", revision=revision) is None
    assert (await kv.get("other")) is not None


async def test_the_limit_marker_setting_round_trips(bare_js: JetStreamContext) -> None:
    plain = await jetstream.key_value(bare_js, "plain", CODEC)
    assert plain.limit_marker_ttl is None
    kv = await jetstream.key_value(bare_js, "marked", CODEC, limit_marker_ttl=5)
    assert kv.limit_marker_ttl == timedelta(seconds=5)
    config = await stream_config(bare_js, "marked")
    assert (config["allow_msg_ttl"], config["subject_delete_marker_ttl"]) == (True, 5 * 10**9)

    again = await jetstream.key_value(bare_js, "marked", CODEC)  # kept when not given
    assert again.limit_marker_ttl == timedelta(seconds=5)
    changed = await jetstream.key_value(bare_js, "marked", CODEC, limit_marker_ttl=7)
    assert changed.limit_marker_ttl == timedelta(seconds=7)
    assert (await stream_config(bare_js, "marked"))["subject_delete_marker_ttl"] == 7 * 10**9
    with pytest.raises(IncompatibleConfig, match="'marked': limit_marker_ttl cannot be turned off"):
        await jetstream.key_value(bare_js, "marked", CODEC, limit_marker_ttl=None)

    # Turned on for a bucket made without it.
    later = await jetstream.key_value(bare_js, "plain", CODEC, limit_marker_ttl=2)
    assert later.limit_marker_ttl == timedelta(seconds=2)


async def test_ttls_are_refused_where_they_cannot_work(bare_js: JetStreamContext) -> None:
    plain = await jetstream.key_value(bare_js, "plain", CODEC)
    with pytest.raises(
        jetstream.StreamFeatureDisabled,
        match=r"bucket 'plain'.*needs the bucket setting limit_marker_ttl",
    ) as caught:
        await plain.create("k", "v", ttl=5)
    assert (caught.value.stream, caught.value.setting) == ("KV_plain", "limit_marker_ttl")
    assert await plain.get("k") is None  # nothing written
    with pytest.raises(jetstream.StreamFeatureDisabled, match="limit_marker_ttl"):
        await plain.purge("k", ttl=5)

    marked = await jetstream.key_value(bare_js, "marked", CODEC, limit_marker_ttl=5)
    for bad in (0.5, 1.5, 0, timedelta(milliseconds=10), "forever", True):
        with pytest.raises(ValueError, match="ttl"):
            await marked.create("k", "v", ttl=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit_marker_ttl must be 1 second or more"):
        await jetstream.key_value(bare_js, "tiny", CODEC, limit_marker_ttl=0.5)
    # Each error names the setting it is about.
    with pytest.raises(ValueError, match=r"^limit_marker_ttl must be seconds or a timedelta"):
        await jetstream.key_value(bare_js, "tiny", CODEC, limit_marker_ttl="60s")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^limit_marker_ttl must be 0 or None \(no limit markers"):
        await jetstream.key_value(bare_js, "tiny", CODEC, limit_marker_ttl=1e10)
    with pytest.raises(ValueError, match=r"^ttl must be 0 or None \(keep forever"):
        await jetstream.key_value(bare_js, "tiny", CODEC, ttl=1e10)


async def test_a_ttl_the_server_would_raise_to_the_marker_ttl_is_refused(
    bare_js: JetStreamContext,
) -> None:
    """With history > 1 the server raises a TTL below limit_marker_ttl to it, silently."""
    kv = await jetstream.key_value(bare_js, "kept", CODEC, history=5, limit_marker_ttl=30)
    with pytest.raises(
        IncompatibleConfig,
        match=r"bucket 'kept': key 'k' with ttl=1s: the bucket keeps history=5 .*"
        r"limit_marker_ttl \(30s\)",
    ):
        await kv.create("k", "v", ttl=1)
    with pytest.raises(IncompatibleConfig, match=r"key 'p' with ttl=29s.*history=5"):
        await kv.purge("p", ttl=timedelta(seconds=29))
    assert (await bare_js.stream_info("KV_kept")).state.messages == 0  # nothing sent
    bound = await jetstream.key_value(bare_js, "kept", CODEC)  # history found, not given
    with pytest.raises(IncompatibleConfig, match="history=5"):
        await bound.create("k", "v", ttl=2)

    revision = await kv.create("k", "v", ttl=30)  # as long as the markers: kept as asked
    purged = await kv.purge("p", ttl=timedelta(minutes=1))
    forever = await kv.create("f", "v", ttl="never")
    seqs = (revision, purged, forever)
    stored = [(await bare_js.get_msg("KV_kept", seq)).headers for seq in seqs]
    assert [(h or {}).get("Nats-TTL") for h in stored] == ["30", "60", "never"]

    single = await jetstream.key_value(bare_js, "single", CODEC, limit_marker_ttl=30)
    one = await single.create("k", "v", ttl=1)  # history=1: the server keeps 1 s
    assert (await bare_js.get_msg("KV_single", one)).headers["Nats-TTL"] == "1"  # type: ignore[index]


async def test_a_huge_ttl_of_another_client_reads_as_timedelta_max(
    bare_js: JetStreamContext,
) -> None:
    kv = await jetstream.key_value(bare_js, "huge", CODEC, limit_marker_ttl=5)
    # The server takes it (it wraps around to ~6 years in its clock); no timedelta holds it.
    await bare_js.publish("$KV.huge.big", b"v", headers={"Nats-TTL": "100000000000000"})
    got = await kv.get("big")
    assert got is not None
    assert (got.value, got.ttl) == ("v", timedelta.max)
    assert [e.ttl for e in await kv.history("big")] == [timedelta.max]
    async with kv.watch() as entries:
        async with asyncio.timeout(5):  # not dropped by the watcher
            watched = await anext(entries)
    assert (watched.key, watched.ttl) == ("big", timedelta.max)


@pytest.mark.slow  # TTL timers
async def test_ttls_beyond_100_years_are_refused_on_keys_and_stream_publishes(
    bare_js: JetStreamContext,
) -> None:
    """Beyond, the server's nanosecond clock overflows and the write expires at once."""
    from goflux.transports.jetstream._server_headers import MAX_TTL  # noqa: PLC0415

    assert MAX_TTL == 100 * 365 * 86_400
    kv = await jetstream.key_value(bare_js, "long", CODEC, limit_marker_ttl=5)
    for too_long in (MAX_TTL + 1, 9_300_000_000, 10**30, timedelta.max):
        with pytest.raises(ValueError, match=f"ttl must be at most {MAX_TTL} seconds"):
            await kv.create("k", "v", ttl=too_long)
        with pytest.raises(ValueError, match=f"ttl must be at most {MAX_TTL} seconds"):
            await kv.purge("k", ttl=too_long)
    assert (await bare_js.stream_info("KV_long")).state.messages == 0

    await jetstream.ensure_stream(bare_js, name="LONG", subjects=["long.>"], allow_msg_ttl=True)
    publisher = jetstream.Publisher(bare_js, CODEC)
    with pytest.raises(ValueError, match=f"ttl must be at most {MAX_TTL} seconds"):
        await publisher.publish("long.a", "v", ttl=MAX_TTL + 1)
    assert (await bare_js.stream_info("LONG")).state.messages == 0

    # The bound itself is kept: a write that overflowed would be gone at the
    # server's next expiry pass, before a later write expiring after ~1 s.
    await kv.create("k", "v", ttl=MAX_TTL)
    receipt = await publisher.publish("long.a", "v", ttl=MAX_TTL)
    await kv.create("short", "v", ttl=1)
    async with asyncio.timeout(DEADLINE):
        while await kv.get("short") is not None:
            await bare_js._nc.flush()
    assert (await kv.get("k")) is not None
    assert (await bare_js.get_msg("LONG", receipt.sequence)).data == b"v"


@pytest.mark.slow  # TTL timers
async def test_a_key_with_ttl_never_outlives_the_buckets_max_age(
    bare_js: JetStreamContext,
) -> None:
    kv = await jetstream.key_value(bare_js, "aging", CODEC, ttl=1, limit_marker_ttl=5)
    revision = await kv.create("schema", "v1", ttl="never")
    await kv.put("plain", "p")  # written later: gone before "schema" would be
    assert (await bare_js.get_msg("KV_aging", revision)).headers["Nats-TTL"] == "never"  # type: ignore[index]
    async with asyncio.timeout(DEADLINE):
        while await kv.get("plain") is not None:
            await bare_js._nc.flush()
    kept = await kv.get("schema")
    assert kept is not None
    assert (kept.value, kept.ttl) == ("v1", timedelta.max)  # never
