"""Batch direct get: goflux's ``get_batch`` against one get per message, on one server.

One stream (direct gets allowed) holds the messages, the 10-field JSON order of the
other suites. Four ways to read all of them, each decoding every message with the
same pydantic model:

- ``get_batch``: goflux's batched direct get (ADR-31), 1,000 messages (or 1 MiB) a
  request, typed :class:`~goflux.transports.jetstream.StoredMessage`\\ s;
- a raw batched direct get by hand: the same requests sent with nats-py on a
  connection of its own (nats-py's header parsing), replies taken from a callback's
  queue, the ``TypeAdapter`` on each body: the floor of what ``get_batch`` does;
- one goflux get per message: the stream's message-get API by sequence (what
  ``get_last`` sends, by sequence), decoded into a ``StoredMessage``;
- raw nats-py: ``js.get_msg(stream, seq, direct=True)`` per message, then the
  ``TypeAdapter`` (the baseline).

A case counts the messages it read and decoded; the cases run in turns, every other
round in reverse order.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bench.harness import Table, interleave
from bench.payload import ADAPTER, ORDER, SIZE, Order
from bench.sizes import Sizes
from goflux import JsonCodec
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports.jetstream._api import message_get
from goflux.transports.jetstream._stored import _stored

STREAM = "BENCH_READS"
RAW_EACH = "raw js.get_msg(direct=True) per message + decode"
GOFLUX_EACH = "goflux get per message (STREAM.MSG.GET by sequence)"
GOFLUX_BATCH = "goflux get_batch"
RAW_BATCH = "raw batched direct get by hand (nats-py) + decode"
CODEC = JsonCodec(Order)


async def raw_each(js: JetStreamContext, count: int) -> int:
    """nats-py: one direct get per sequence, decoded; returns the messages read."""
    got = 0
    for seq in range(1, count + 1):
        msg = await js.get_msg(STREAM, seq, direct=True)
        if msg.data is not None:
            ADAPTER.validate_json(msg.data)
            got += 1
    return got


async def goflux_each(js: JetStreamContext, count: int) -> int:
    """goflux's plumbing of ``get_last``, by sequence: one request per message."""
    got = 0
    for seq in range(1, count + 1):
        stored = await message_get(js, STREAM, {"seq": seq})
        if stored is not None:
            _stored(STREAM, CODEC, stored)
            got += 1
    return got


async def raw_batch(nc: Client, count: int) -> int:
    """nats-py: batched direct gets by hand, 1,000 a request, decoded; returns the count."""
    replies: asyncio.Queue[Msg] = asyncio.Queue()

    async def arrive(msg: Msg) -> None:
        replies.put_nowait(msg)

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=arrive)
    subject = f"$JS.API.DIRECT.GET.{STREAM}"
    seq, got = 1, 0
    try:
        while got < count:
            request = {"seq": seq, "batch": min(1_000, count - got), "max_bytes": 1 << 20}
            await nc.publish(subject, json.dumps(request).encode(), reply=inbox)
            while True:
                msg = await replies.get()
                headers = msg.headers or {}
                sequence = headers.get("Nats-Sequence")
                if sequence is None:
                    break  # the end of the batch (or nothing left)
                ADAPTER.validate_json(msg.data)
                got += 1
                seq = int(sequence) + 1
            if headers.get("Status") != "204" or headers.get("Nats-Num-Pending") == "0":
                return got
        return got
    finally:
        await sub.unsubscribe()


async def goflux_batch(js: JetStreamContext, count: int) -> int:
    """goflux: ``get_batch`` over the whole stream; returns the messages read."""
    got = 0
    async for _ in jetstream.get_batch(js, CODEC, stream=STREAM, max_messages=count):
        got += 1
    return got


async def fill(js: JetStreamContext, count: int, window: int) -> None:
    """The stream with ``count`` orders on ``reads.<i mod 100>``.

    Raises:
        RuntimeError: The stream does not hold ``count`` messages afterwards.
    """
    await jetstream.ensure_stream(js, name=STREAM, subjects=["reads.>"], allow_direct=True)
    data = ADAPTER.dump_json(ORDER)
    for start in range(0, count, window):
        acks = [
            await js.publish_async(f"reads.{i % 100}", data)
            for i in range(start, min(start + window, count))
        ]
        await asyncio.gather(*acks)
    held = (await js.stream_info(STREAM)).state.messages
    if held != count:
        raise RuntimeError(f"stream {STREAM!r} holds {held:,} messages, not {count:,}")


def run(rounds: int, sizes: Sizes) -> list[Table]:
    """The batch get table: get_batch beside one get per message (goflux and raw)."""
    count = sizes.batch_get_msgs
    loop = asyncio.new_event_loop()
    server = NatsServer().start()
    try:
        nc = loop.run_until_complete(nats.connect(server.url))
        # Its own connection: get_batch keeps header lines on its (goflux's parsing).
        raw_nc = loop.run_until_complete(nats.connect(server.url))
        js = nc.jetstream(publish_async_max_pending=sizes.window)
        loop.run_until_complete(fill(js, count, sizes.window))

        def on(make: Callable[[], Awaitable[int]]) -> Callable[[], int]:
            return lambda: loop.run_until_complete(make())

        tables = [
            Table(
                "batch_get",
                f"Reading {count:,} stored messages ({SIZE}-byte JSON, decoded): "
                "batch direct get vs one get per message",
                interleave(
                    {
                        RAW_EACH: on(lambda: raw_each(js, count)),
                        GOFLUX_EACH: on(lambda: goflux_each(js, count)),
                        GOFLUX_BATCH: on(lambda: goflux_batch(js, count)),
                        RAW_BATCH: on(lambda: raw_batch(raw_nc, count)),
                    },
                    rounds,
                    expected=count,
                    alternate=True,
                ),
                RAW_EACH,
                note="Each case reads every message of the stream from sequence 1 and "
                "decodes it with the same pydantic model. get_batch and the raw batch by "
                "hand ask for 1,000 messages (at most 1 MiB) a request; the others send "
                "one request per message and wait for its reply.",
            ),
        ]
        loop.run_until_complete(nc.close())
        loop.run_until_complete(raw_nc.close())
        return tables
    finally:
        server.stop()
        loop.close()
