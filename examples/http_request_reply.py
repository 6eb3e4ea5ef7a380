"""Quotes over HTTP request/reply, a goflux service like any other.

- ``service(group)`` fills a :class:`~goflux.Group` with a ``ghttp.Responder`` on
  ``pricing.quote``, served at ``POST /rpc/pricing.quote``: 200 with the priced quote,
  the status of a ``ServiceError`` the handler raises (404 for an unknown SKU, 409
  for one out of stock), 400 for a request that does not decode, 500 if the handler
  crashes. It returns the ASGI app serving the group's routes.
- ``main()`` starts the group, serves the app with uvicorn, and asks for quotes with
  a ``ghttp.Requester``: replies come back typed, error answers as ``RemoteError``
  with the status as ``code``.

Run: python examples/http_request_reply.py
Describe: goflux asyncapi examples.http_request_reply:service (AsyncAPI's HTTP bindings)
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import httpx
import uvicorn
from pydantic import BaseModel, Field
from starlette.types import ASGIApp

from goflux import Group, JsonCodec, RemoteError, ServiceError
from goflux.transports import http as ghttp


class Line(BaseModel):
    sku: str
    quantity: int = Field(gt=0)


class QuoteRequest(BaseModel):
    customer: str
    lines: list[Line]


class Quote(BaseModel):
    customer: str
    total: float


PRICES = {"apple": 0.5, "pear": 0.75}
OUT_OF_STOCK = {"pear"}


async def quote(request: QuoteRequest) -> Quote:
    """Price every line of a quote request."""
    total = 0.0
    for line in request.lines:
        if line.sku not in PRICES:
            raise ServiceError(404, f"no price for {line.sku!r}")
        if line.sku in OUT_OF_STOCK:
            raise ServiceError(409, f"{line.sku!r} is out of stock")
        total += PRICES[line.sku] * line.quantity
    return Quote(customer=request.customer, total=total)


async def service(group: Group) -> ghttp.Router:
    """Quotes prices over HTTP; returns the app serving its routes."""
    group.describe(title="pricing over HTTP", version="1.0.0")
    pricing = group.own(
        ghttp.Responder(JsonCodec(QuoteRequest), JsonCodec(Quote), base_path="/rpc")
    )
    group.respond(pricing, "pricing.quote", quote)
    return pricing.app


@contextlib.asynccontextmanager
async def serve(app: ASGIApp) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port; yield its URL."""
    sock = socket.create_server(("127.0.0.1", 0))  # listening: requests queue from here on
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task


async def main() -> None:
    group = Group()
    app = await service(group)
    async with group, serve(app) as url:
        codecs = JsonCodec(QuoteRequest), JsonCodec(Quote)
        async with ghttp.Requester(f"{url}/rpc", *codecs, timeout=5) as requester:
            for skus in (["apple"], ["apple", "kiwi"], ["pear"]):
                request = QuoteRequest(
                    customer="ada", lines=[Line(sku=sku, quantity=4) for sku in skus]
                )
                try:
                    reply = await requester.request("pricing.quote", request)
                except RemoteError as exc:
                    print(f"{'+'.join(skus)}: remote error {exc.code}: {exc.remote_message}")
                else:
                    print(f"{'+'.join(skus)}: {reply.customer} pays {reply.total:.2f}")
        # What a client of another language may send: a body that does not decode.
        async with httpx.AsyncClient(base_url=url) as client:
            answer = await client.post("/rpc/pricing.quote", json={"customer": "ada"})
            print(f"undecodable: {answer.status_code} {answer.text.split(':')[0]}")
            answer = await client.get("/rpc/pricing.quote")
            print(f"GET: {answer.status_code}, allow {answer.headers['allow']}")


if __name__ == "__main__":
    asyncio.run(main())
