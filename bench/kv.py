"""Key-Value: goflux's typed buckets against raw nats-py's Key-Value, on one server.

Three tables: sequential puts (each waits for its acknowledgement), sequential gets,
and a watch replaying a bucket that holds a known number of entries. Raw nats-py
does the same typed work as goflux: it encodes the 10-field model with the same
pydantic ``TypeAdapter`` before ``kv.put`` and decodes every value it gets or
watches. Both sides use the same buckets, made by nats-py's ``create_key_value``
with ``direct=True`` (nats-py's default leaves the server's direct get off, and its
gets then go through the stream's JSON message-get API; goflux's buckets always
allow it), so both read with the direct get.

A put case counts the writes the server sequenced during it (the stream's last
sequence, read before and after, inside the timed region); a get case counts the
values it got and decoded; a watch case counts the entries its loop received, and
stops at the number the bucket holds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import nats
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue as RawKeyValue

from bench.harness import Table, interleave, wait_for
from bench.payload import ADAPTER, ORDER, SIZE, Order
from bench.sizes import Sizes
from goflux import JsonCodec
from goflux.testing import NatsServer
from goflux.transports import jetstream

BUCKET = "BENCH"
WATCHED = "BENCH_WATCH"
KEYS = [f"order.{i}" for i in range(1_000)]
"""The keys the put and get cases cycle over."""

RAW_PUT = "raw kv.put"
GOFLUX_PUT = "goflux KeyValue.put"
RAW_GET = "raw kv.get + decode"
GOFLUX_GET = "goflux KeyValue.get"
RAW_WATCH = "raw kv.watch(include_history) + decode"
GOFLUX_WATCH = "goflux KeyValue.watch(include_history)"


# ------------------------------------------------------------------------ puts


async def sequenced_by(js: JetStreamContext, bucket: str, writing: Awaitable[object]) -> int:
    """Run ``writing``; return how many writes the bucket's stream sequenced meanwhile.

    A bucket keeps one write per key here, so the count of stored messages says
    nothing; the stream's last sequence grows by one per write.
    """
    stream = f"KV_{bucket}"
    before = (await js.stream_info(stream)).state.last_seq
    await writing
    return (await js.stream_info(stream)).state.last_seq - before


async def raw_put(kv: RawKeyValue, count: int) -> None:
    """nats-py: ``kv.put`` of the encoded model, waiting for each acknowledgement."""
    keys = len(KEYS)
    for i in range(count):
        await kv.put(KEYS[i % keys], ADAPTER.dump_json(ORDER))


async def goflux_put(kv: jetstream.KeyValue[Order], count: int) -> None:
    """goflux: ``KeyValue.put`` of the model (encoded by its codec)."""
    keys = len(KEYS)
    for i in range(count):
        await kv.put(KEYS[i % keys], ORDER)


# ------------------------------------------------------------------------ gets


async def raw_get(kv: RawKeyValue, count: int) -> int:
    """nats-py: ``kv.get`` and decode; returns the values got and decoded."""
    keys, got = len(KEYS), 0
    for i in range(count):
        try:
            entry = await kv.get(KEYS[i % keys])
        except nats.js.errors.KeyNotFoundError:
            continue  # not counted: the case fails short
        if entry.value is not None:
            ADAPTER.validate_json(entry.value)
            got += 1
    return got


async def goflux_get(kv: jetstream.KeyValue[Order], count: int) -> int:
    """goflux: ``KeyValue.get`` (decoded by its codec); returns the values got."""
    keys, got = len(KEYS), 0
    for i in range(count):
        entry = await kv.get(KEYS[i % keys])
        if entry is not None and entry.value is not None:
            got += 1
    return got


# --------------------------------------------------------------------- watches


async def received_by(reading: Callable[[list[int]], Coroutine[Any, Any, None]]) -> int:
    """Run ``reading(counter)`` until it returns or stops making progress.

    ``reading`` counts the entries it receives in ``counter[0]``; the case gives up
    after :data:`bench.harness.PATIENCE` seconds in which none arrived, and returns the count.
    """
    counter = [0]
    done = asyncio.Event()
    task = asyncio.create_task(reading(counter))
    task.add_done_callback(lambda _: done.set())
    await wait_for(done, lambda: counter[0])
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task  # re-raises what the watch raised
    return counter[0]


async def raw_watch(kv: RawKeyValue, count: int) -> int:
    """nats-py: every entry through ``kv.watch(">", include_history=True)``, decoded.

    nats-py puts a None marker after the entries the bucket held at the start; it is
    skipped, not counted. Returns the entries received (stops at ``count``).
    """

    async def reading(counter: list[int]) -> None:
        watcher = await kv.watch(">", include_history=True)
        try:
            async for entry in watcher:
                if entry is None:
                    continue  # the end-of-initial-values marker
                ADAPTER.validate_json(entry.value)
                counter[0] += 1
                if counter[0] == count:
                    break
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]  # nats-py leaves it untyped

    return await received_by(reading)


async def goflux_watch(kv: jetstream.KeyValue[Order], count: int) -> int:
    """goflux: every entry through ``kv.watch(">", include_history=True)`` (decoded).

    Returns the entries received (stops at ``count``).
    """

    async def reading(counter: list[int]) -> None:
        async with kv.watch(">", include_history=True) as entries:
            async for entry in entries:
                if entry.value is not None:
                    counter[0] += 1
                    if counter[0] == count:
                        break

    return await received_by(reading)


# ------------------------------------------------------------------------- run


async def fill(js: JetStreamContext, bucket: str, count: int, window: int) -> None:
    """Write ``count`` distinct keys (``w.<i>``) to ``bucket``, ``window`` in flight.

    Raises:
        RuntimeError: The bucket does not hold ``count`` entries afterwards.
    """
    for start in range(0, count, window):
        futures = [
            await js.publish_async(f"$KV.{bucket}.w.{i}", ADAPTER.dump_json(ORDER))
            for i in range(start, min(start + window, count))
        ]
        await asyncio.gather(*futures)
    held = (await js.stream_info(f"KV_{bucket}")).state.messages
    if held != count:
        raise RuntimeError(f"bucket {bucket!r} holds {held:,} entries, not {count:,}")


async def buckets(js: JetStreamContext, name: str) -> tuple[RawKeyValue, jetstream.KeyValue[Order]]:
    """The bucket ``name`` as nats-py makes it (direct gets allowed), and goflux's view."""
    raw = await js.create_key_value(bucket=name, history=1, direct=True)
    typed = await jetstream.key_value(js, name, JsonCodec(Order), history=1)
    return raw, typed


def run(rounds: int, sizes: Sizes) -> list[Table]:
    """The Key-Value tables: put, get and watch, raw nats-py beside goflux."""
    loop = asyncio.new_event_loop()
    server = NatsServer().start()
    try:
        nc = loop.run_until_complete(nats.connect(server.url))
        js = nc.jetstream(publish_async_max_pending=sizes.window)
        raw, typed = loop.run_until_complete(buckets(js, BUCKET))
        raw_watched, typed_watched = loop.run_until_complete(buckets(js, WATCHED))
        loop.run_until_complete(goflux_put(typed, len(KEYS)))  # every key has a value
        loop.run_until_complete(fill(js, WATCHED, sizes.kv_watched, sizes.window))

        def on(make: Callable[[], Awaitable[int]]) -> Callable[[], int]:
            return lambda: loop.run_until_complete(make())

        def sequenced(make: Callable[[], Awaitable[object]]) -> Callable[[], int]:
            return on(lambda: sequenced_by(js, BUCKET, make()))

        tables = [
            Table(
                "kv_put",
                f"Key-Value put, waiting for each acknowledgement ({SIZE}-byte JSON value, "
                f"{len(KEYS):,} keys)",
                interleave(
                    {
                        RAW_PUT: sequenced(lambda: raw_put(raw, sizes.kv_puts)),
                        GOFLUX_PUT: sequenced(lambda: goflux_put(typed, sizes.kv_puts)),
                    },
                    rounds,
                    expected=sizes.kv_puts,
                ),
                RAW_PUT,
            ),
            Table(
                "kv_get",
                f"Key-Value get, decoded ({len(KEYS):,} keys, direct get)",
                interleave(
                    {
                        RAW_GET: on(lambda: raw_get(raw, sizes.kv_gets)),
                        GOFLUX_GET: on(lambda: goflux_get(typed, sizes.kv_gets)),
                    },
                    rounds,
                    expected=sizes.kv_gets,
                ),
                RAW_GET,
            ),
            Table(
                "kv_watch",
                f"Key-Value watch, replaying a bucket of {sizes.kv_watched:,} entries",
                interleave(
                    {
                        RAW_WATCH: on(lambda: raw_watch(raw_watched, sizes.kv_watched)),
                        GOFLUX_WATCH: on(lambda: goflux_watch(typed_watched, sizes.kv_watched)),
                    },
                    rounds,
                    expected=sizes.kv_watched,
                ),
                RAW_WATCH,
                note="Each case starts a watch of every key with its history, receives "
                "and decodes every entry the bucket holds, and stops the watch.",
            ),
        ]
        loop.run_until_complete(nc.close())
        return tables
    finally:
        server.stop()
        loop.close()
