"""Services the AsyncAPI tests describe (NATS_URL says where the server is)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated, Literal

import nats
from pydantic import AfterValidator, BaseModel, Field
from pydantic_core import CoreSchema, core_schema

from goflux import (
    BytesCodec,
    Group,
    JsonCodec,
    Message,
    StrCodec,
    SubjectTemplate,
    bind_publisher,
    bind_topic,
)
from goflux.codecs import CsvCodec, Gzip, MsgpackCodec, YamlCodec, Zstd, pipe
from goflux.transports import channel, jetstream
from goflux.transports import http as ghttp
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


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = 9


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool = True


class Pet(BaseModel):
    animal: Cat | Dog = Field(discriminator="kind")


class Limits(BaseModel):
    ceiling: float = float("inf")
    floor: float = float("-inf")


class GofluxHeaders(BaseModel):  # the name of goflux's own header schema, once
    tenant: str


class Opaque:
    """A type with validators and a serializer but no JSON Schema."""

    def __init__(self, text: str) -> None:
        self.text = text

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: object) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(
            lambda value: value if isinstance(value, cls) else cls(str(value)),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda v: v.text),
        )


class Wrapped(BaseModel):
    inner: Opaque


def has_id(order: Order) -> Order:
    return order


async def awkward(group: Group) -> None:
    """Payload types that need care: unions, validators, infinities, clashing names."""
    nc = group.own(await nats.connect(os.environ["NATS_URL"]))
    pets = group.own(gnats.Subscriber(nc, JsonCodec(Pet)))
    group.subscribe(pets, "pets.new", audit)
    validated = JsonCodec(Annotated[Order, AfterValidator(has_id)])
    group.subscribe(group.own(gnats.Subscriber(nc, validated)), "orders.checked", audit)
    group.subscribe(group.own(gnats.Subscriber(nc, JsonCodec(Limits))), "limits.set", audit)
    clash = JsonCodec(GofluxHeaders)
    group.subscribe(group.own(gnats.Subscriber(nc, clash)), "tenants.new", audit)
    group.subscribe(group.own(gnats.Subscriber(nc, JsonCodec(Wrapped))), "opaque.x", audit)
    micro = group.own(gnats.MicroService(nc, name="awkward", version="1.0.0"))
    responder = group.own(gnats.Responder(nc, JsonCodec(Pet), JsonCodec(Pet), service=micro))
    group.respond(responder, "pets.adopt", adopt)


async def adopt(pet: Pet) -> Pet:
    """Adopt a pet."""
    return pet


async def note(message: Message[str]) -> None:
    """Keep a note someone posted."""


async def accept_in_words(order: Order) -> str:
    """Accept an order by request; the answer is text."""
    return f"accepted {order.id}"


async def over_http(group: Group) -> None:
    """A service on HTTP: webhooks taken in, requests answered, endpoints posted to."""
    hooks = group.own(ghttp.Subscriber(JsonCodec(Order), base_path="/hooks", max_body_size=4096))
    group.subscribe(hooks, "orders.*.created", ship, headers={"Tenant": "Whose order it is."})
    notes = group.own(ghttp.Subscriber(StrCodec(), base_path="/hooks"))
    group.subscribe(notes, "notes.>", note)
    answers = group.own(ghttp.Responder(JsonCodec(Order), StrCodec()))
    group.respond(answers, "orders.accept", accept_in_words)
    partner = "https://bob:s3cret-pass@partner.example.org:8443/in/"
    group.sends(group.own(ghttp.Publisher(partner, BytesCodec())), "audit.raw")
    receipts = ghttp.Requester("http://receipts.internal", JsonCodec(Order), JsonCodec(Receipt))
    group.sends(group.own(receipts), "receipts.issue")


async def nats_and_http(group: Group) -> None:
    """The same subject taken in from NATS and over HTTP."""
    nc = group.own(await nats.connect(os.environ["NATS_URL"]))
    group.subscribe(group.own(gnats.Subscriber(nc, JsonCodec(Order))), "orders.new", ship)
    group.subscribe(group.own(ghttp.Subscriber(JsonCodec(Order))), "orders.new", ship)


async def take_lines(message: Message[list[Line]]) -> None:
    """Take order lines in bulk."""


async def in_other_formats(group: Group) -> None:
    """Payloads in MessagePack, YAML, CSV, and compressed JSON and MessagePack."""
    packed = group.own(ghttp.Subscriber(MsgpackCodec(Order), base_path="/in"))
    group.subscribe(packed, "orders.packed", ship)
    rows = group.own(ghttp.Subscriber(CsvCodec(Line), base_path="/in"))
    group.subscribe(rows, "lines.csv", take_lines)
    compressed = pipe(JsonCodec(Order), Gzip())
    answers = group.own(ghttp.Responder(compressed, pipe(MsgpackCodec(Receipt), Zstd())))
    group.respond(answers, "orders.accept", accept)
    partner = group.own(ghttp.Publisher("http://partner.internal", YamlCodec(Shipment)))
    group.sends(partner, "shipments.sent")
    group.sends(group.own(ghttp.Publisher("http://archive.internal", compressed)), "orders.kept")


class Key(BaseModel):
    region: Literal["eu", "us"] = Field(description="Where the order was placed.")
    order_id: str = Field(examples=["o-1"], min_length=2)


SHIPPED = SubjectTemplate("shipments.{region}.{order_id}.shipped", Key)


async def on_shipped(message: Message[Shipment], key: Key) -> None:
    """Note that an order was shipped."""


async def templated(group: Group) -> None:
    """A service that receives and sends on a subject template."""
    nc = group.own(await nats.connect(os.environ["NATS_URL"]))
    # the same pattern without the template first: the channel takes the template's
    raw = group.own(gnats.Subscriber(nc, BytesCodec()))
    group.subscribe(raw, "shipments.*.*.shipped", audit)
    shipments = group.own(gnats.Subscriber(nc, JsonCodec(Shipment)))
    group.subscribe(shipments, SHIPPED.pattern, SHIPPED.handler(on_shipped))
    group.sends(group.own(gnats.Publisher(nc, JsonCodec(Shipment))), SHIPPED.pattern)


class CustomerKey(BaseModel):
    customer: int
    order_id: str


# A second template with SHIPPED's pattern (shipments.*.*.shipped): its own channel.
BY_CUSTOMER = SubjectTemplate("shipments.{customer}.{order_id}.shipped", CustomerKey)


async def on_shipped_to(message: Message[Shipment], key: CustomerKey) -> None:
    """Note that a customer's order was shipped."""


async def twin_templates(group: Group) -> None:
    """Two templates with the same pattern, and a plain subscription on it."""
    nc = group.own(await nats.connect(os.environ["NATS_URL"]))
    shipments = group.own(gnats.Subscriber(nc, JsonCodec(Shipment)))
    group.subscribe(shipments, SHIPPED.pattern, SHIPPED.handler(on_shipped))
    group.subscribe(shipments, BY_CUSTOMER.pattern, BY_CUSTOMER.handler(on_shipped_to))
    raw = group.own(gnats.Subscriber(nc, BytesCodec()))
    group.subscribe(raw, "shipments.*.*.shipped", audit)  # which template? neither
