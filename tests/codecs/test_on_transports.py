"""Every kind of codec where goflux moves bytes, on real servers.

Publish/subscribe on every transport is the conformance suite's
(``test_every_codec_carries_its_bytes_unchanged``); here are the rest: core NATS
request/reply, JetStream ``fetch`` and dead letters, Key-Value and Object stores, and
HTTP publish and request/reply through a real uvicorn server. The bytes on the wire
are the codec's, unchanged, wherever they are stored or carried.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import nats
import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux import BytesCodec, NonRetryable, chain
from goflux.middleware import DeadLetter, RetryPolicy, retry_ack
from goflux.service._http import HttpServer
from goflux.testing import NatsServer
from goflux.transports import channel, jetstream
from goflux.transports import http as ghttp
from goflux.transports import nats as gnats
from tests.codecs.cases import CASES, CodecCase, undecodable
from tests.helpers import Inbox

pytestmark = [
    pytest.mark.parametrize("case", CASES, ids=str),
    pytest.mark.asyncio(loop_scope="module"),  # the module's connection and servers
]

STREAM = "CODECS"
DEAD = "DEAD"  # the dead letters' stream
BUCKET = "CODECS"


@pytest.fixture(scope="module")
def server() -> Iterator[NatsServer]:
    """One JetStream server for the module: each case keeps to subjects and names of its own."""
    with NatsServer() as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(server: NatsServer) -> AsyncIterator[Client]:
    nc = await nats.connect(server.url)
    yield nc
    await nc.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def streams(client: Client) -> JetStreamContext:
    js = client.jetstream()
    await jetstream.ensure_stream(js, name=STREAM, subjects=["codecs.>"])
    await jetstream.ensure_stream(js, name=DEAD, subjects=["dead.>"])
    return js


@dataclass
class Web:
    """One uvicorn server for the module, serving one router; an httpx client to it."""

    router: ghttp.Router
    url: str
    http: httpx.AsyncClient


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def web() -> AsyncIterator[Web]:
    router = ghttp.Router()
    async with (
        HttpServer(router, "127.0.0.1", 0) as served,
        httpx.AsyncClient() as http,
    ):
        yield Web(router, f"http://127.0.0.1:{served.port}", http)


async def echo(value: Any) -> Any:
    return value


async def test_core_nats_request_reply(case: CodecCase, client: Client) -> None:
    subject = f"rpc.{case.id}"
    asked: list[object] = []

    async def answer(value: object) -> object:
        asked.append(value)
        return value

    async with (
        gnats.Responder(client, case.codec, case.codec) as responder,
        gnats.Requester(client, case.codec, case.codec) as requester,
    ):
        await responder.start(subject, answer)
        assert await requester.request(subject, case.value) == case.value
        raw = await client.request(subject, case.codec.encode(case.value), timeout=5)
    assert asked == [case.value, case.value]
    assert raw.data == case.codec.encode(case.value)  # the reply's bytes: the codec's


async def test_jetstream_fetch_leaves_out_and_dead_letters_what_does_not_decode(
    case: CodecCase, streams: JetStreamContext
) -> None:
    js = streams
    subject = f"codecs.fetch.{case.id}"
    letters = f"dead.fetch.{case.id}"
    bad = undecodable(case)
    await js.publish(subject, bad)
    await jetstream.Publisher(js, case.codec).publish(subject, case.value)
    consumer = f"fetch-{case.id}"
    await jetstream.ensure_consumer(js, stream=STREAM, name=consumer, filter_subject=subject)
    dead_letter = DeadLetter(jetstream.Publisher(js, BytesCodec()), letters)
    sub = jetstream.Subscriber(
        js, case.codec, stream=STREAM, consumer=consumer, dead_letter=dead_letter
    )
    [message] = await sub.fetch(10, no_wait=True)
    assert message.payload == case.value
    assert message.data == case.codec.encode(case.value)
    await message.ack()
    letter = await jetstream.get_last(js, BytesCodec(), stream=DEAD, subject=letters)
    assert letter is not None
    assert letter.payload == bad
    assert letter.headers["Dead-Letter-Reason"] == "undecodable"


async def test_jetstream_dead_letters_are_the_bytes_received_and_decode(
    case: CodecCase, streams: JetStreamContext
) -> None:
    js = streams
    subject = f"codecs.dead.{case.id}"
    letters = f"dead.sub.{case.id}"
    bad = undecodable(case)

    async def refuse(message: object) -> None:
        raise NonRetryable("never valid")

    dead_letter = DeadLetter(jetstream.Publisher(js, BytesCodec()), letters)
    sub = jetstream.Subscriber(js, case.codec, stream=STREAM, dead_letter=dead_letter)
    reader = jetstream.Subscriber(js, BytesCodec(), stream=DEAD)
    dead: Inbox[bytes] = Inbox()
    async with sub, reader:
        await sub.start(subject, refuse)
        await reader.start(letters, dead)
        await js.publish(subject, bad)
        await jetstream.Publisher(js, case.codec).publish(subject, case.value)
        await dead.wait_for(2)
    by_reason = {m.headers["Dead-Letter-Reason"]: m.payload for m in dead.messages}
    assert by_reason == {"undecodable": bad, "non_retryable": case.codec.encode(case.value)}
    assert case.codec.decode(by_reason["non_retryable"]) == case.value
    stored = await jetstream.get_last(js, case.codec, stream=DEAD, subject=letters)
    assert stored is not None
    assert stored.payload == case.value


async def test_key_value_put_get_and_watch(case: CodecCase, streams: JetStreamContext) -> None:
    kv = await jetstream.key_value(streams, BUCKET, case.codec)
    key = f"k.{case.id}"
    revision = await kv.put(key, case.value)
    entry = await kv.get(key)
    assert entry is not None
    assert (entry.value, entry.revision) == (case.value, revision)
    async with kv.watch(key) as entries:
        latest = await anext(entries)
    assert (latest.value, latest.revision) == (case.value, revision)
    raw = await jetstream.KeyValue(streams, BUCKET, BytesCodec()).get(key)
    assert raw is not None
    assert raw.value == case.codec.encode(case.value)


async def test_object_store_put_and_get(case: CodecCase, streams: JetStreamContext) -> None:
    store = await jetstream.object_store(streams, BUCKET)
    name = f"{case.id}.payload"
    info = await store.put_value(name, case.value, case.codec)
    assert info.size == len(case.codec.encode(case.value))
    assert await store.get_value(name, case.codec) == case.value
    assert await store.get(name) == case.codec.encode(case.value)


async def test_http_publish_request_and_dead_letters(case: CodecCase, web: Web) -> None:
    encoded = case.codec.encode(case.value)
    inbox: Inbox[object] = Inbox()
    bus: channel.Bus[bytes] = channel.Bus(codec=BytesCodec())
    dead: Inbox[bytes] = Inbox()

    async def refuse(message: object) -> None:
        raise NonRetryable("never valid")

    policy = RetryPolicy(dead_letter=DeadLetter(channel.Publisher(bus), "dead.http"))
    url, http = web.url, web.http
    async with (
        ghttp.Subscriber(case.codec, router=web.router) as subscriber,
        ghttp.Responder(case.codec, case.codec, router=web.router) as responder,
        ghttp.Publisher(url, case.codec, client=http) as publisher,
        ghttp.Requester(url, case.codec, case.codec, client=http) as requester,
        channel.Subscriber(bus) as letters,
    ):
        await subscriber.start(f"codecs.{case.id}", inbox)
        await subscriber.start(f"codecs.{case.id}.refused", chain(retry_ack(policy))(refuse))
        await responder.start(f"rpc.{case.id}", echo)
        await letters.start("dead.http", dead)
        await publisher.publish(f"codecs.{case.id}", case.value)
        assert await requester.request(f"rpc.{case.id}", case.value) == case.value
        with pytest.raises(ghttp.StatusError, match="422"):
            await publisher.publish(f"codecs.{case.id}.refused", case.value)
        raw = await http.post(
            f"{url}/rpc.{case.id}", content=encoded, headers={"content-type": case.content_type}
        )
        [letter] = await dead.wait_for(1)
    [message] = inbox.messages
    assert message.payload == case.value
    assert message.data == encoded
    assert message.wire_headers["content-type"] == case.content_type
    assert "content-encoding" not in message.wire_headers  # compression is the codec's
    # the reply: the codec's bytes as they are, its content type, no content coding
    assert raw.status_code == 200
    assert raw.headers["content-type"] == case.content_type
    assert "content-encoding" not in raw.headers
    assert raw.content == encoded
    assert letter.payload == encoded
    assert case.codec.decode(letter.payload) == case.value
