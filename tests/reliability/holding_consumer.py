"""A consumer process that takes messages and never finishes them (killed by a test).

Usage: python -m tests.reliability.holding_consumer URL STREAM CONSUMER COUNT
It prints ``holding COUNT`` once COUNT handlers are running, then waits forever.
"""

from __future__ import annotations

import asyncio
import sys

import nats

from goflux import JsonCodec, Message
from goflux.transports import jetstream
from tests.models import Order


async def main(url: str, stream: str, consumer: str, count: int) -> None:
    nc = await nats.connect(url)
    holding = 0
    forever = asyncio.Event()

    async def hold(msg: Message[Order]) -> None:
        nonlocal holding
        holding += 1
        if holding == count:
            print(f"holding {count}", flush=True)
        await forever.wait()

    sub = jetstream.Subscriber(
        nc.jetstream(),
        JsonCodec(Order),
        stream=stream,
        consumer=consumer,
        max_in_flight=count,
        concurrency=count,
    )
    await sub.start("rel.>", hold)
    await forever.wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
