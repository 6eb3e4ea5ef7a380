"""How the publisher and requester fail: deadlines, closed clients, redirects, large bodies."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.routing import Mount, Route

from goflux import JsonCodec, PublishError, RequestError, RequestTimeout, StrCodec
from goflux.service import _http as service_http
from goflux.transports import http as ghttp
from tests.helpers import Inbox, PeerPorts
from tests.models import Order, order
from tests.transports.http.conftest import Serve

CODEC = JsonCodec(Order)


@contextlib.asynccontextmanager
async def trickling_server() -> AsyncIterator[str]:
    """A server that answers 200 at once, then sends its body a byte every 0.2 s."""
    answering: set[asyncio.Task[None]] = set()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        answering.add(task)
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n")
            for _ in range(40):
                writer.write(b"x")
                await writer.drain()
                await asyncio.sleep(0.2)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for task in answering:
            task.cancel()
        await asyncio.gather(*answering, return_exceptions=True)
        await server.wait_closed()


@pytest.mark.slow  # 1 s timeouts
async def test_the_timeout_bounds_the_whole_call_not_each_read() -> None:
    async with trickling_server() as url:
        async with ghttp.Publisher(url, CODEC, timeout=1.0) as pub:
            began = time.monotonic()
            with pytest.raises(PublishError, match=r"within 1\.0s") as late:
                await pub.publish("orders.x", order())
            assert time.monotonic() - began < 3
        assert late.value.may_be_stored
        async with ghttp.Requester(url, StrCodec(), StrCodec(), timeout=1.0) as req:
            began = time.monotonic()
            with pytest.raises(RequestTimeout):
                await req.request("x", "y")
            assert time.monotonic() - began < 3


async def test_a_closed_client_is_a_permanent_publish_error() -> None:
    client = httpx.AsyncClient()
    await client.aclose()
    pub = ghttp.Publisher("http://127.0.0.1:9", CODEC, client=client)
    with pytest.raises(PublishError, match="client is closed") as closed:
        await pub.publish("orders.x", order())
    assert closed.value.permanent
    req = ghttp.Requester("http://127.0.0.1:9", StrCodec(), StrCodec(), client=client)
    with pytest.raises(RequestError, match="client is closed"):
        await req.request("x", "y")


async def test_redirects_are_followed_by_the_own_client_and_named_otherwise(
    served: Serve,
) -> None:
    inbox: Inbox[Order] = Inbox()
    sub = ghttp.Subscriber(CODEC)
    await sub.start("orders.x", inbox)

    async def moved(request: Request) -> RedirectResponse:
        return RedirectResponse(f"/new/{request.path_params['rest']}", status_code=307)

    app = Starlette(
        routes=[Route("/old/{rest:path}", moved, methods=["POST"]), Mount("/new", sub.app)]
    )
    async with served(app) as url:
        async with ghttp.Publisher(url + "/old", CODEC) as pub:
            await pub.publish("orders.x", order())
        async with httpx.AsyncClient() as plain:
            pub = ghttp.Publisher(url + "/old", CODEC, client=plain)
            with pytest.raises(ghttp.StatusError, match=r"307, a redirect to /new/orders.x") as r:
                await pub.publish("orders.x", order())
    assert r.value.permanent
    assert len(inbox.messages) == 1


@pytest.mark.slow  # a 20 MB body
async def test_a_body_far_too_large_says_so_when_the_connection_closes(served: Serve) -> None:
    sub = ghttp.Subscriber(CODEC, max_body_size=1024)
    await sub.start("orders.x", Inbox[Order]())
    big = Order(id="o", customerId="c", amount=1.0, lines=["x" * 1024] * (20 * 1024))
    async with served(sub.app) as url, ghttp.Publisher(url, CODEC) as pub:
        with pytest.raises(PublishError) as refused:
            await pub.publish("orders.x", big)
    # Either the 413 arrived, or the connection closed while sending: named as such.
    text = str(refused.value)
    assert "413" in text or "may refuse bodies this large" in text, text


@pytest.mark.slow  # idles 3 s
async def test_the_own_client_drops_an_idle_connection_before_a_servers_default_keep_alive(
    monkeypatch: pytest.MonkeyPatch, served: Serve
) -> None:
    """uvicorn, Node and hypercorn close a connection idle 5 s, and httpx's default
    client sent on one idle up to 5 s: a POST sent just as the server closed it failed
    (ReadError, maybe handled). The publisher's own client connects anew sooner."""
    monkeypatch.setattr(service_http, "KEEP_ALIVE_SECONDS", 5)  # uvicorn's default
    app = PeerPorts()
    async with served(app) as url:
        publisher = ghttp.Publisher(url, JsonCodec(Order))
        try:
            await publisher.publish("orders", order(1))
            await asyncio.sleep(3)  # the idle time under test, not a wait for readiness
            await publisher.publish("orders", order(2))
        finally:
            await publisher.close()
    assert len(app.ports) == 2
    assert app.ports[0] != app.ports[1], "a connection idle 3 s was sent on again"
