"""Composition on JetStream: a fan-out pipe, a stream processed four at a time,
micro-batches, all run and stopped together by a Group.

- Orders are published to ``orders.<warehouse>``.
- A ``pipe_flat_map`` turns each order into one pick per order line, on
  ``picks.<warehouse>``, with the order's headers and IDs derived from its ID (so a
  redelivered order cannot produce a pick twice).
- ``group.process`` works the picks off a message stream of a subscriber bound to
  ``picks.>``, at most four at a time, acking each one when its handler returns.
- A task reads the same picks in micro-batches (up to 10, or 0.2 s), as a loader
  writing to a warehouse table would; each batch is acked after it is written.
- The Group starts everything together and, when the block ends (or on SIGTERM with
  ``group.run()``), drains every member before closing the connections it owns.

With NATS_URL unset it starts an embedded nats-server (``goflux[server]``).

Run: python examples/composition.py
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import Counter

import nats
from nats.js import JetStreamContext
from pydantic import BaseModel

from goflux import Group, JsonCodec, Message, bind_subscriber, micro_batches, pipe_flat_map
from goflux.testing import NatsServer
from goflux.transports import jetstream


class Order(BaseModel):
    id: str
    warehouse: str
    lines: list[str]


class Pick(BaseModel):
    order_id: str
    item: str


ORDERS = [
    Order(
        id=f"o-{n}",
        warehouse=("berlin", "lyon")[n % 2],
        lines=[f"item-{n}-{i}" for i in range(1 + n % 3)],
    )
    for n in range(12)
]
PICKS = sum(len(order.lines) for order in ORDERS)


def picks_of(message: Message[Order]) -> list[Pick]:
    """One pick per order line."""
    return [Pick(order_id=message.payload.id, item=item) for item in message.payload.lines]


def warehouse_subject(order_subject: str) -> str:
    """orders.<warehouse> -> picks.<warehouse>: a pipe never writes back onto its input."""
    return "picks." + order_subject.split(".", 1)[1]


class Pickers:
    """The pick handler: records how many run at once, and when all picks are done."""

    def __init__(self) -> None:
        self.running = self.peak = 0
        self.done: Counter[str] = Counter()
        self.all_done = asyncio.Event()

    async def __call__(self, message: Message[Pick]) -> None:
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0.01)  # walking to the shelf
        self.running -= 1
        self.done[message.subject.rsplit(".", 1)[1]] += 1
        if sum(self.done.values()) == PICKS:
            self.all_done.set()


class Loader:
    """Writes picks to a table in micro-batches; each batch is acked once written."""

    def __init__(self, subscriber: jetstream.Subscriber[Pick]) -> None:
        self.subscriber = subscriber
        self.batches: list[int] = []
        self.all_loaded = asyncio.Event()

    async def __call__(self) -> None:
        batches = micro_batches(self.subscriber, "picks.>", max_messages=10, max_wait=0.2)
        async with batches:
            async for batch in batches:
                self.batches.append(len(batch))  # one INSERT per batch
                if sum(self.batches) == PICKS:
                    self.all_loaded.set()


async def run(js: JetStreamContext) -> None:
    await jetstream.ensure_stream(js, name="ORDERS", subjects=["orders.>"])
    await jetstream.ensure_stream(js, name="PICKS", subjects=["picks.>"])
    order_codec, pick_codec = JsonCodec(Order), JsonCodec(Pick)
    orders = jetstream.Publisher(js, order_codec)
    picks = jetstream.Publisher(js, pick_codec)
    order_sub = jetstream.Subscriber(js, order_codec, stream="ORDERS")
    pick_sub = jetstream.Subscriber(js, pick_codec, stream="PICKS", max_in_flight=64)
    incoming_picks = bind_subscriber(pick_sub, "picks.>")
    pickers = Pickers()
    loader = Loader(jetstream.Subscriber(js, pick_codec, stream="PICKS"))

    group = Group(drain_timeout=10)
    group.subscribe(
        order_sub, "orders.*", pipe_flat_map(picks, picks_of, subject=warehouse_subject)
    )
    group.process(incoming_picks.stream(buffer=16), pickers, concurrency=4)
    group.task(loader, name="loader")
    for resource in (orders, picks, order_sub, incoming_picks, loader.subscriber):
        group.own(resource)

    async with group:  # everything is subscribed once this returns
        for order in ORDERS:
            await orders.publish(f"orders.{order.warehouse}", order, message_id=order.id)
        async with asyncio.timeout(30):
            await pickers.all_done.wait()
            await loader.all_loaded.wait()
    # Leaving the block drained every member, then closed what the group owns.
    print(f"orders published: {len(ORDERS)}")
    by_warehouse = dict(sorted(pickers.done.items()))
    print(f"picks made: {sum(pickers.done.values())} of {PICKS}, by warehouse {by_warehouse}")
    print(f"pickers at work at once: at most {pickers.peak}")
    batches = loader.batches
    print(f"picks loaded: {sum(batches)} in {len(batches)} batches of at most {max(batches)}")
    print("group drained and closed")


async def main() -> None:
    async with contextlib.AsyncExitStack() as stack:
        url = (
            os.environ.get("NATS_URL")
            or (await stack.enter_async_context(NatsServer(jetstream=True))).url
        )
        nc = await nats.connect(url)
        stack.push_async_callback(nc.close)
        await run(nc.jetstream())


if __name__ == "__main__":
    asyncio.run(main())
