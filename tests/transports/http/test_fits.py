"""The HTTP transport with the rest of goflux: telemetry, Starlette/FastAPI, groups."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from starlette.applications import Starlette
from starlette.routing import Mount

from goflux import DecodeError, Group, JsonCodec, Message, chain_publishers
from goflux.middleware import DeadLetter, RetryPolicy, retry_ack, retry_publish
from goflux.transports import channel
from goflux.transports import http as ghttp
from tests.conftest import Otel
from tests.helpers import Inbox
from tests.models import PRICE, QUOTE, Order, Price, Quote, order
from tests.transports.http.conftest import Serve

CODEC = JsonCodec(Order)


async def test_the_handlers_span_is_a_child_of_the_senders(served: Serve, otel: Otel) -> None:
    seen: list[trace.SpanContext] = []

    async def handler(msg: Message[Order]) -> None:
        seen.append(trace.get_current_span().get_span_context())

    sub = ghttp.Subscriber(CODEC, telemetry=otel.telemetry)
    await sub.start("orders.traced", handler)
    async with (
        served(sub.app) as url,
        ghttp.Publisher(url, CODEC, telemetry=otel.telemetry) as pub,
    ):
        await pub.publish("orders.traced", order(), message_id="m-1")
        port = int(url.rsplit(":", 1)[1])
    producer = otel.span("send orders.traced")
    consumer = otel.span("process orders.traced")
    assert (producer.kind, consumer.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    assert producer.context is not None
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
    assert consumer.context.trace_id == producer.context.trace_id
    assert not consumer.links
    assert seen == [consumer.context]
    sent = dict(producer.attributes or {})
    assert sent["messaging.system"] == "http"
    assert sent["messaging.message.id"] == "m-1"
    assert sent["url.full"] == f"{url}/orders.traced"
    assert sent["http.request.method"] == "POST"
    assert sent["http.response.status_code"] == 204
    assert (sent["server.address"], sent["server.port"]) == ("127.0.0.1", port)
    processed = dict(consumer.attributes or {})
    assert processed["messaging.system"] == "http"
    assert processed["url.path"] == "/orders.traced"
    assert processed["http.response.status_code"] == 204
    assert processed["messaging.message.id"] == "m-1"
    metrics = otel.metrics()
    assert "messaging.client.sent.messages" in metrics
    assert "messaging.process.duration" in metrics


async def test_a_failure_marks_both_spans(served: Serve, otel: Otel) -> None:
    async def boom(msg: Message[Order]) -> None:
        raise RuntimeError("boom")

    sub = ghttp.Subscriber(CODEC, telemetry=otel.telemetry)
    await sub.start("orders.boom", boom)
    async with (
        served(sub.app) as url,
        ghttp.Publisher(url, CODEC, telemetry=otel.telemetry) as pub,
    ):
        with contextlib.suppress(ghttp.StatusError):
            await pub.publish("orders.boom", order())
    sent = dict(otel.span("send orders.boom").attributes or {})
    processed = dict(otel.span("process orders.boom").attributes or {})
    assert sent["error.type"] == "goflux.transports.http.StatusError"
    assert sent["http.response.status_code"] == 500
    assert processed["error.type"] == "RuntimeError"
    assert processed["http.response.status_code"] == 500


async def test_request_spans_are_client_and_server(served: Serve, otel: Otel) -> None:
    async def price(quote: Quote) -> Price:
        return Price(sku=quote.sku, total=1.0)

    responder = ghttp.Responder(QUOTE, PRICE, telemetry=otel.telemetry)
    await responder.start("pricing.quote", price)
    async with (
        served(responder.app) as url,
        ghttp.Requester(url, QUOTE, PRICE, telemetry=otel.telemetry) as requester,
    ):
        await requester.request("pricing.quote", Quote(sku="a", quantity=1))
    client = otel.span("send pricing.quote")
    server = otel.span("process pricing.quote")
    assert (client.kind, server.kind) == (SpanKind.CLIENT, SpanKind.SERVER)
    assert client.context is not None
    assert server.parent is not None
    assert server.parent.span_id == client.context.span_id
    assert dict(client.attributes or {})["goflux.reply.body.size"] == len(
        b'{"sku":"a","total":1.0}'
    )
    assert dict(server.attributes or {})["goflux.reply.body.size"] == len(
        b'{"sku":"a","total":1.0}'
    )


async def test_mounted_in_starlette_and_fastapi(served: Serve) -> None:
    inbox: Inbox[Order] = Inbox()
    sub = ghttp.Subscriber(CODEC)
    await sub.start("orders.created", inbox)
    fastapi = FastAPI()

    @fastapi.get("/ping")
    async def ping() -> dict[str, str]:
        return {"pong": "yes"}

    fastapi.mount("/hooks", sub.app)
    starlette = Starlette(routes=[Mount("/in", app=sub.app)])
    for app, prefix in ((fastapi, "/hooks"), (starlette, "/in")):
        async with served(app) as url, ghttp.Publisher(url + prefix, CODEC) as pub:
            await pub.publish("orders.created", order())
            async with httpx.AsyncClient(base_url=url) as client:
                missing = await client.post(f"{prefix}/orders.other", content=b"{}")
                assert missing.status_code == 404
                if app is fastapi:
                    assert (await client.get("/ping")).json() == {"pong": "yes"}
    assert len(inbox.messages) == 2
    assert {m.subject for m in inbox.messages} == {"orders.created"}


async def test_a_group_starts_and_drains_http_members(served: Serve) -> None:
    inbox: Inbox[Order] = Inbox()
    router = ghttp.Router()
    sub = ghttp.Subscriber(CODEC, router=router)
    responder = ghttp.Responder(QUOTE, PRICE, router=router)

    async def price(quote: Quote) -> Price:
        return Price(sku=quote.sku, total=3.0)

    group = Group(signals=())
    group.subscribe(sub, "orders.created", inbox)
    group.respond(responder, "pricing.quote", price)
    async with served(router) as url, httpx.AsyncClient(base_url=url) as client:
        before = await client.post("/orders.created", content=b"{}")
        assert before.status_code == 404  # not started yet
        async with group:
            assert group.readiness().ready
            async with (
                ghttp.Publisher(url, CODEC) as pub,
                ghttp.Requester(url, QUOTE, PRICE) as req,
            ):
                await pub.publish("orders.created", order())
                assert (await req.request("pricing.quote", Quote(sku="a", quantity=1))).total == 3
        after = await client.post("/orders.created", content=b"{}")
        assert after.status_code == 503
    assert len(inbox.messages) == 1


@pytest.mark.slow  # Retry-After: 1
async def test_retry_ack_asks_the_sender_to_retry_and_gives_up_with_a_422(served: Serve) -> None:
    attempts: list[str] = []
    dead: Inbox[bytes] = Inbox()

    async def flaky(msg: Message[Order]) -> None:
        attempts.append(msg.payload.id)
        if msg.payload.id == "o-1" and attempts.count("o-1") < 3:
            raise RuntimeError("not yet")
        if msg.payload.id == "o-2":
            raise DecodeError("secret detail", type_name="Order", size=1)

    dead_letters = channel.Bus[bytes]()
    await channel.Subscriber(dead_letters).start("orders.dlq", dead)
    policy = RetryPolicy(
        backoff=[1.0], dead_letter=DeadLetter(channel.Publisher(dead_letters), "orders.dlq")
    )
    sub = ghttp.Subscriber(CODEC)
    await sub.start("orders.flaky", retry_ack(policy)(flaky))
    async with served(sub.app) as url, ghttp.Publisher(url, CODEC) as inner:
        with pytest.raises(ghttp.StatusError) as retry:
            await inner.publish("orders.flaky", order(1))
        assert (retry.value.status, retry.value.retry_after) == (503, 1.0)
        pub = chain_publishers(retry_publish(attempts=3, backoff=[0.01]))(inner)
        await asyncio.wait_for(pub.publish("orders.flaky", order(1)), 10)  # 2 more attempts
        with pytest.raises(ghttp.StatusError) as given_up:
            await pub.publish("orders.flaky", order(2))
    assert attempts == ["o-1", "o-1", "o-1", "o-2"]
    assert (given_up.value.status, given_up.value.permanent) == (422, True)
    assert given_up.value.detail == "not processable (undecodable)"  # not its text
    [letter] = await dead.wait_for(1)
    assert letter.payload == order(2).model_dump_json(by_alias=True).encode()  # as received
    assert letter.headers["Dead-Letter-Reason"] == "undecodable"


@pytest.mark.slow  # Retry-After: 1
async def test_retry_publish_waits_as_long_as_retry_after_asks(served: Serve) -> None:
    answers: list[float] = []

    async def busy_once(msg: Message[Order]) -> None:
        answers.append(asyncio.get_running_loop().time())
        if len(answers) == 1:
            await msg.nak(1)  # 503, Retry-After: 1
        elif msg.payload.id == "o-2":
            await msg.nak(3600)  # longer than a publish waits

    sub = ghttp.Subscriber(CODEC)
    await sub.start("orders.busy", busy_once)
    async with served(sub.app) as url:
        inner = ghttp.Publisher(url, CODEC)
        pub = chain_publishers(retry_publish(attempts=3, backoff=[0.01]))(inner)
        await pub.publish("orders.busy", order(1))
        with pytest.raises(ghttp.StatusError) as too_long:
            await pub.publish("orders.busy", order(2))
        await inner.close()
    assert answers[1] - answers[0] >= 1.0
    assert too_long.value.retry_after == 3600
    assert len(answers) == 3  # the 3600 s one was not tried again


async def test_a_group_refuses_micro_options_for_an_http_responder() -> None:
    async def price(quote: Quote) -> Price:
        return Price(sku=quote.sku, total=3.0)

    group = Group(signals=())
    group.respond(ghttp.Responder(QUOTE, PRICE), "pricing.quote", price, endpoint="quote")
    with pytest.raises(ValueError, match="NATS micro service endpoints"):
        await group.start()
