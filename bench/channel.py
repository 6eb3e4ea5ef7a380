"""Channel bus throughput (publish -> handler) against a bare asyncio.Queue loop."""

from __future__ import annotations

import asyncio

from bench.harness import Table, interleave, wait_for
from bench.jetstream import noop_telemetry, sdk_providers
from bench.payload import ORDER, Order
from bench.sizes import Sizes
from goflux import JsonCodec, Message, Telemetry
from goflux.transports import channel


async def raw_queue(n: int) -> int:
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=1024)
    done = asyncio.Event()
    count = 0

    async def consume() -> None:
        nonlocal count
        while True:
            await queue.get()
            count += 1
            if count == n:
                done.set()
                return

    task = asyncio.create_task(consume())
    for _ in range(n):
        await queue.put(ORDER)
    await wait_for(done, lambda: count)
    task.cancel()
    return count


async def goflux_bus(n: int, telemetry: Telemetry, codec: bool) -> int:
    bus = channel.Bus(codec=JsonCodec(Order)) if codec else channel.Bus[Order]()
    done = asyncio.Event()
    count = 0

    async def handle(msg: Message[Order]) -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    sub = channel.Subscriber(bus, telemetry=telemetry)
    subscription = await sub.start("orders.created", handle)
    pub = channel.Publisher(bus, telemetry=telemetry)
    for _ in range(n):
        await pub.publish("orders.created", ORDER)
    await wait_for(done, lambda: count)
    await subscription.stop()
    return count


def run(rounds: int, sizes: Sizes) -> list[Table]:
    n = sizes.channel_msgs
    tracer_provider, meter_provider = sdk_providers()
    sdk = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
    noop = noop_telemetry()
    loop = asyncio.new_event_loop()
    try:
        results = interleave(
            {
                "raw asyncio.Queue": lambda: loop.run_until_complete(raw_queue(n)),
                "goflux channel, telemetry not configured": lambda: loop.run_until_complete(
                    goflux_bus(n, Telemetry(), codec=False)
                ),
                "goflux channel, no-op telemetry": lambda: loop.run_until_complete(
                    goflux_bus(n, noop, codec=False)
                ),
                "goflux channel + JsonCodec, no-op telemetry": lambda: loop.run_until_complete(
                    goflux_bus(n, noop, codec=True)
                ),
                "goflux channel, SDK telemetry": lambda: loop.run_until_complete(
                    goflux_bus(n, sdk, codec=False)
                ),
            },
            rounds,
            expected=n,
        )
    finally:
        loop.close()
        tracer_provider.shutdown()
        meter_provider.shutdown()
    return [
        Table(
            "channel",
            "In-process publish -> handler (channel transport)",
            results,
            "raw asyncio.Queue",
        )
    ]
