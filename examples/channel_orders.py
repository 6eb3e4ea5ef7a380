"""Typed publish/subscribe on the in-process channel bus.

Billing workers share a queue group (each order is billed once), an audit
subscriber sees every order through a wildcard, and a drain on stop guarantees
nothing published is left unhandled.

Run: python examples/channel_orders.py
"""

from __future__ import annotations

import asyncio
from collections import Counter

from pydantic import BaseModel

from goflux import JsonCodec, Message
from goflux.transports import channel


class Order(BaseModel):
    id: str
    customer: str
    amount: float


async def main() -> None:
    bus = channel.Bus(codec=JsonCodec(Order))
    billed: Counter[str] = Counter()
    audited: list[str] = []

    def billing_worker(name: str):  # type: ignore[no-untyped-def]
        async def bill(msg: Message[Order]) -> None:
            billed[name] += 1

        return bill

    async def audit(msg: Message[Order]) -> None:
        audited.append(f"{msg.subject} {msg.payload.id} tenant={msg.headers['tenant']}")

    async with (
        channel.Subscriber(bus, queue="billing") as billing,
        channel.Subscriber(bus) as auditing,
        channel.Publisher(bus) as publisher,
    ):
        await billing.start("orders.created.*", billing_worker("worker-1"))
        await billing.start("orders.created.*", billing_worker("worker-2"))
        await auditing.start("orders.>", audit)

        for n in range(6):
            region = ("eu", "us")[n % 2]
            await publisher.publish(
                f"orders.created.{region}",
                Order(id=f"o-{n}", customer=f"c-{n % 3}", amount=10.0 * (n + 1)),
                headers={"tenant": "acme"},
                message_id=f"order-{n}",
            )
    # Leaving the block drained every subscription: all handlers have run.

    for line in audited:
        print("audit:", line)
    print("billed per worker:", dict(sorted(billed.items())))
    assert sum(billed.values()) == len(audited) == 6


if __name__ == "__main__":
    asyncio.run(main())
