"""``ServiceLifespan.http``: a service's HTTP routes mounted in FastAPI, served by uvicorn.

Real parts: FastAPI, uvicorn on a loopback port, an httpx client. One test lets
uvicorn drive the lifespan (as in production); the others drive it themselves with
uvicorn's lifespan off, so the same server answers before, during and after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator

import httpx
import uvicorn
from fastapi import FastAPI

from goflux import Group, JsonCodec, Message, StrCodec
from goflux.asgi import ServiceLifespan
from goflux.service._http import HttpServer
from goflux.transports import channel
from goflux.transports import http as ghttp
from tests.helpers import Inbox
from tests.models import PRICE, QUOTE, Order, order, price

DEADLINE = 5.0
BODY = order().model_dump(by_alias=True, mode="json")


def orders_service(
    inbox: Inbox[Order], started: asyncio.Event | None = None, hold: asyncio.Event | None = None
) -> ServiceLifespan[str]:
    """A lifespan: an HTTP subscriber of ``orders.created`` and a pricing responder.

    The subscriber's handler sets ``started``, then waits for ``hold``.
    """

    async def service(group: Group) -> str:
        hooks = group.own(ghttp.Subscriber(JsonCodec(Order)))

        async def handle(msg: Message[Order]) -> None:
            if started is not None:
                started.set()
            if hold is not None:
                await hold.wait()
            await inbox(msg)

        group.subscribe(hooks, "orders.created", handle)
        group.respond(group.own(ghttp.Responder(QUOTE, PRICE)), "pricing.quote", price)
        return "orders"

    return ServiceLifespan(service, drain_timeout=DEADLINE)


def fastapi_app(life: ServiceLifespan[str]) -> FastAPI:
    app = FastAPI(lifespan=life)
    app.mount("/hooks", life.http)

    @app.get("/ping")
    async def ping() -> dict[str, str]:
        return {"service": life.resources}

    return app


class _Uvicorn(uvicorn.Server):
    """uvicorn without its signal handlers (the test process keeps its own)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def uvicorn_running(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """``app`` served by uvicorn, which runs its lifespan; a client once it serves.

    The socket listens before uvicorn starts: a request waits in the backlog until
    uvicorn serves, which it does only after the lifespan's startup.
    """
    sock = socket.create_server(("127.0.0.1", 0))
    server = _Uvicorn(uvicorn.Config(app, lifespan="on", log_config=None, access_log=False))
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as client:
            yield client
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, DEADLINE)
        sock.close()


async def test_fastapi_mounts_the_running_services_http_routes() -> None:
    inbox: Inbox[Order] = Inbox()
    life = orders_service(inbox)
    async with uvicorn_running(fastapi_app(life)) as http:
        created = await http.post(
            "/hooks/orders.created", json=BODY, headers={"X-Message-ID": "m-1"}
        )
        assert created.status_code == 204, created.text
        quoted = await http.post("/hooks/pricing.quote", json={"sku": "a", "quantity": 2})
        assert quoted.status_code == 200
        assert quoted.json() == {"sku": "a", "total": 5.0}
        assert (await http.post("/hooks/no.such")).status_code == 404
        assert (await http.get("/ping")).json() == {"service": "orders"}
    assert [(m.subject, m.id, m.payload) for m in inbox.messages] == [
        ("orders.created", "m-1", order())
    ]


@contextlib.asynccontextmanager
async def served(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """``app`` on uvicorn with its lifespan off: the test drives the lifespan."""
    async with HttpServer(app, "127.0.0.1", 0) as server:
        base = f"http://127.0.0.1:{server.port}"
        async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as client:
            yield client


def assert_refused(answer: httpx.Response, text: str) -> None:
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    assert answer.text == f"{text}\n"


async def test_503_outside_the_lifespan_and_to_new_requests_while_it_drains() -> None:
    inbox: Inbox[Order] = Inbox()
    started, hold = asyncio.Event(), asyncio.Event()
    life = orders_service(inbox, started, hold)
    name = "orders_service.<locals>.service"
    app = fastapi_app(life)
    async with served(app) as http:
        before = await http.post("/hooks/orders.created", json=BODY)
        assert_refused(before, f"{name} is not running")
        lifespan = life(app)
        await lifespan.__aenter__()  # the group has started
        stopping: asyncio.Task[bool | None] | None = None
        try:
            in_flight = asyncio.create_task(http.post("/hooks/orders.created", json=BODY))
            await asyncio.wait_for(started.wait(), DEADLINE)  # its handler runs
            stopping = asyncio.create_task(lifespan.__aexit__(None, None, None))
            group = life.group
            assert group is not None
            while not group.stopping:  # noqa: ASYNC110 - the shutdown's first step
                await asyncio.sleep(0)
            late = await http.post("/hooks/pricing.quote", json={"sku": "a", "quantity": 1})
            assert_refused(late, f"{name} is stopping")
            assert not in_flight.done()  # the drain waits for it
            hold.set()
            assert (await in_flight).status_code == 204
        finally:
            hold.set()
            await (stopping or lifespan.__aexit__(None, None, None))
        after = await http.post("/hooks/orders.created", json=BODY)
        assert_refused(after, f"{name} is not running")
    assert len(inbox.messages) == 1


async def test_404_on_every_path_when_the_service_has_no_http_routes() -> None:
    async def service(group: Group) -> str:
        bus: channel.Bus[str] = channel.Bus(codec=StrCodec())

        async def ignore(_: Message[str]) -> None:
            return None

        group.subscribe(channel.Subscriber(bus), "local", ignore)
        return "local"

    life = ServiceLifespan(service)
    app = FastAPI(lifespan=life)
    app.mount("/hooks", life.http)
    async with served(app) as http, life(app):
        missing = await http.post("/hooks/local", content=b"x")
        assert missing.status_code == 404
        assert missing.text == (
            "the service serves no HTTP routes: its group has no HTTP subscriber or responder\n"
        )


async def test_a_large_body_sent_outside_the_lifespan_gets_its_503_not_a_reset() -> None:
    life = orders_service(Inbox())
    async with served(fastapi_app(life)) as http:
        for size in (1 << 10, 8 << 20):  # 8 MiB: more than the socket buffers hold
            refused = await http.post("/hooks/orders.created", content=b"x" * size)
            assert refused.status_code == 503, size
            assert refused.headers["connection"] == "close"
