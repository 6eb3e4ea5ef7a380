"""Services the AsyncAPI tests describe (NATS_URL says where the server is)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import nats
from pydantic import BaseModel

from goflux import BytesCodec, Group, JsonCodec, Message, bind_publisher, bind_topic
from goflux.transports import channel, jetstream
from goflux.transports import nats as gnats


class Address(BaseModel):
    street: str
    city: str


class Line(BaseModel):
    sku: str
    quantity: int


class Order(BaseModel):
    id: str
    lines: list[Line]
    ship_to: Address
    bill_to: Address


class Shipment(BaseModel):
    order_id: str
    to: Address


class Receipt(BaseModel):
    order_id: str
    accepted: bool


async def ship(message: Message[Order]) -> None:
    """Ship an order to its address.

    More words that stay out of the description.
    """


async def audit(message: Message[bytes]) -> None:
    """Keep raw events for the audit log."""


async def accept(order: Order) -> Receipt:
    """Accept an order by request."""
    return Receipt(order_id=order.id, accepted=True)


async def everything(group: Group) -> None:
    """A service with every kind of endpoint."""
    nc = group.own(await nats.connect(os.environ["NATS_URL"]))
    js = nc.jetstream()
    started = os.environ.get("STARTED_FLAG")

    async def mark_started() -> None:
        if started:
            await asyncio.to_thread(Path(started).write_text, "started")
        await jetstream.ensure_stream(js, name="ORDERS", subjects=["orders.>"])

    group.on_start(mark_started)
    orders = group.own(jetstream.Subscriber(js, JsonCodec(Order), stream="ORDERS"))
    group.subscribe(orders, "orders.*.created", ship, headers={"Tenant": "Whose order it is."})
    raw = group.own(gnats.Subscriber(nc, BytesCodec(), queue="auditors"))
    group.subscribe(raw, "audit.>", audit)
    shipments = group.own(
        jetstream.Subscriber(js, JsonCodec(Shipment), stream="ORDERS", consumer="shipping")
    )
    group.process(shipments.stream("orders.shipped"), ship_handler, concurrency=2)
    responder = group.own(gnats.Responder(nc, JsonCodec(Order), JsonCodec(Receipt)))
    group.respond(responder, "orders.accept", accept)
    group.own(bind_publisher(jetstream.Publisher(js, JsonCodec(Shipment)), "orders.shipped"))
    group.own(
        bind_topic(
            gnats.Publisher(nc, JsonCodec(Receipt)),
            gnats.Subscriber(nc, JsonCodec(Receipt)),
            "receipts.issued",
        )
    )
    group.sends(
        group.own(gnats.Publisher(nc, JsonCodec(Order))),
        "orders.*.created",
        "orders.replayed",
        description="Orders re-sent by an operator.",
    )
    bus: channel.Bus[Order] = channel.Bus()
    group.subscribe(channel.Subscriber(bus), "in.process", ship)


async def ship_handler(message: Message[Shipment]) -> None:
    """Hand a shipment to the carrier."""


async def failing(group: Group) -> None:
    """A service whose function fails before it is filled."""
    raise RuntimeError("no configuration for the pricing table")


async def with_credentials(group: Group) -> None:
    """Connects with a user and password in its URL."""
    nc = group.own(await nats.connect(os.environ["NATS_URL"]))
    group.subscribe(group.own(gnats.Subscriber(nc, JsonCodec(Order))), "orders.new", ship)
