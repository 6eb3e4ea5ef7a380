"""The server process of the ``http`` suite: three ASGI apps, uvicorn, one event loop.

``python -m bench.http_server`` serves, each with uvicorn on a loopback port of its own,
the same two routes written three ways:

- ``goflux``: a :class:`~goflux.transports.http.Subscriber` (``orders.created``) and a
  :class:`~goflux.transports.http.Responder` (``pricing.quote``) sharing one router;
- ``starlette``: the same work written by hand, Starlette ``Route`` endpoints that read
  the body, decode it with the pydantic ``TypeAdapter`` (400 if it does not decode),
  and answer 204, or 200 with the encoded reply;
- ``fastapi``: plain FastAPI endpoints taking the pydantic model as their body.

``POST /orders.created`` takes an :class:`~bench.payload.Order` and counts it in its
app's counter; ``POST /pricing.quote`` answers with the order it got. Once every socket
listens, the process prints ``{"ports": {app: port}}``; then each ``count`` line on
stdin is answered with ``{app: orders handled}``; it exits when stdin closes.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from contextlib import AsyncExitStack

from fastapi import FastAPI
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from bench.payload import ADAPTER, Order
from goflux import JsonCodec, Message
from goflux.service._health import ASGIApp
from goflux.service._http import HttpServer
from goflux.transports import http as ghttp

SUBJECT = "orders.created"
REQUEST_SUBJECT = "pricing.quote"
APPS = ("goflux", "starlette", "fastapi")

handled: Counter[str] = Counter()


async def goflux_app() -> ASGIApp:
    router = ghttp.Router()
    codec = JsonCodec(Order)

    async def handle(msg: Message[Order]) -> None:
        handled["goflux"] += 1

    async def answer(order: Order) -> Order:
        return order

    await ghttp.Subscriber(codec, router=router).start(SUBJECT, handle)
    await ghttp.Responder(codec, codec, router=router).start(REQUEST_SUBJECT, answer)
    return router


def starlette_app() -> ASGIApp:
    async def created(request: Request) -> Response:
        try:
            ADAPTER.validate_json(await request.body())
        except ValidationError as exc:
            return PlainTextResponse(f"bad request: {exc}", 400)
        handled["starlette"] += 1
        return Response(status_code=204)

    async def quote(request: Request) -> Response:
        try:
            order = ADAPTER.validate_json(await request.body())
        except ValidationError as exc:
            return PlainTextResponse(f"bad request: {exc}", 400)
        return Response(ADAPTER.dump_json(order), media_type="application/json")

    return Starlette(
        routes=[
            Route(f"/{SUBJECT}", created, methods=["POST"]),
            Route(f"/{REQUEST_SUBJECT}", quote, methods=["POST"]),
        ]
    )


def fastapi_app() -> ASGIApp:
    app = FastAPI()

    @app.post(f"/{SUBJECT}", status_code=204)
    async def created(order: Order) -> None:
        handled["fastapi"] += 1

    @app.post(f"/{REQUEST_SUBJECT}")
    async def quote(order: Order) -> Order:
        return order

    return app


async def main() -> None:
    apps = {"goflux": await goflux_app(), "starlette": starlette_app(), "fastapi": fastapi_app()}
    loop = asyncio.get_running_loop()
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    async with AsyncExitStack() as stack:
        ports = {}
        for name, app in apps.items():
            server = await stack.enter_async_context(HttpServer(app, "127.0.0.1", 0))
            ports[name] = server.port
        print(json.dumps({"ports": ports}), flush=True)
        while line := await commands.readline():
            if line.strip() == b"count":
                print(json.dumps({name: handled[name] for name in APPS}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
