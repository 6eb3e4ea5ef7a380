"""A codec that raises something other than DecodeError still means "undecodable".

Codecs promise :class:`~goflux.DecodeError`; a custom one that raises ``ValueError``
(or a parser that hits its recursion limit) must not turn a poison message into a
handler failure: subscribers count and skip it, responders answer 400, stores raise
DecodeError naming where the bytes were, with what the codec raised as the cause.
JetStream subscribers and ``fetch`` are covered by ``test_on_transports.py``'s
``contract-breaking`` case.
"""

from __future__ import annotations

import httpx
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux import BytesCodec, DecodeError, JsonCodec
from goflux.service._http import HttpServer
from goflux.transports import channel, jetstream
from goflux.transports import http as ghttp
from goflux.transports import nats as gnats
from tests.codecs.cases import ORDER, UNDECODABLE, ContractBreaking
from tests.helpers import Inbox
from tests.models import Order

BROKEN = ContractBreaking()


async def test_subscribers_count_and_skip_it(nc: Client) -> None:
    inbox: Inbox[Order] = Inbox()
    nats_sub = await gnats.Subscriber(nc, BROKEN).start("orders.broken", inbox)
    await nc.publish("orders.broken", UNDECODABLE)
    await gnats.Publisher(nc, BROKEN).publish("orders.broken", ORDER)
    await inbox.wait_for(1)
    await nats_sub.stop()
    assert (nats_sub.undecodable, nats_sub.failed) == (1, 0)

    class RawIn:  # publishes bytes as they are; decodes as ContractBreaking does
        def encode(self, value: bytes) -> bytes:
            return value

        def decode(self, data: bytes) -> Order:
            return BROKEN.decode(data)

    bus: channel.Bus[bytes] = channel.Bus(codec=RawIn())  # type: ignore[arg-type]
    seen: Inbox[Order] = Inbox()
    bus_sub = await channel.Subscriber(bus).start("orders.broken", seen)  # type: ignore[arg-type]
    publisher = channel.Publisher(bus)
    await publisher.publish("orders.broken", UNDECODABLE)
    await publisher.publish("orders.broken", BROKEN.encode(ORDER))
    await seen.wait_for(1)
    await bus_sub.stop()
    assert (bus_sub.undecodable, bus_sub.failed) == (1, 0)
    assert inbox.payloads + seen.payloads == [ORDER, ORDER]


async def test_responders_answer_400(nc: Client) -> None:
    async def echo(order: Order) -> Order:
        return order

    async with gnats.Responder(nc, BROKEN, BROKEN) as responder:
        await responder.start("rpc.broken", echo)
        reply = await nc.request("rpc.broken", UNDECODABLE, timeout=5)
    headers = reply.headers or {}
    assert headers[gnats.ERROR_CODE_HEADER] == "400"
    assert "ContractBreaking() raised ValueError" in headers[gnats.ERROR_HEADER]

    router = ghttp.Router()
    sub = ghttp.Subscriber(BROKEN)
    http_sub = await sub.start("orders.broken", Inbox[Order]())
    responder_http = ghttp.Responder(BROKEN, BROKEN)
    await responder_http.start("rpc.broken", echo)
    router = ghttp.Router.merged(sub.app, responder_http.app)
    async with HttpServer(router, "127.0.0.1", 0) as served, httpx.AsyncClient() as http:
        base = f"http://127.0.0.1:{served.port}"
        posted = await http.post(f"{base}/orders.broken", content=UNDECODABLE)
        asked = await http.post(f"{base}/rpc.broken", content=UNDECODABLE)
    assert (posted.status_code, asked.status_code) == (400, 400)
    assert "ValueError" in posted.text
    assert (http_sub.undecodable, http_sub.failed) == (1, 0)


async def test_stores_raise_decode_errors_naming_where_the_bytes_are(
    bare_js: JetStreamContext,
) -> None:
    js = bare_js
    await jetstream.ensure_stream(js, name="BROKEN", subjects=["broken.>"])
    await js.publish("broken.one", UNDECODABLE)
    with pytest.raises(DecodeError, match="sequence 1: ContractBreaking") as stored:
        await jetstream.get_last(js, BROKEN, stream="BROKEN", subject="broken.one")
    assert isinstance(stored.value.__cause__, DecodeError)
    assert isinstance(stored.value.__cause__.__cause__, ValueError)

    kv = await jetstream.key_value(js, "BROKEN_KV", BytesCodec())
    await kv.put("k", UNDECODABLE)
    with pytest.raises(DecodeError, match="key 'k', revision 1: ContractBreaking"):
        await jetstream.KeyValue(js, "BROKEN_KV", BROKEN).get("k")

    store = await jetstream.object_store(js, "BROKEN_OBJ")
    await store.put_value("o", UNDECODABLE, BytesCodec())
    with pytest.raises(DecodeError, match="object 'o': ContractBreaking"):
        await store.get_value("o", BROKEN)
    assert JsonCodec(Order).decode(BROKEN.encode(ORDER)) == ORDER


async def test_requesters_raise_decode_errors_for_replies(nc: Client) -> None:
    async def garbage(_: bytes) -> bytes:
        return UNDECODABLE

    async with (
        gnats.Responder(nc, BytesCodec(), BytesCodec()) as responder,
        gnats.Requester(nc, BytesCodec(), BROKEN) as requester,
    ):
        await responder.start("rpc.garbage", garbage)
        with pytest.raises(DecodeError, match="ContractBreaking") as over_nats:
            await requester.request("rpc.garbage", b"?")
    assert isinstance(over_nats.value.__cause__, ValueError)

    http_responder = ghttp.Responder(BytesCodec(), BytesCodec())
    await http_responder.start("rpc.garbage", garbage)
    async with (
        HttpServer(http_responder.app, "127.0.0.1", 0) as served,
        ghttp.Requester(f"http://127.0.0.1:{served.port}", BytesCodec(), BROKEN) as http_requester,
    ):
        with pytest.raises(DecodeError, match="ContractBreaking") as over_http:
            await http_requester.request("rpc.garbage", b"?")
    assert isinstance(over_http.value.__cause__, ValueError)
