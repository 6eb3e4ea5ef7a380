"""Typed orders on JetStream as gzip-compressed MessagePack, as a Go goflux service sends them.

The codec is ``pipe(MsgpackCodec(Order), Gzip())``: a ``Codec[Order]`` that writes
MessagePack (a map keyed by field name, what Go's msgpack libraries write for a
struct) and gzips it, and on the way back gunzips (within a bound: 64 MiB by default)
and validates. A publisher stores the orders with it, a typed subscriber reads them
back with the same codec, and the example prints what it read and how many bytes
the payloads took against JSON.

With NATS_URL unset it starts an embedded nats-server (``goflux[server]``); the codecs
need ``goflux[msgpack]`` (``goflux[codecs]`` has every codec).

Run: python examples/jetstream_msgpack_gzip.py
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from datetime import UTC, datetime, timedelta

import nats
from pydantic import BaseModel, Field

from goflux import JsonCodec, Message
from goflux.codecs import Gzip, MsgpackCodec, pipe
from goflux.testing import NatsServer
from goflux.transports import jetstream


class Line(BaseModel):
    sku: str
    qty: int
    price: float


class Order(BaseModel):
    id: str
    customer_id: str = Field(alias="customerId")  # the Go struct's msgpack:"customerId"
    lines: list[Line]
    placed: datetime  # MessagePack's timestamp extension: Go reads it into time.Time
    note: str = ""


def orders() -> list[Order]:
    start = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
    return [
        Order(
            id=f"o-{n}",
            customerId=f"c-{n % 3}",
            lines=[Line(sku=f"sku-{n}-{k}", qty=k % 3 + 1, price=1.25 * n + k) for k in range(20)],
            placed=start + timedelta(minutes=n),
            note="leave at the door" if n % 2 else "",
        )
        for n in range(1, 6)
    ]


async def main() -> None:
    codec = pipe(MsgpackCodec(Order), Gzip())  # a Codec[Order]
    async with contextlib.AsyncExitStack() as stack:
        url = (
            os.environ.get("NATS_URL")
            or (await stack.enter_async_context(NatsServer(jetstream=True))).url
        )
        nc = await nats.connect(url)
        stack.push_async_callback(nc.close)
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name="PACKED", subjects=["packed.>"], max_age=3600)
        await js.purge_stream("PACKED")  # a run on a given server starts afresh

        sent = orders()
        publisher = jetstream.Publisher(js, codec)
        receipts = await publisher.publish_many(
            jetstream.Outgoing("packed.orders", order, message_id=order.id) for order in sent
        )
        print(f"stored {len(receipts)} orders as {codec!r} ({codec.content_type})")

        received: list[Order] = []
        done = asyncio.Event()

        async def handle(msg: Message[Order]) -> None:
            order = msg.payload  # an Order: gunzipped, unpacked and validated
            total = sum(line.qty * line.price for line in order.lines)
            print(
                f"read {order.id} for {order.customer_id}: {len(order.lines)} lines, "
                f"{total:.2f}, placed {order.placed:%H:%M} UTC"
            )
            received.append(order)
            if len(received) == len(sent):
                done.set()

        async with jetstream.Subscriber(js, codec, stream="PACKED") as subscriber:
            await subscriber.start("packed.orders", handle)
            await asyncio.wait_for(done.wait(), timeout=30)

        print(f"read back {len(received)} orders, equal to those sent: {received == sent}")
        as_json = sum(len(JsonCodec(Order).encode(order)) for order in sent)
        as_msgpack = sum(len(MsgpackCodec(Order).encode(order)) for order in sent)
        packed = sum(len(codec.encode(order)) for order in sent)
        print(
            f"payload bytes: JSON {as_json}, MessagePack {as_msgpack}, "
            f"MessagePack + gzip {packed} ({1 - packed / as_json:.0%} saved vs JSON)"
        )


if __name__ == "__main__":
    asyncio.run(main())
