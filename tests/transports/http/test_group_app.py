"""``ghttp.app_of(group)``: one ASGI app serving the HTTP routes of a group's members."""

from __future__ import annotations

import httpx
import pytest

from goflux import Group, JsonCodec, StrCodec, SubscribeError, bind_subscriber
from goflux.transports import channel
from goflux.transports import http as ghttp
from tests.helpers import Inbox
from tests.models import PRICE, QUOTE, Order, order, price
from tests.transports.http.conftest import Serve

CODEC = JsonCodec(Order)


async def test_one_app_serves_the_routes_of_every_http_member(served: Serve) -> None:
    created: Inbox[Order] = Inbox()
    streamed: Inbox[Order] = Inbox()
    shared = ghttp.Router()
    hooks = ghttp.Subscriber(CODEC, router=shared)
    pricing = ghttp.Responder(QUOTE, PRICE, router=shared)
    audit = ghttp.Subscriber(CODEC, base_path="/audit")  # a router of its own
    bound = bind_subscriber(ghttp.Subscriber(CODEC, base_path="/bound"), "orders.>")
    bus: channel.Bus[str] = channel.Bus(codec=StrCodec())

    async def ignore(_: object) -> None:
        return None

    group = Group(signals=())
    group.subscribe(hooks, "orders.created", created)
    group.respond(pricing, "pricing.quote", price)
    group.process(audit.stream("orders.*"), streamed)
    group.process(bound.stream(), ignore)
    group.subscribe(channel.Subscriber(bus), "local", ignore)  # not HTTP: not served
    app = ghttp.app_of(group)
    assert app is not None
    body = order().model_dump(by_alias=True, mode="json")
    async with served(app) as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.post("/orders.created", json=body)).status_code == 404  # not started
        async with group:
            assert (await http.post("/orders.created", json=body)).status_code == 204
            assert (await http.post("/audit/orders.paid", json=body)).status_code == 204
            assert (await http.post("/bound/orders.x.y", json=body)).status_code == 204
            reply = await http.post("/pricing.quote", json={"sku": "a", "quantity": 2})
            assert reply.status_code == 200
            assert reply.json() == {"sku": "a", "total": 5.0}
            assert (await http.post("/local", content=b"x")).status_code == 404
            await streamed.wait_for(1)
        assert (await http.post("/orders.created", json=body)).status_code == 503
    assert [m.subject for m in created.messages] == ["orders.created"]
    assert [m.subject for m in streamed.messages] == ["orders.paid"]
    paths = sorted(f"{r.base_path}/{r.subject}" for r in app.routes)
    assert paths == ["/audit/orders.*", "/bound/orders.>", "/orders.created", "/pricing.quote"]


def test_one_router_is_the_app_itself_and_none_without_http_members() -> None:
    router = ghttp.Router()
    group = Group(signals=())
    group.subscribe(ghttp.Subscriber(CODEC, router=router), "a", Inbox[Order]())
    group.respond(ghttp.Responder(QUOTE, PRICE, router=router), "b", price)
    assert ghttp.app_of(group) is router
    bus: channel.Bus[str] = channel.Bus(codec=StrCodec())
    other = Group(signals=())
    other.subscribe(channel.Subscriber(bus), "local", Inbox[str]())
    assert ghttp.app_of(other) is None
    assert ghttp.app_of(Group(signals=())) is None


def test_two_routers_serving_one_path_are_refused() -> None:
    group = Group(signals=())
    group.subscribe(ghttp.Subscriber(CODEC), "orders.created", Inbox[Order]())
    group.respond(ghttp.Responder(QUOTE, PRICE), "orders.created", price)
    with pytest.raises(SubscribeError) as caught:
        ghttp.app_of(group)
    assert str(caught.value) == (
        "cannot serve responder on 'orders.created' at POST /orders.created: subscription "
        "to 'orders.created' serves it on another router (give both the same router=, or "
        "another base_path)"
    )
    apart = Group(signals=())  # the same subject under another base path is another path
    apart.subscribe(ghttp.Subscriber(CODEC), "orders.created", Inbox[Order]())
    apart.respond(ghttp.Responder(QUOTE, PRICE, base_path="/rpc"), "orders.created", price)
    assert ghttp.app_of(apart) is not None
