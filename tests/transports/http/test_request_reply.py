"""HTTP request/reply and the publisher's failures, against real servers and sockets."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httpx
import pytest

from goflux import (
    DecodeError,
    JsonCodec,
    PublishError,
    RemoteError,
    RequestError,
    RequestTimeout,
    ServiceError,
    StrCodec,
)
from goflux.transports import http as ghttp
from tests.models import PRICE, QUOTE, Order, Price, Quote, order
from tests.transports.http.conftest import Serve


async def price(quote: Quote) -> Price:
    if quote.sku == "missing":
        raise ServiceError(404, "no such sku: missing")
    if quote.sku == "broken":
        raise RuntimeError("database password is hunter2")
    return Price(sku=quote.sku, total=2.5 * quote.quantity)


async def test_a_request_gets_the_typed_reply_and_errors_keep_their_code(served: Serve) -> None:
    responder = ghttp.Responder(QUOTE, PRICE, base_path="/api")
    route = await responder.start("pricing.quote", price)
    async with (
        served(responder.app) as url,
        ghttp.Requester(url + "/api", QUOTE, PRICE) as requester,
        httpx.AsyncClient(base_url=url) as client,
    ):
        reply = await requester.request("pricing.quote", Quote(sku="a", quantity=4))
        assert reply == Price(sku="a", total=10.0)

        with pytest.raises(RemoteError) as missing:
            await requester.request("pricing.quote", Quote(sku="missing", quantity=1))
        assert (missing.value.code, missing.value.remote_message) == (404, "no such sku: missing")

        with pytest.raises(RemoteError) as broken:
            await requester.request("pricing.quote", Quote(sku="broken", quantity=1))
        assert (broken.value.code, broken.value.remote_message) == (500, "internal server error")
        assert "hunter2" not in str(broken.value)  # the exception is logged, never sent

        with pytest.raises(RemoteError) as unknown:
            await requester.request("pricing.unknown", Quote(sku="a", quantity=1))
        assert unknown.value.code == 404

        raw = await client.post(
            "/api/pricing.quote", json={"sku": "b", "quantity": 2}, headers={"X-Message-ID": "r-1"}
        )
        assert raw.status_code == 200
        assert raw.headers["content-type"] == "application/json"
        assert raw.headers["x-message-id"] == "r-1"
        assert raw.json() == {"sku": "b", "total": 5.0}
        bad = await client.post("/api/pricing.quote", content=b"{")
        assert bad.status_code == 400
        assert bad.text.startswith("bad request: ")
        assert (await client.get("/api/pricing.quote")).status_code == 405
        too_large = await client.post("/api/pricing.quote", content=b" " * ((2 << 20) + 1))
        assert too_large.status_code == 413
    assert (route.answered, route.failed) == (2, 3)


async def test_the_reply_codec_names_the_content_type(served: Serve) -> None:
    async def shout(text: str) -> str:
        return text.upper()

    responder = ghttp.Responder(StrCodec(), StrCodec())
    await responder.start("shout", shout)
    async with served(responder.app) as url, httpx.AsyncClient(base_url=url) as client:
        answer = await client.post("/shout", content=b"hi")
    assert (answer.status_code, answer.text) == (200, "HI")
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"


async def test_a_reply_that_is_too_large_or_undecodable_is_a_clear_error(served: Serve) -> None:
    async def big(text: str) -> str:
        return "x" * 5000 if text == "big" else "not json"

    responder = ghttp.Responder(StrCodec(), StrCodec())
    await responder.start("big", big)
    async with served(responder.app) as url:
        async with ghttp.Requester(url, StrCodec(), StrCodec(), max_reply_size=4096) as small:
            with pytest.raises(RequestError, match="exceeds 4096 bytes"):
                await small.request("big", "big")
        async with ghttp.Requester(url, StrCodec(), JsonCodec(Order)) as typed:
            with pytest.raises(DecodeError, match="Order"):
                await typed.request("big", "small")


async def test_a_slow_responder_times_out_the_request(served: Serve) -> None:
    release = asyncio.Event()

    async def slow(text: str) -> str:
        await release.wait()
        return text

    responder = ghttp.Responder(StrCodec(), StrCodec())
    await responder.start("slow", slow)
    async with served(responder.app) as url, ghttp.Requester(url, StrCodec(), StrCodec()) as req:
        began = time.monotonic()
        with pytest.raises(RequestTimeout) as timed_out:
            await req.request("slow", "x", timeout=0.3)
        assert time.monotonic() - began < 5
        assert timed_out.value.timeout == 0.3
        release.set()
        with pytest.raises(ValueError, match="timeout"):
            await req.request("slow", "x", timeout=0)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_a_refused_connection_fails_fast_with_the_cause() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    async with ghttp.Publisher(url, JsonCodec(Order)) as pub:
        began = time.monotonic()
        with pytest.raises(PublishError) as refused:
            await pub.publish("orders.x", order())
        assert time.monotonic() - began < 2
    assert "cannot connect" in str(refused.value)
    assert url in str(refused.value)
    assert not refused.value.may_be_stored
    assert isinstance(refused.value.__cause__.__cause__, httpx.ConnectError)  # type: ignore[union-attr]
    async with ghttp.Requester(url, QUOTE, PRICE) as requester:
        with pytest.raises(RequestError, match="cannot connect"):
            await requester.request("pricing.quote", Quote(sku="a", quantity=1))


async def test_an_answer_that_does_not_come_may_have_been_handled(served: Serve) -> None:
    release = asyncio.Event()

    async def slow(msg: object) -> None:
        await release.wait()

    sub = ghttp.Subscriber(JsonCodec(Order))
    await sub.start("orders.slow", slow)
    async with served(sub.app) as url:
        async with ghttp.Publisher(url, JsonCodec(Order), timeout=0.3) as pub:
            with pytest.raises(PublishError) as timed_out:
                await pub.publish("orders.slow", order())
        release.set()
    assert timed_out.value.may_be_stored
    assert "answer within 0.3s" in str(timed_out.value)


async def test_credentials_in_the_base_url_never_reach_an_error() -> None:
    url = f"http://user:s3cret@127.0.0.1:{_closed_port()}"
    async with ghttp.Publisher(url, JsonCodec(Order)) as pub:
        with pytest.raises(PublishError) as refused:
            await pub.publish("orders.x", order())
    assert "s3cret" not in str(refused.value)
    with pytest.raises(ValueError, match="invalid base_url") as invalid:
        ghttp.Publisher("ftp://user:s3cret@host", JsonCodec(Order))
    assert "s3cret" not in str(invalid.value)


@pytest.mark.parametrize(
    ("base_url", "why"),
    [
        ("orders.internal", "expected http"),
        ("ftp://host", "expected http"),
        ("http://", "expected http"),
        ("http://host/?q=1", "no query or fragment"),
        ("http://host/#f", "no query or fragment"),
        ("http://host:99999", "(?i)port"),
    ],
)
def test_bad_base_urls_are_refused(base_url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        ghttp.Publisher(base_url, JsonCodec(Order))


def test_bad_client_options_are_refused() -> None:
    with pytest.raises(ValueError, match="timeout"):
        ghttp.Publisher("http://host", JsonCodec(Order), timeout=0)
    with pytest.raises(ValueError, match="max_reply_size"):
        ghttp.Requester("http://host", QUOTE, PRICE, max_reply_size=0)
    assert ghttp.Publisher("http://host/a/", JsonCodec(Order)).base_url == "http://host/a"


async def test_a_client_given_is_the_callers_and_stays_open(served: Serve) -> None:
    sub = ghttp.Subscriber(JsonCodec(Order))
    seen: list[str] = []

    async def record(msg: object) -> None:
        seen.append("x")

    await sub.start("orders.x", record)
    async with served(sub.app) as url:
        async with httpx.AsyncClient(headers={"authorization": "Bearer t"}) as client:
            pub = ghttp.Publisher(url, JsonCodec(Order), client=client)
            await pub.publish("orders.x", order())
            await pub.close()
            assert not client.is_closed
            with pytest.raises(PublishError, match="closed"):
                await pub.publish("orders.x", order())
        own = ghttp.Publisher(url, JsonCodec(Order))
        await own.publish("orders.x", order())
        await own.close()
        assert own.client.is_closed
    assert seen == ["x", "x"]


async def test_the_message_id_comes_back_as_sent_even_outside_latin_1(served: Serve) -> None:
    responder = ghttp.Responder(StrCodec(), StrCodec())
    await responder.start("echo", _echo)
    async with served(responder.app) as url, httpx.AsyncClient(base_url=url) as client:
        for message_id in ("euro-€", "café", "plain"):
            answer = await client.post(
                "/echo", content=b"x", headers=[(b"x-message-id", message_id.encode())]
            )
            assert answer.status_code == 200
            assert answer.headers.raw[-1] == (b"x-message-id", message_id.encode())
        async with ghttp.Requester(url, StrCodec(), StrCodec()) as requester:
            assert await requester.request("echo", "hi", message_id="euro-€") == "hi"


async def _echo(text: str) -> str:
    return text


async def test_an_error_body_is_reported_printable(served: Serve) -> None:
    async def garbage(scope: object, receive: object, send: Any) -> None:
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b"\x00db\xff down\r\nmore"})

    async with served(garbage) as url, ghttp.Requester(url, StrCodec(), StrCodec()) as req:
        with pytest.raises(RemoteError) as failed:
            await req.request("x", "y")
    assert failed.value.remote_message == "db down"


async def test_a_refused_connection_names_the_systems_reason() -> None:
    async with ghttp.Publisher(f"http://127.0.0.1:{_closed_port()}", JsonCodec(Order)) as pub:
        with pytest.raises(PublishError, match=r"Connection refused|Connect call failed"):
            await pub.publish("orders.x", order())
