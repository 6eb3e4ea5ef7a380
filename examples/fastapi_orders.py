"""A FastAPI app that runs a goflux service: it takes orders over HTTP and fulfils them.

``POST /orders`` publishes the order to JetStream, de-duplicated by its
``Idempotency-Key`` header (the JetStream message ID: a client that retries a request
gets ``duplicate: true`` and the order is stored, and fulfilled, once). The same
process consumes the stream through the durable consumer ``fulfilment`` and marks
each order fulfilled; ``GET /orders/{id}`` tells ``pending`` or ``fulfilled``.

The goflux service runs in the app's lifespan (:class:`goflux.asgi.ServiceLifespan`):
the subscription is up before the first request is served, and on shutdown (SIGTERM)
it drains (running handlers finish and ack) before the connection is closed. Probes:
``/health/livez`` and ``/health/readyz`` (503 unless the subscription runs and the
connection is up).

Run, with a JetStream server (``goflux server``) at ``NATS_URL`` (default
nats://127.0.0.1:4222; ``FULFILMENT_WORK_MS`` simulates a slow warehouse, default 0)::

    NATS_URL=nats://127.0.0.1:4222 uvicorn examples.fastapi_orders:app

    curl -i -X POST localhost:8000/orders -H 'Idempotency-Key: k-1' \\
        -H 'content-type: application/json' -d '{"id": "o-1", "customer": "ada", "amount": 9.5}'
    curl localhost:8000/orders/o-1
    curl localhost:8000/health/readyz
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Annotated, Literal

import nats
from fastapi import Depends, FastAPI, Header, HTTPException
from pydantic import BaseModel

from goflux import Group, JsonCodec, Message
from goflux.asgi import ServiceLifespan, ServiceNotRunning
from goflux.transports import jetstream

SUBJECT = "orders.created"


class Order(BaseModel):
    id: str
    customer: str
    amount: float


class Accepted(BaseModel):
    id: str
    sequence: int
    duplicate: bool


class OrderState(BaseModel):
    id: str
    state: Literal["pending", "fulfilled"]


@dataclass
class Orders:
    """What the service hands to the HTTP handlers: the publisher and the order book."""

    publisher: jetstream.Publisher[Order]
    posted: set[str] = field(default_factory=set)
    fulfilled: dict[str, Order] = field(default_factory=dict)


async def service(group: Group) -> Orders:
    nc = group.own(await nats.connect(os.environ.get("NATS_URL", "nats://127.0.0.1:4222")))
    work = float(os.environ.get("FULFILMENT_WORK_MS", "0")) / 1000
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name="ORDERS", subjects=["orders.>"])
    await jetstream.ensure_consumer(
        js, stream="ORDERS", name="fulfilment", filter_subject=SUBJECT, max_deliver=5
    )
    codec = JsonCodec(Order)
    orders = Orders(publisher=group.own(jetstream.Publisher(js, codec)))

    async def fulfil(msg: Message[Order]) -> None:
        if work:
            await asyncio.sleep(work)  # the warehouse's call
        orders.fulfilled[msg.payload.id] = msg.payload  # returning acks the message

    subscriber = group.own(jetstream.Subscriber(js, codec, stream="ORDERS", consumer="fulfilment"))
    group.subscribe(subscriber, SUBJECT, fulfil)
    return orders


life = ServiceLifespan(service, drain_timeout=10)
app = FastAPI(title="orders", lifespan=life)
app.mount("/health", life.health)


def running_orders() -> Orders:
    """The service's resources, or 503 outside the app's lifespan."""
    try:
        return life.resources
    except ServiceNotRunning as exc:
        raise HTTPException(503, "the orders service is not running") from exc


OrdersDep = Annotated[Orders, Depends(running_orders)]


@app.post("/orders", status_code=202)
async def create_order(
    order: Order,
    orders: OrdersDep,
    idempotency_key: Annotated[str, Header(min_length=1, max_length=200)],
) -> Accepted:
    receipt = await orders.publisher.publish(SUBJECT, order, message_id=idempotency_key)
    if not receipt.duplicate:
        orders.posted.add(order.id)
    return Accepted(id=order.id, sequence=receipt.sequence, duplicate=receipt.duplicate)


@app.get("/orders/{order_id}")
async def get_order(order_id: str, orders: OrdersDep) -> OrderState:
    if order_id in orders.fulfilled:
        return OrderState(id=order_id, state="fulfilled")
    if order_id in orders.posted:
        return OrderState(id=order_id, state="pending")
    raise HTTPException(404, f"no order {order_id!r}")
