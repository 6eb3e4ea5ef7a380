"""Channel bus throughput (publish -> handler) against a bare asyncio.Queue loop."""

from __future__ import annotations

import asyncio

from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NoOpTracerProvider

from bench.codecs import ORDER, Order
from bench.harness import Result, interleave
from goflux import JsonCodec, Message, Telemetry
from goflux.transports import channel

N = 10_000


async def raw_queue() -> int:
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=1024)
    done = asyncio.Event()
    count = 0

    async def consume() -> None:
        nonlocal count
        while True:
            await queue.get()
            count += 1
            if count == N:
                done.set()
                return

    task = asyncio.create_task(consume())
    for _ in range(N):
        await queue.put(ORDER)
    await done.wait()
    await task
    return N


async def goflux_bus(telemetry: Telemetry, codec: bool) -> int:
    bus = channel.Bus(codec=JsonCodec(Order)) if codec else channel.Bus[Order]()
    done = asyncio.Event()
    count = 0

    async def handle(msg: Message[Order]) -> None:
        nonlocal count
        count += 1
        if count == N:
            done.set()

    sub = channel.Subscriber(bus, telemetry=telemetry)
    subscription = await sub.start("orders.created", handle)
    pub = channel.Publisher(bus, telemetry=telemetry)
    for _ in range(N):
        await pub.publish("orders.created", ORDER)
    await done.wait()
    await subscription.stop()
    return N


def run(rounds: int) -> dict[str, Result]:
    noop = Telemetry(tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider())
    sdk = Telemetry(
        tracer_provider=TracerProvider(),  # spans are recorded, then dropped (no exporter)
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
    )
    loop = asyncio.new_event_loop()
    try:
        return interleave(
            {
                "raw asyncio.Queue": lambda: loop.run_until_complete(raw_queue()),
                "goflux channel, no-op telemetry": lambda: loop.run_until_complete(
                    goflux_bus(noop, codec=False)
                ),
                "goflux channel + JsonCodec, no-op telemetry": lambda: loop.run_until_complete(
                    goflux_bus(noop, codec=True)
                ),
                "goflux channel, SDK telemetry": lambda: loop.run_until_complete(
                    goflux_bus(sdk, codec=False)
                ),
            },
            rounds,
        )
    finally:
        loop.close()
