"""Builder values and template patterns go wherever a subject string goes, on every transport.

Real servers: a nats-server (with JetStream) and uvicorn for HTTP. Each transport
publishes to a :class:`goflux.SubjectEvent`, subscribes on ``.all()`` and on a
template's pattern with ``template.handler``, and reports the template as
``messaging.destination.template``.
"""

from __future__ import annotations

import asyncio
import enum
import uuid

import pydantic
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux import (
    InvalidSubject,
    Message,
    StrCodec,
    Subjects,
    SubjectTemplate,
)
from goflux.transports import channel, jetstream
from goflux.transports import http as ghttp
from goflux.transports import nats as gnats
from tests.conftest import STREAM, Otel
from tests.helpers import Inbox, drained
from tests.transports.http.conftest import serve

ORDERS = Subjects().domain("orders")  # the ORDERS stream captures orders.>
CREATED = ORDERS.entity("eu").event("created")  # orders.eu.created
SHOUT = Subjects("rpc").domain("text").entity("upper").event("shout")


class OrderKey(pydantic.BaseModel):
    region: str
    event: str


TEMPLATE = SubjectTemplate("orders.{region}.{event}", OrderKey)


class Keys:
    """A template handler's function: records the parameters it was handed."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, OrderKey]] = []
        self.arrived = asyncio.Event()

    async def __call__(self, message: Message[str], key: OrderKey) -> None:
        self.seen.append((message.payload, key))
        self.arrived.set()

    async def wait_for(self, count: int) -> None:
        async with asyncio.timeout(10):
            while len(self.seen) < count:
                self.arrived.clear()
                await self.arrived.wait()


def assert_template_reported(otel: Otel) -> None:
    span = otel.span("process orders.{region}.{event}")
    attrs = dict(span.attributes or {})
    assert attrs["messaging.destination.template"] == "orders.{region}.{event}"
    assert attrs["messaging.destination.name"] == "orders.eu.created"


async def test_channel(otel: Otel) -> None:
    bus: channel.Bus[str] = channel.Bus()
    every: Inbox[str] = Inbox()
    keys = Keys()
    sub = channel.Subscriber(bus, telemetry=otel.telemetry)
    async with channel.Publisher(bus) as pub:
        first = await sub.start(ORDERS.all(), every)
        second = await sub.start(TEMPLATE.pattern, TEMPLATE.handler(keys))
        assert second.subject == "orders.*.*"
        await pub.publish(CREATED, "one")
        await keys.wait_for(1)
        await every.wait_for(1)
        await first.stop()
        await second.stop()
    assert [m.subject for m in every.messages] == ["orders.eu.created"]
    assert keys.seen == [("one", OrderKey(region="eu", event="created"))]
    assert_template_reported(otel)


async def test_core_nats_publish_subscribe_and_request(nc: Client, otel: Otel) -> None:
    every: Inbox[str] = Inbox()
    keys = Keys()
    sub = gnats.Subscriber(nc, StrCodec(), telemetry=otel.telemetry)
    responder = gnats.Responder(nc, StrCodec(), StrCodec())

    async def shout(text: str) -> str:
        return text.upper()

    async with gnats.Publisher(nc, StrCodec()) as pub:
        first = await sub.start(ORDERS.entity("eu").all(), every)
        second = await sub.start(TEMPLATE.pattern, TEMPLATE.handler(keys))
        answering = await responder.start(SHOUT, shout)
        await pub.publish(CREATED, "one")
        await keys.wait_for(1)
        await every.wait_for(1)
        async with gnats.Requester(nc, StrCodec(), StrCodec()) as requester:
            assert await requester.request(SHOUT, "hi") == "HI"
        for subscription in (first, second, answering):
            await subscription.stop()
    assert [m.subject for m in every.messages] == ["orders.eu.created"]
    assert keys.seen == [("one", OrderKey(region="eu", event="created"))]
    assert_template_reported(otel)


async def test_jetstream_and_a_subject_off_the_template_is_terminated_not_redelivered(
    js: JetStreamContext, otel: Otel
) -> None:
    keys = Keys()
    sub = jetstream.Subscriber(js, StrCodec(), stream=STREAM, telemetry=otel.telemetry)
    # A wider subscription than the template: orders.eu.x.y is on it, but does not fit.
    off = Subjects("orders").domain("eu").entity("x").event("y")
    async with jetstream.Publisher(js, StrCodec()) as pub:
        subscription = await sub.start(ORDERS.all(), TEMPLATE.handler(keys))
        await pub.publish(off, "off")
        await pub.publish(CREATED, "one")
        await keys.wait_for(1)
        info = await drained(js, STREAM, subscription.consumer)
        await subscription.stop()
    assert keys.seen == [("one", OrderKey(region="eu", event="created"))]
    assert info.num_redelivered == 0  # terminated at once, never delivered again
    assert info.delivered is not None
    assert info.delivered.consumer_seq == 2
    wide = {
        s.attributes["messaging.destination.name"]: s.attributes
        for s in otel.spans()
        if s.name == "process orders.>" and s.attributes is not None
    }
    assert wide["orders.eu.x.y"]["error.type"] == "goflux.NonRetryable"
    assert "error.type" not in wide["orders.eu.created"]
    assert wide["orders.eu.created"]["messaging.destination.template"] == "orders.>"

    template_keys = Keys()
    templated = await sub.start(TEMPLATE.pattern, TEMPLATE.handler(template_keys))
    async with jetstream.Publisher(js, StrCodec()) as pub:
        await pub.publish(CREATED, "two")
    await template_keys.wait_for(2)  # the stream replays "one", then "two"
    await templated.stop()
    assert template_keys.seen[-1] == ("two", OrderKey(region="eu", event="created"))
    spans = [s for s in otel.spans() if s.name == "process orders.{region}.{event}"]
    assert spans
    assert (spans[0].attributes or {})["messaging.destination.template"] == (
        "orders.{region}.{event}"
    )


class Region(enum.Enum):
    EU = "eu"
    US = "us"


class StrictKey(pydantic.BaseModel):
    """Strict: an Enum member, a UUID and an int only from what JSON would hold."""

    model_config = pydantic.ConfigDict(strict=True, frozen=True)
    region: Region
    order_id: uuid.UUID
    line: int


STRICT = SubjectTemplate("orders.{region}.{order_id}.{line}", StrictKey)


async def test_jetstream_a_strict_model_and_a_plain_function_each_message_handled_once(
    js: JetStreamContext,
) -> None:
    # A strict model once made parse fail on every message (terminated, never handled);
    # a plain function once ran, then failed the handler (redelivered, run again).
    seen: list[StrictKey] = []
    arrived = asyncio.Event()

    def on_line(message: Message[str], key: StrictKey) -> None:
        seen.append(key)
        arrived.set()

    key = StrictKey(region=Region.US, order_id=uuid.uuid4(), line=-3)
    sub = jetstream.Subscriber(js, StrCodec(), stream=STREAM)
    async with jetstream.Publisher(js, StrCodec()) as pub:
        subscription = await sub.start(STRICT.pattern, STRICT.handler(on_line))
        await pub.publish(STRICT.format(key), "line")
        async with asyncio.timeout(10):
            await arrived.wait()
        async with asyncio.timeout(10):  # redelivered in a loop, it would never drain
            info = await drained(js, STREAM, subscription.consumer)
        await subscription.stop()
    assert seen == [key]
    assert info.num_redelivered == 0
    assert info.ack_floor is not None
    assert info.ack_floor.consumer_seq == 1  # acked, not terminated


async def test_http(otel: Otel) -> None:
    keys = Keys()
    payments = Subjects().domain("payments")
    every: Inbox[str] = Inbox()
    sub = ghttp.Subscriber(StrCodec(), base_path="/hooks", telemetry=otel.telemetry)
    await sub.start(TEMPLATE.pattern, TEMPLATE.handler(keys))
    await sub.start(payments.all(), every)
    responder = ghttp.Responder(StrCodec(), StrCodec(), base_path="/api")
    shout_subject = payments.entity("text").event("shout")

    async def shout(text: str) -> str:
        return text.upper()

    await responder.start(shout_subject, shout)
    async with (
        serve(sub.app) as url,
        serve(responder.app) as answers,
        ghttp.Publisher(url + "/hooks", StrCodec()) as pub,
        ghttp.Requester(answers + "/api", StrCodec(), StrCodec()) as requester,
    ):
        await pub.publish(CREATED, "one")
        await pub.publish(payments.entity("card").event("charged"), "two")
        assert await requester.request(shout_subject, "hi") == "HI"
    assert keys.seen == [("one", OrderKey(region="eu", event="created"))]
    assert [m.subject for m in every.messages] == ["payments.card.charged"]
    assert_template_reported(otel)


async def test_an_empty_prefix_is_refused_where_a_subject_is_needed(nc: Client) -> None:
    async with gnats.Publisher(nc, StrCodec()) as pub:
        with pytest.raises(InvalidSubject, match="must not be empty"):
            await pub.publish(Subjects(), "x")
