"""A service run by test_group: a Group consuming two durable consumers until SIGTERM.

Prints ``start <payload>`` and ``done <payload>`` for every message it handles, then
``stopped <signal>`` after the group has drained.
"""

from __future__ import annotations

import asyncio
import sys

import nats

from goflux import Group, Message, StrCodec
from goflux.transports import jetstream


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def handle(message: Message[str]) -> None:
    say(f"start {message.payload}")
    await asyncio.sleep(0.02)  # work that a drain must let finish
    say(f"done {message.payload}")


async def main(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    codec = StrCodec()
    subscribed = jetstream.Subscriber(
        js, codec, stream="ORDERS", consumer="subscribed", concurrency=4, max_in_flight=16
    )
    streamed = jetstream.Subscriber(js, codec, stream="ORDERS", consumer="streamed")
    group = Group(drain_timeout=10)
    group.subscribe(subscribed, "orders.sub.>", handle)
    group.process(streamed.stream("orders.proc.>", buffer=8), handle, concurrency=4)
    group.own(subscribed)
    group.own(streamed)

    async def ready() -> None:
        say("ready")

    group.task(ready)
    await group.run()
    say(f"stopped {group.signalled.name if group.signalled else None}")
    await nc.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
