"""Durable, typed order processing on JetStream.

Provisions a stream and a durable consumer (idempotently), publishes orders with
message IDs (a retried publish is de-duplicated by the server), and consumes them
with auto-ack: a handler that fails once gets the order redelivered, and a payload
that cannot be decoded is terminated instead of looping forever.

With NATS_URL unset it starts an embedded nats-server (``goflux[server]``).

Run: python examples/jetstream_orders.py
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections import Counter

import nats
from pydantic import BaseModel

from goflux import JsonCodec, Message
from goflux.testing import NatsServer
from goflux.transports import jetstream


class Order(BaseModel):
    id: str
    customer: str
    amount: float


class OneLine(logging.Formatter):
    """Log lines without tracebacks: the demo's failures are expected ones."""

    def format(self, record: logging.LogRecord) -> str:
        record.exc_info = None
        record.exc_text = None
        return super().format(record)


async def main() -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(OneLine("  [goflux %(levelname)s] %(message)s"))
    logging.getLogger("goflux").addHandler(handler)
    logging.getLogger("goflux").setLevel(logging.INFO)
    async with contextlib.AsyncExitStack() as stack:
        url = (
            os.environ.get("NATS_URL")
            or (await stack.enter_async_context(NatsServer(jetstream=True))).url
        )
        nc = await nats.connect(url)
        stack.push_async_callback(nc.close)
        js = nc.jetstream()

        await jetstream.ensure_stream(js, name="ORDERS", subjects=["orders.>"], max_age=3600)
        await jetstream.ensure_consumer(
            js, stream="ORDERS", name="billing", filter_subject="orders.>", max_deliver=5
        )
        codec = JsonCodec(Order)
        publisher = jetstream.Publisher(js, codec)
        orders = [Order(id=f"o-{n}", customer=f"c-{n % 2}", amount=10.0 * n) for n in range(1, 6)]
        receipts = await publisher.publish_many(
            jetstream.Outgoing("orders.created", order, message_id=order.id) for order in orders
        )
        retry = await publisher.publish("orders.created", orders[0], message_id=orders[0].id)
        await nc.publish("orders.created", b"{not json")  # a foreign, broken message
        print(f"stored {len(receipts)} orders, seq {receipts[0].sequence}..{receipts[-1].sequence}")
        print(f"retried o-1: duplicate={retry.duplicate}, still seq {retry.sequence}")

        attempts: Counter[str] = Counter()
        billed: dict[str, float] = {}
        done = asyncio.Event()

        async def bill(msg: Message[Order]) -> None:
            attempts[msg.payload.id] += 1
            if msg.payload.id == "o-3" and attempts["o-3"] == 1:
                raise ConnectionError("payment service busy")  # nak: comes back at once
            billed[msg.payload.id] = msg.payload.amount
            assert msg.delivery is not None
            delivery = msg.delivery
            print(
                f"billed {msg.payload.id} for {msg.payload.customer}: {msg.payload.amount:.2f} "
                f"(stream seq {delivery.stream_sequence}, delivery {delivery.num_delivered})"
            )
            if len(billed) == len(orders):
                done.set()

        # confirm_acks: the server answers each ack once applied, so close() returns
        # only when every settlement is on the server (the counts below are final).
        subscriber = jetstream.Subscriber(
            js, codec, stream="ORDERS", consumer="billing", confirm_acks=True
        )
        subscription = await subscriber.start("orders.>", bill)
        await asyncio.wait_for(done.wait(), timeout=30)
        await subscriber.close()

        info = await js.consumer_info("ORDERS", "billing")
        print(
            f"handled {subscription.handled}, failed {subscription.failed}, "
            f"redelivered {subscription.redelivered}, undecodable {subscription.undecodable}; "
            f"server: {info.num_ack_pending} awaiting ack, {info.num_pending} pending"
        )


if __name__ == "__main__":
    asyncio.run(main())
