"""End-to-end latency at a fixed rate: publish -> stored -> delivered to a typed handler.

Each case publishes numbered orders at ``latency_rate`` messages/s (waiting for each
PubAck, as a service would) and consumes them in the same process; a message's latency
runs from just before its publish call to its arrival in the handler, decoded. goflux
uses its publisher and subscriber; raw nats-py ``js.publish`` and the callback pull
consumer. Rounds are interleaved like every other table. Every message must arrive,
once: a round that got fewer (or more) stops the run with ``CountError``.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import nats
from nats.js import JetStreamContext

from bench.harness import check_count
from bench.jetstream import STREAM, goflux_consume, raw_callback_pull
from bench.payload import ADAPTER, Order, numbered
from bench.sizes import Sizes
from goflux import JsonCodec
from goflux.testing import NatsServer
from goflux.transports import jetstream

RAW = "raw js.publish + callback pull"
GOFLUX = "goflux Publisher + Subscriber"

Consume = Callable[..., Awaitable[int]]
Publish = Callable[[str, Order], Awaitable[object]]


@dataclass
class Latencies:
    """Latencies of one case over all rounds, in microseconds."""

    name: str
    samples: list[float] = field(default_factory=list)
    round_p50: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)  # messages that arrived, per round

    def percentile(self, q: float) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(
    js: JetStreamContext,
    consume: Consume,
    publish: Publish,
    subject: str,
    orders: list[Order],
    rate: float,
) -> tuple[list[float], float]:
    """Publish ``orders`` at ``rate``; return each one's latency (µs) and the rate reached.

    Raises:
        CountError: Not every order arrived exactly once.
    """
    # As every other suite's cases do (bench.harness): a collection of what setup and
    # the case before left would otherwise land in this one (a gen-2 collection took
    # 41 ms, the round's maximum, in the first case after the suite's imports).
    gc.collect()
    sent = [0.0] * len(orders)
    latencies: list[float] = []
    arrivals: set[str] = set()

    def arrived(order: Order) -> None:
        latencies.append((time.perf_counter() - sent[int(order.id)]) * 1e6)
        arrivals.add(order.id)

    ready = asyncio.Event()
    consumer = asyncio.create_task(
        consume(js, len(orders), subject, on_order=arrived, deliver_policy="new", ready=ready)
    )
    await ready.wait()
    start = time.perf_counter()
    for index, order in enumerate(orders):
        delay = start + index / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        sent[index] = time.perf_counter()
        await publish(subject, order)
    reached = len(orders) / (time.perf_counter() - start)
    handled = await consumer
    check_count(f"latency, {subject}: messages handled", handled, len(orders))
    check_count(f"latency, {subject}: latencies", len(latencies), len(orders))
    check_count(f"latency, {subject}: distinct orders", len(arrivals), len(orders))
    return latencies, reached


def run(rounds: int, sizes: Sizes) -> dict[str, Latencies]:
    orders = numbered(sizes.latency_msgs)
    loop = asyncio.new_event_loop()
    server = NatsServer().start()
    try:
        nc = loop.run_until_complete(nats.connect(server.url))
        js = nc.jetstream()
        loop.run_until_complete(
            jetstream.ensure_stream(js, name=STREAM, subjects=["bench.>"], storage="file")
        )
        pub = jetstream.Publisher(js, JsonCodec(Order))

        async def raw_publish(subject: str, order: Order) -> object:
            return await js.publish(subject, ADAPTER.dump_json(order))

        cases: dict[str, tuple[Consume, Publish]] = {
            RAW: (raw_callback_pull, raw_publish),
            GOFLUX: (goflux_consume, pub.publish),
        }
        results = {name: Latencies(name) for name in cases}
        for round_ in range(rounds):
            for index, (name, (consume, publish)) in enumerate(cases.items()):
                subject = f"bench.latency.{round_}.{index}"
                samples, reached = loop.run_until_complete(
                    measure(js, consume, publish, subject, orders, sizes.latency_rate)
                )
                result = results[name]
                result.samples += samples
                result.round_p50.append(statistics.median(samples))
                result.rates.append(reached)
                result.counts.append(len(samples))
        loop.run_until_complete(nc.close())
        return results
    finally:
        server.stop()
        loop.close()


def markdown(results: dict[str, Latencies], sizes: Sizes) -> str:
    lines = [
        f"### End-to-end latency at {sizes.latency_rate:,.0f} msg/s "
        f"({sizes.latency_msgs:,} messages per round)",
        "",
        "| case | arrived per round | p50 µs | p99 µs | max µs | p50 per round (min-max) "
        "| rate reached |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines.extend(
        f"| {r.name} | {'/'.join(f'{c:,}' for c in sorted(set(r.counts)))} | "
        f"{r.percentile(0.5):,.0f} | {r.percentile(0.99):,.0f} | "
        f"{max(r.samples):,.0f} | {min(r.round_p50):,.0f}-{max(r.round_p50):,.0f} | "
        f"{statistics.median(r.rates):,.0f}/s |"
        for r in results.values()
    )
    return "\n".join(lines)
