"""A consumer process that reports every message it handled, until a test kills it.

Usage: python -m tests.reliability.counting_consumer URL STREAM CONSUMER IN_FLIGHT CONFIRM
It prints ``ready`` once subscribed, then ``handled <message id>`` as each handler
returns (the auto-ack follows; with CONFIRM=1 it is a confirmed ack), and runs until
it is killed.
"""

from __future__ import annotations

import asyncio
import sys

import nats

from goflux import JsonCodec, Message
from goflux.transports import jetstream
from tests.models import Order


async def main(url: str, stream: str, consumer: str, in_flight: int, confirm: bool) -> None:
    nc = await nats.connect(url)
    out = sys.stdout

    async def handle(msg: Message[Order]) -> None:
        await asyncio.sleep(0)  # a handler that yields, as real ones do
        out.write(f"handled {msg.id}\n")
        out.flush()  # the test must know of it even if the process dies next

    sub = jetstream.Subscriber(
        nc.jetstream(),
        JsonCodec(Order),
        stream=stream,
        consumer=consumer,
        max_in_flight=in_flight,
        concurrency=8,
        confirm_acks=confirm,
    )
    await sub.start("rel.>", handle)
    out.write("ready\n")
    out.flush()
    await asyncio.Event().wait()


if __name__ == "__main__":
    url, stream, consumer, in_flight, confirm = sys.argv[1:6]
    asyncio.run(main(url, stream, consumer, int(in_flight), confirm == "1"))
