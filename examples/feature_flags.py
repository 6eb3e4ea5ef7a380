"""Typed configuration in a Key-Value bucket, reconfiguring a running consumer live.

A pricing configuration lives in the bucket ``config`` under the key ``pricing``. A
watcher follows the key and swaps the configuration an order consumer uses, while
the consumer keeps running: orders are priced with whatever configuration is current.
An update made against a stale revision is refused (``RevisionMismatch``), so two
operators cannot overwrite each other by accident.

With NATS_URL unset it starts an embedded nats-server (``goflux[server]``).

Run: python examples/feature_flags.py
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import nats
from pydantic import BaseModel

from goflux import JsonCodec, Message, RevisionMismatch
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports.jetstream import Entry


class Pricing(BaseModel):
    discount_percent: float
    paused: bool = False


class Order(BaseModel):
    id: str
    amount: float


class Live:
    """The configuration in use, and a signal for each revision the watcher applied."""

    def __init__(self) -> None:
        self.pricing = Pricing(discount_percent=0)
        self.revision = 0
        self.changed = asyncio.Condition()

    async def apply(self, msg: Message[Entry[Pricing]]) -> None:
        entry = msg.payload
        if entry.value is not None:
            async with self.changed:
                self.pricing, self.revision = entry.value, entry.revision
                self.changed.notify_all()
                print(f"config rev {entry.revision}: {entry.value.discount_percent:g}% off")

    async def reached(self, revision: int) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: self.revision >= revision)


async def main() -> None:
    async with contextlib.AsyncExitStack() as stack:
        url = os.environ.get("NATS_URL") or (
            (await stack.enter_async_context(NatsServer(jetstream=True))).url
        )
        nc = await nats.connect(url)
        stack.push_async_callback(nc.close)
        js = nc.jetstream()

        config = await jetstream.key_value(js, "config", JsonCodec(Pricing), history=5)
        first = await config.put("pricing", Pricing(discount_percent=0))

        live = Live()
        watcher = await stack.enter_async_context(config.watcher())
        await stack.enter_async_context(await watcher.start("pricing", live.apply))
        await live.reached(first)

        await jetstream.ensure_stream(js, name="ORDERS", subjects=["orders.>"])
        priced: asyncio.Queue[str] = asyncio.Queue()

        async def price(msg: Message[Order]) -> None:
            pricing, revision = live.pricing, live.revision
            total = msg.payload.amount * (1 - pricing.discount_percent / 100)
            await priced.put(
                f"{msg.payload.id}: {total:.2f} at {pricing.discount_percent:g}% "
                f"(config rev {revision})"
            )

        orders = jetstream.Subscriber(js, JsonCodec(Order), stream="ORDERS")
        await stack.enter_async_context(await orders.start("orders.>", price))
        publisher = jetstream.Publisher(js, JsonCodec(Order))

        await publisher.publish("orders.new", Order(id="o-1", amount=100))
        print(await priced.get())

        second = await config.update("pricing", Pricing(discount_percent=10), revision=first)
        await live.reached(second)  # the running consumer now prices with 10 % off
        await publisher.publish("orders.new", Order(id="o-2", amount=100))
        print(await priced.get())

        try:  # an operator still looking at revision 1
            await config.update("pricing", Pricing(discount_percent=50), revision=first)
        except RevisionMismatch as exc:
            print(f"refused: expected rev {exc.expected}, the key is at rev {exc.actual}")

        history = await config.history("pricing")
        print(
            "history:",
            [(e.revision, e.value.discount_percent if e.value else None) for e in history],
        )


if __name__ == "__main__":
    asyncio.run(main())
