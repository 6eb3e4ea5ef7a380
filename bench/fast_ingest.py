"""Fast ingest: goflux ``publish_fast`` against ``publish_many`` and raw nats-py.

Every case publishes the same 10-field model to one file stream with
``allow_batched`` (nats-server 2.14's fast batches), each message encoded on its own,
and counts what the stream stored meanwhile. The rows:

- **raw publish_async**: nats-py's pipelined publish, ``js.publish_async`` for every
  message (at most ``window`` PubAcks pending, nats-py's own limit) and one
  ``asyncio.gather`` of the futures at the end: the fastest way nats-py stores
  messages with an ack each.
- **raw fast batch by hand**: what nats-py can do with the fast-batch protocol
  written by hand (ADR-50): ``nc.publish`` with the ``...<seq>.<op>.$FI`` reply
  subjects, an inbox that reads the server's flow acks, and the same window rule
  goflux uses (wait once ``acked + N * 2`` messages are out). No checks, no telemetry,
  no gap report: the protocol's ceiling in Python.
- **goflux publish_many**: ``window`` PubAcks in flight, a receipt per message.
- **goflux publish_fast**: one fast batch, the batch's receipt.

Rounds alternate the order of the cases (A B C D, D C B A, ...).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.nuid import NUID

from bench.harness import Table, interleave
from bench.payload import ADAPTER, ORDER, SIZE, Order
from bench.sizes import Sizes
from goflux import JsonCodec
from goflux.testing import NatsServer
from goflux.transports import jetstream

STREAM = "INGEST"
RAW = "raw publish_async"
RAW_FAST = "raw fast batch by hand"
MANY = "goflux publish_many"
FAST = "goflux publish_fast"
_FLOW = 500
_OUTSTANDING = 2


async def stored_by(js: JetStreamContext, publishing: Awaitable[object]) -> int:
    """Run ``publishing``; return how many messages the stream stored meanwhile."""
    before = (await js.stream_info(STREAM)).state.messages
    await publishing
    return (await js.stream_info(STREAM)).state.messages - before


async def raw_publish_async(js: JetStreamContext, count: int) -> None:
    futures = [await js.publish_async("ingest.a", ADAPTER.dump_json(ORDER)) for _ in range(count)]
    await asyncio.gather(*futures)


async def raw_fast_batch(nc: Client, count: int) -> None:
    """One fast batch, the protocol by hand: flow acks read, the window kept, no checks."""
    inbox = f"{nc.new_inbox()}.{NUID().next().decode()}"
    acked, msgs = 0, _FLOW
    started = False
    done: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
    wake = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        nonlocal acked, msgs, started
        reply = json.loads(msg.data)
        kind = reply.get("type")
        if kind == "ack":
            started = True
            if reply["seq"] >= acked:
                acked, msgs = reply["seq"], reply["msgs"]
        elif kind is None and not done.done():
            done.set_result(reply)
        elif not done.done():
            done.set_exception(RuntimeError(f"fast batch ended early: {reply}"))
        wake.set()

    sub = await nc.subscribe(f"{inbox}.>", cb=on_msg)
    base = f"{inbox}.{_FLOW}.fail."
    for seq in range(1, count + 1):
        op = 2 if seq == count else (0 if seq == 1 else 1)
        await nc.publish("ingest.b", ADAPTER.dump_json(ORDER), reply=f"{base}{seq}.{op}.$FI")
        while not done.done() and (
            (seq == 1 and not started and op != 2) or (seq > 1 and acked + msgs * 2 <= seq)
        ):
            wake.clear()
            await asyncio.wait_for(wake.wait(), 10)
    await asyncio.wait_for(done, 10)
    await sub.unsubscribe()


async def goflux_many(pub: jetstream.Publisher[Order], count: int, window: int) -> None:
    await pub.publish_many(
        (jetstream.Outgoing("ingest.c", ORDER) for _ in range(count)), window=window
    )


async def goflux_fast(pub: jetstream.Publisher[Order], count: int) -> None:
    await pub.publish_fast(
        (jetstream.Outgoing("ingest.d", ORDER) for _ in range(count)),
        stream=STREAM,
        flow=_FLOW,
        outstanding=_OUTSTANDING,
    )


def run(rounds: int, sizes: Sizes) -> list[Table]:
    """The fast-ingest table (its own nats-server)."""
    loop = asyncio.new_event_loop()
    server = NatsServer().start()
    try:
        nc = loop.run_until_complete(nats.connect(server.url))
        js = nc.jetstream(publish_async_max_pending=sizes.window)
        loop.run_until_complete(
            jetstream.ensure_stream(
                js, name=STREAM, subjects=["ingest.>"], storage="file", allow_batched=True
            )
        )
        pub = jetstream.Publisher(js, JsonCodec(Order))
        n = sizes.pipelined

        def stored(make: Callable[[], Awaitable[object]]) -> Callable[[], int]:
            return lambda: loop.run_until_complete(stored_by(js, make()))

        cases = {
            RAW: stored(lambda: raw_publish_async(js, n)),
            RAW_FAST: stored(lambda: raw_fast_batch(nc, n)),
            MANY: stored(lambda: goflux_many(pub, n, sizes.window)),
            FAST: stored(lambda: goflux_fast(pub, n)),
        }
        table = Table(
            "fast_ingest",
            f"JetStream fast ingest ({n:,} messages per round, {SIZE}-byte JSON payload)",
            interleave(cases, rounds, expected=n, alternate=True),
            RAW,
            note=(
                f"`{RAW}`: `js.publish_async` per message ({sizes.window:,} PubAcks "
                f"pending at most) and one `asyncio.gather`. `{RAW_FAST}`: `nc.publish` "
                "with the ADR-50 reply subjects and flow acks read by hand (flow "
                f"{_FLOW}, 2 acks outstanding), no checks. `{MANY}`: window "
                f"{sizes.window:,}. `{FAST}`: one fast batch (flow {_FLOW}, "
                f"{_OUTSTANDING} acks outstanding). The stream stores to file."
            ),
        )
        loop.run_until_complete(nc.close())
        return [table]
    finally:
        server.stop()
        loop.close()
