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
    for bad in (0.5, 1.5, 0, timedelta(milliseconds=10), "never"):
        with pytest.raises(ValueError, match="ttl"):
            await marked.create("k", "v", ttl=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit_marker_ttl must be 1 second or more"):
        await jetstream.key_value(bare_js, "tiny", CODEC, limit_marker_ttl=0.5)
