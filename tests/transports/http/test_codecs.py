"""Codecs and compression over HTTP: the body is the codec's bytes, never a content coding."""

from __future__ import annotations

import gzip

import httpx
from starlette.middleware.gzip import GZipMiddleware

from goflux import JsonCodec
from goflux.codecs import Gzip, pipe
from goflux.transports import http as ghttp
from tests.helpers import Inbox
from tests.models import Order, order
from tests.transports.http.conftest import Serve

GZIPPED = pipe(JsonCodec(Order), Gzip())
GZIP_MAGIC = b"\x1f\x8b"


async def bigger(value: Order) -> Order:
    return value.model_copy(update={"amount": value.amount + 1})


async def test_a_gzip_pipe_is_sent_and_answered_as_application_gzip_without_a_coding(
    served: Serve,
) -> None:
    router = ghttp.Router()
    inbox: Inbox[Order] = Inbox()
    subscriber = ghttp.Subscriber(GZIPPED, router=router)
    responder = ghttp.Responder(GZIPPED, GZIPPED, router=router)
    await subscriber.start("orders.in", inbox)
    await responder.start("orders.bigger", bigger)
    async with (
        served(router) as url,
        ghttp.Publisher(url, GZIPPED) as publisher,
        ghttp.Requester(url, GZIPPED, GZIPPED) as requester,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await publisher.publish("orders.in", order(1))
        # httpx undoes a Content-Encoding it is given: the codec would then get JSON
        assert await requester.request("orders.bigger", order(2)) == await bigger(order(2))
        raw = await client.post(
            "/orders.bigger",
            content=GZIPPED.encode(order(3)),
            headers={"content-type": "application/gzip", "accept-encoding": "gzip"},
        )
    [message] = inbox.messages
    assert message.payload == order(1)
    assert message.wire_headers["content-type"] == "application/gzip"
    assert "content-encoding" not in message.wire_headers
    assert message.data is not None
    assert message.data[:2] == GZIP_MAGIC
    assert raw.status_code == 200
    assert raw.headers["content-type"] == "application/gzip"
    assert "content-encoding" not in raw.headers
    assert raw.content[:2] == GZIP_MAGIC  # what httpx hands over: the codec's bytes
    assert GZIPPED.decode(raw.content) == await bigger(order(3))


async def test_a_proxy_that_compresses_the_reply_is_undone_once(served: Serve) -> None:
    # A gzip layer put on by the server's middleware is HTTP's: httpx removes it, and
    # only it; the codec then removes its own. (Starlette's middleware leaves
    # application/gzip alone by default; this one compresses whatever it sends.)
    responder = ghttp.Responder(GZIPPED, GZIPPED)
    await responder.start("orders.bigger", bigger)
    compressing = GZipMiddleware(responder.app, minimum_size=0, exclude_content_types=())
    async with (
        served(compressing) as url,
        ghttp.Requester(url, GZIPPED, GZIPPED) as requester,
        httpx.AsyncClient(base_url=url) as client,
    ):
        assert await requester.request("orders.bigger", order(1)) == await bigger(order(1))
        raw = await client.post("/orders.bigger", content=GZIPPED.encode(order(1)))
        async with client.stream(
            "POST", "/orders.bigger", content=GZIPPED.encode(order(1))
        ) as streamed:
            on_the_wire = b"".join([chunk async for chunk in streamed.aiter_raw()])
    assert raw.headers["content-encoding"] == "gzip"
    assert raw.content == GZIPPED.encode(await bigger(order(1)))
    assert gzip.decompress(gzip.decompress(on_the_wire)) == JsonCodec(Order).encode(
        await bigger(order(1))
    )


REFUSED = ("gzip", "br", "GZIP", "identity, gzip")


async def test_a_compressed_request_is_refused_415_naming_its_coding(served: Serve) -> None:
    router = ghttp.Router()
    inbox: Inbox[Order] = Inbox()
    subscriber = ghttp.Subscriber(JsonCodec(Order), router=router)
    responder = ghttp.Responder(GZIPPED, GZIPPED, router=router)
    subscription = await subscriber.start("orders.in", inbox)
    route = await responder.start("orders.bigger", bigger)
    body = gzip.compress(JsonCodec(Order).encode(order(1)))
    answers: list[tuple[str, httpx.Response]] = []
    async with served(router) as url, httpx.AsyncClient(base_url=url) as client:
        for coding in REFUSED:
            headers = {"content-type": "application/json", "content-encoding": coding}
            answers.append((coding, await client.post("/orders.in", content=body, headers=headers)))
            # the body a gzip pipe reads, but labelled as HTTP's coding: refused as well
            answers.append(
                (
                    coding,
                    await client.post(
                        "/orders.bigger", content=GZIPPED.encode(order(1)), headers=headers
                    ),
                )
            )
        long = await client.post(
            "/orders.in", content=body, headers={"content-encoding": "x" * 500}
        )
        for n, coding in enumerate(("identity", "Identity", "")):  # no coding at all
            plain = await client.post(
                "/orders.in",
                content=JsonCodec(Order).encode(order(n)),
                headers={"content-encoding": coding},
            )
            assert plain.status_code == 204, (coding, plain.text)
    for coding, answer in answers:
        assert answer.status_code == 415
        assert answer.text == (
            f"unsupported Content-Encoding {coding!r}: the body must be the codec's bytes "
            "as they are (identity); compress with the codec, not HTTP\n"
        )
        assert answer.headers["accept-encoding"] == "identity"  # RFC 7694
        assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    # the route goes on taking what comes after the 415s
    assert inbox.payloads == [order(0), order(1), order(2)]
    assert long.status_code == 415
    assert f"'{'x' * 63}…'" in long.text  # the coding shown, cut short
    assert (subscription.refused, subscription.undecodable) == (len(REFUSED) + 1, 0)
    assert (route.refused, route.answered) == (len(REFUSED), 0)
