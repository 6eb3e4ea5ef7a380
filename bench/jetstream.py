"""JetStream: goflux publisher and subscriber against raw nats-py on the same server.

Raw nats-py gets its best paths: ``await js.publish`` for sequential publishing,
``publish_async`` for pipelined publishing, and a callback subscription driven by
hand-sent pull requests (batch 100, re-pulled at half) for consuming. Both sides
encode/decode the same 10-field pydantic model and ack every message. The consume
table also runs goflux with the usual middleware chain, to show what it costs.
"""

from __future__ import annotations

import asyncio
import json

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from pydantic import TypeAdapter

from bench.codecs import ORDER, Order
from bench.harness import Result, interleave
from goflux import JsonCodec, Message, chain
from goflux.middleware import RetryPolicy, message_context, retry_ack, timeout
from goflux.testing import NatsServer
from goflux.transports import jetstream

STREAM = "BENCH"
SEQUENTIAL = 2_000
PIPELINED = 30_000
CONSUMED = 30_000
WINDOW = 4_000
ADAPTER = TypeAdapter(Order)
# The resilience chain a production service would use (heartbeats only after 10 s).
RESILIENT = chain(retry_ack(RetryPolicy()), timeout(30), message_context())


async def raw_sequential(js: JetStreamContext) -> int:
    for _ in range(SEQUENTIAL):
        await js.publish("bench.seq", ADAPTER.dump_json(ORDER))
    return SEQUENTIAL


async def goflux_sequential(pub: jetstream.Publisher[Order]) -> int:
    for _ in range(SEQUENTIAL):
        await pub.publish("bench.seq", ORDER)
    return SEQUENTIAL


async def raw_pipelined(js: JetStreamContext) -> int:
    futures = [
        await js.publish_async("bench.pipe", ADAPTER.dump_json(ORDER)) for _ in range(PIPELINED)
    ]
    await asyncio.gather(*futures)
    return PIPELINED


async def goflux_pipelined(pub: jetstream.Publisher[Order]) -> int:
    outgoing = (jetstream.Outgoing("bench.pipe", ORDER) for _ in range(PIPELINED))
    await pub.publish_many(outgoing, window=WINDOW)
    return PIPELINED


async def raw_consume(js: JetStreamContext) -> int:
    """The fastest raw nats-py consumer: callback + hand-sent pull requests + ack()."""
    nc = js._nc
    info = await js.add_consumer(STREAM, filter_subject="bench.data", ack_policy="explicit")
    inbox = nc.new_inbox()
    next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{info.name}"
    batch = 100
    state = {"received": 0, "outstanding": 0}
    done = asyncio.Event()

    async def pull() -> None:
        request = json.dumps({"batch": batch, "expires": 5_000_000_000}).encode()
        await nc.publish(next_subject, request, reply=inbox)

    async def on_message(msg: Msg) -> None:
        if not msg.reply:
            return  # status
        ADAPTER.validate_json(msg.data)
        await msg.ack()
        state["received"] += 1
        state["outstanding"] -= 1
        if state["outstanding"] == batch // 2:
            state["outstanding"] += batch
            await pull()
        if state["received"] == CONSUMED:
            done.set()

    sub = await nc.subscribe(inbox, cb=on_message)
    state["outstanding"] = 2 * batch
    await pull()
    await pull()
    await done.wait()
    await sub.unsubscribe()
    await js.delete_consumer(STREAM, info.name)
    return CONSUMED


async def goflux_consume(js: JetStreamContext, *, middleware: bool = False) -> int:
    count = 0
    done = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        nonlocal count
        count += 1
        if count == CONSUMED:
            done.set()

    handler = RESILIENT(handle) if middleware else handle
    sub = jetstream.Subscriber(js, JsonCodec(Order), stream=STREAM)
    await sub.start("bench.data", handler)
    await done.wait()
    await sub.close()
    return CONSUMED


def run(rounds: int) -> dict[str, dict[str, Result]]:
    loop = asyncio.new_event_loop()
    server = NatsServer().start()
    try:
        nc = loop.run_until_complete(nats.connect(server.url))
        js = nc.jetstream(publish_async_max_pending=WINDOW)
        loop.run_until_complete(
            jetstream.ensure_stream(js, name=STREAM, subjects=["bench.>"], storage="file")
        )
        pub = jetstream.Publisher(js, JsonCodec(Order))
        loop.run_until_complete(
            pub.publish_many(
                (jetstream.Outgoing("bench.data", ORDER) for _ in range(CONSUMED)), window=WINDOW
            )
        )

        def on(coroutine_factory):  # type: ignore[no-untyped-def]
            return lambda: loop.run_until_complete(coroutine_factory())

        results = {
            "sequential": interleave(
                {
                    "raw js.publish": on(lambda: raw_sequential(js)),
                    "goflux Publisher.publish": on(lambda: goflux_sequential(pub)),
                },
                rounds,
            ),
            "pipelined": interleave(
                {
                    "raw publish_async": on(lambda: raw_pipelined(js)),
                    "goflux publish_many": on(lambda: goflux_pipelined(pub)),
                },
                rounds,
            ),
            "consume": interleave(
                {
                    "raw callback pull + ack": on(lambda: raw_consume(js)),
                    "goflux Subscriber (auto-ack)": on(lambda: goflux_consume(js)),
                    "goflux + retry_ack, timeout, message_context": on(
                        lambda: goflux_consume(js, middleware=True)
                    ),
                },
                rounds,
            ),
        }
        loop.run_until_complete(nc.close())
        return results
    finally:
        server.stop()
        loop.close()
