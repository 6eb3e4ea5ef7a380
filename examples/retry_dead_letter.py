"""Retries with broker-side backoff, dead letters and timeouts on JetStream.

A payment handler is wrapped in middleware, outermost first:

- ``retry_ack``: a failure is naked with an exponential delay that the broker keeps
  (no handler slot is held while waiting); a ``NonRetryable`` failure, or the third
  failed attempt, publishes the original message to a dead-letter stream and then
  terminates it;
- ``timeout``: a payment call that hangs is cancelled and retried like any failure;
- ``message_context``: the invoices the handler publishes, through ``forward_context``
  and ``retry_publish``, carry the order's headers and an ID derived from its ID, so
  a redelivered order cannot produce a second invoice.

With NATS_URL unset it starts an embedded nats-server (``goflux[server]``).

Run: python examples/retry_dead_letter.py
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections import Counter

import nats
from nats.js import JetStreamContext
from pydantic import BaseModel

from goflux import (
    BytesCodec,
    JsonCodec,
    Message,
    NonRetryable,
    Publisher,
    chain,
    chain_publishers,
)
from goflux.middleware import (
    DeadLetter,
    ExponentialBackoff,
    RetryPolicy,
    forward_context,
    message_context,
    retry_ack,
    retry_publish,
    timeout,
)
from goflux.testing import NatsServer
from goflux.transports import jetstream


class Order(BaseModel):
    id: str
    amount: float


class Invoice(BaseModel):
    order_id: str
    amount: float


async def provision(js: JetStreamContext) -> None:
    """The payments stream and its consumer, invoices, and the dead-letter stream."""
    for name, subjects in (("PAYMENTS", ["payments.>"]), ("INVOICES", ["invoices.>"])):
        await jetstream.ensure_stream(js, name=name, subjects=subjects)
    await jetstream.ensure_stream(js, name="PAYMENTS_DLQ", subjects=["dlq.payments"])
    await jetstream.ensure_consumer(
        js, stream="PAYMENTS", name="charger", filter_subject="payments.>", ack_wait=30
    )


class Charger:
    """Charges orders: o-2 fails twice, o-3 is invalid, o-4 hangs every time."""

    def __init__(self, invoices: Publisher[Invoice], max_attempts: int) -> None:
        self.invoices = invoices
        self.max_attempts = max_attempts
        self.attempts: Counter[str] = Counter()
        self.finished: set[str] = set()
        self.all_done = asyncio.Event()

    def finish(self, order_id: str) -> None:
        self.finished.add(order_id)
        if len(self.finished) == 4:
            self.all_done.set()

    async def __call__(self, msg: Message[Order]) -> None:
        order = msg.payload
        self.attempts[order.id] += 1
        assert msg.delivery is not None
        print(f"{order.id}: delivery {msg.delivery.num_delivered}")
        try:
            if order.amount < 0:
                raise NonRetryable(f"negative amount {order.amount}")
            if order.id == "o-2" and self.attempts[order.id] <= 2:
                raise ConnectionError("payment service unavailable")
            if order.id == "o-4":
                await asyncio.Event().wait()  # the payment call hangs
        except BaseException:
            if order.amount < 0 or self.attempts[order.id] == self.max_attempts:
                self.finish(order.id)  # given up: dead-lettered
            raise
        await self.invoices.publish(
            "invoices.created", Invoice(order_id=order.id, amount=order.amount)
        )
        self.finish(order.id)


async def run(js: JetStreamContext) -> None:
    await provision(js)
    invoices = chain_publishers(forward_context(derive_ids="charger"), retry_publish(attempts=5))(
        jetstream.Publisher(js, JsonCodec(Invoice))
    )
    dead_letters = DeadLetter(jetstream.Publisher(js, BytesCodec()), "dlq.payments")
    backoff = ExponentialBackoff(initial=0.2, multiplier=2.0, max=5.0, jitter=0.0)
    policy = RetryPolicy(backoff=backoff, max_attempts=3, dead_letter=dead_letters)
    charger = Charger(invoices, max_attempts=3)
    handler = chain(retry_ack(policy), timeout(0.5), message_context())(charger)

    orders = JsonCodec(Order)
    async with jetstream.Subscriber(js, orders, stream="PAYMENTS", consumer="charger") as sub:
        await sub.start("payments.>", handler)
        publisher = jetstream.Publisher(js, orders)
        for order in (Order(id="o-1", amount=10), Order(id="o-2", amount=20),
                      Order(id="o-3", amount=-5), Order(id="o-4", amount=40)):  # fmt: skip
            await publisher.publish(
                "payments.requested", order, headers={"Tenant": "acme"}, message_id=order.id
            )
        await asyncio.wait_for(charger.all_done.wait(), timeout=30)
    print(f"attempts: {dict(sorted(charger.attempts.items()))}")

    letters: list[Message[bytes]] = []
    two_letters = asyncio.Event()

    async def collect(letter: Message[bytes]) -> None:
        letters.append(letter)
        if len(letters) == 2:
            two_letters.set()

    async with jetstream.Subscriber(js, BytesCodec(), stream="PAYMENTS_DLQ") as dlq:
        await dlq.start("dlq.payments", collect)
        await asyncio.wait_for(two_letters.wait(), timeout=10)
    for letter in letters:
        h = letter.headers
        print(
            f"dead letter {orders.decode(letter.payload).id}: {h['Dead-Letter-Reason']} "
            f"after {h['Dead-Letter-Delivery-Count']} deliveries, "
            f"{h['Dead-Letter-Error-Type']}: {h['Dead-Letter-Error']}"
        )
    info = await js.stream_info("INVOICES")
    print(f"invoices stored: {info.state.messages}")
    first = await js.get_msg("INVOICES", 1)
    assert first.headers is not None
    print(
        f"first invoice id {first.headers['Nats-Msg-Id']}, "
        f"caused by {first.headers['X-Goflux-Causation-Id']}"
    )


async def main() -> None:
    # Show the retry decisions; the transport's per-failure tracebacks stay quiet here.
    logging.basicConfig(stream=sys.stdout, format="  [%(levelname)s] %(message)s")
    logging.getLogger("goflux.middleware").setLevel(logging.INFO)
    logging.getLogger("goflux.transports").setLevel(logging.CRITICAL)
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
