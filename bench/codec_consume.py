"""A typed JetStream consume with MsgpackCodec against the same with JsonCodec.

The issue's goal: consuming with ``MsgpackCodec`` is at least as fast as with
``JsonCodec``. The same 10-field orders (``payload.py``) are stored twice, once as
JSON on one subject and once as MessagePack on another; each case starts a goflux
``Subscriber`` with its codec on its subject (a fresh consumer, from the first
message), auto-acks every message into a typed handler and counts the orders it got.
Rounds alternate the order of the two cases (A B B A ...), so neither always runs
right after the other; the JSON case is the baseline of the ratios.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import nats
from nats.js import JetStreamContext

from bench.harness import Table, interleave, wait_for
from bench.payload import ORDER, Order
from bench.sizes import Sizes
from goflux import Codec, JsonCodec, Message
from goflux.codecs import MsgpackCodec
from goflux.testing import NatsServer
from goflux.transports import jetstream

STREAM = "CODECS"
JSON = "goflux Subscriber, JsonCodec"
MSGPACK = "goflux Subscriber, MsgpackCodec"


async def consume(js: JetStreamContext, codec: Codec[Order], subject: str, n: int) -> int:
    """Consume ``n`` orders from ``subject`` with ``codec``; return how many arrived."""
    received = 0
    done = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        nonlocal received
        if msg.payload.id == ORDER.id:
            received += 1
        if received == n:
            done.set()

    sub = jetstream.Subscriber(js, codec, stream=STREAM)
    subscription = await sub.start(subject, handle)
    await wait_for(done, lambda: received)
    await subscription.stop()
    return received


def run(rounds: int, sizes: Sizes) -> list[Table]:
    n = sizes.consumed
    codecs: dict[str, tuple[Codec[Order], str]] = {
        JSON: (JsonCodec(Order), "codecs.json"),
        MSGPACK: (MsgpackCodec(Order), "codecs.msgpack"),
    }
    loop = asyncio.new_event_loop()
    server = NatsServer().start()
    try:
        nc = loop.run_until_complete(nats.connect(server.url))
        js = nc.jetstream(publish_async_max_pending=sizes.window)
        loop.run_until_complete(
            jetstream.ensure_stream(js, name=STREAM, subjects=["codecs.>"], storage="file")
        )
        for codec, subject in codecs.values():
            loop.run_until_complete(
                jetstream.Publisher(js, codec).publish_many(
                    (jetstream.Outgoing(subject, ORDER) for _ in range(n)), window=sizes.window
                )
            )

        def case(codec: Codec[Order], subject: str) -> Callable[[], int]:
            return lambda: loop.run_until_complete(consume(js, codec, subject, n))

        cases = {name: case(codec, subject) for name, (codec, subject) in codecs.items()}
        json_size = len(codecs[JSON][0].encode(ORDER))
        msgpack_size = len(codecs[MSGPACK][0].encode(ORDER))
        table = Table(
            "codec_consume",
            f"JetStream consume with ack, typed handler, by codec ({n:,} messages per round)",
            interleave(cases, rounds, expected=n, alternate=True),
            JSON,
            note=f"The same order stored {n:,} times as JSON ({json_size} bytes) and as "
            f"MessagePack ({msgpack_size} bytes); rounds alternate the cases' order. The "
            "ratio column is against JsonCodec.",
            versus="JsonCodec",
        )
        loop.run_until_complete(nc.close())
        return [table]
    finally:
        server.stop()
        loop.close()
