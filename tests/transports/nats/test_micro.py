"""The NATS micro service protocol (ADR-32) for responders, against a real nats-server."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client
from pydantic import BaseModel

from goflux import BytesCodec, Group, JsonCodec, ServiceError, SubscribeError
from goflux.transports import nats as gnats
from tests.helpers import last_called_back
from tests.models import PRICE, QUOTE, Quote, price
from tests.nodejs import run_node

TYPES = {
    "PING": "io.nats.micro.v1.ping_response",
    "INFO": "io.nats.micro.v1.info_response",
    "STATS": "io.nats.micro.v1.stats_response",
}


async def ask(nc: Client, subject: str) -> dict[str, Any]:
    """One discovery request; the first answer's JSON."""
    reply = await nc.request(subject, b"", timeout=5)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


async def answers(nc: Client, subject: str, count: int) -> list[dict[str, Any]]:
    """Collect ``count`` answers to one discovery request (every instance answers)."""
    got: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_answer(msg: Any) -> None:
        await got.put(json.loads(msg.data))

    inbox = nc.new_inbox()
    subscription = await nc.subscribe(inbox, cb=on_answer)
    await nc.publish(subject, b"", reply=inbox)
    try:
        async with asyncio.timeout(5):
            return [await got.get() for _ in range(count)]
    finally:
        await subscription.unsubscribe()


async def quote(nc: Client, sku: str, quantity: int) -> None:
    await nc.request("pricing.quote", QUOTE.encode(Quote(sku=sku, quantity=quantity)), timeout=5)


@pytest.fixture
async def service(nc: Client) -> AsyncIterator[gnats.MicroService]:
    async with gnats.MicroService(
        nc,
        name="pricing",
        version="1.2.0-rc.1+build.7",
        description="Prices quotes",
        metadata={"region": "eu-west"},
    ) as svc:
        yield svc


async def test_ping_info_stats_answer_with_and_without_name_and_id(
    nc: Client, service: gnats.MicroService
) -> None:
    async with gnats.Responder(nc, QUOTE, PRICE, service=service) as responder:
        serving = await responder.start("pricing.quote", price, metadata={"unit": "EUR"})
        assert serving.endpoint == "pricing-quote"
        await quote(nc, "apple", 2)
        identity = {
            "name": "pricing",
            "id": service.id,
            "version": "1.2.0-rc.1+build.7",
            "metadata": {"region": "eu-west"},
        }
        endpoint = {"name": "pricing-quote", "subject": "pricing.quote", "queue_group": "q"}
        for target in ("", ".pricing", f".pricing.{service.id}"):
            ping = await ask(nc, f"$SRV.PING{target}")
            assert ping == {**identity, "type": TYPES["PING"]}
            info = await ask(nc, f"$SRV.INFO{target}")
            assert info == {
                **identity,
                "type": TYPES["INFO"],
                "description": "Prices quotes",
                "endpoints": [{**endpoint, "metadata": {"unit": "EUR"}}],
            }
            stats = await ask(nc, f"$SRV.STATS{target}")
            started = stats.pop("started")
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", started)
            assert datetime.fromisoformat(started) == service.started
            assert abs(datetime.now(UTC) - service.started) < timedelta(seconds=30)
            (counted,) = stats.pop("endpoints")
            assert stats == {**identity, "type": TYPES["STATS"]}
            assert counted.pop("processing_time") == counted.pop("average_processing_time") > 0
            assert counted == {**endpoint, "num_requests": 1, "num_errors": 0, "last_error": ""}
            assert "data" not in counted  # no stats handler: left out, as nats.go does
        # The typed values are what went on the wire.
        assert service.ping().as_dict() == ping
        assert service.info().as_dict() == info
        wire = service.stats().as_dict()
        assert wire["started"] == started
        assert wire["endpoints"][0]["num_requests"] == 1


async def test_every_instance_answers_and_an_unknown_name_gets_nothing(nats_url: str) -> None:
    first_nc, second_nc = await nats.connect(nats_url), await nats.connect(nats_url)
    first = gnats.MicroService(first_nc, name="pricing", version="1.0.0")
    second = gnats.MicroService(second_nc, name="pricing", version="1.0.1")
    other = gnats.MicroService(second_nc, name="billing", version="2.0.0")
    try:
        for svc in (first, second, other):
            await svc.start()
        ids = {first.id: "1.0.0", second.id: "1.0.1"}
        for verb in ("PING", "INFO", "STATS"):
            found = await answers(first_nc, f"$SRV.{verb}.pricing", 2)
            assert {a["id"]: a["version"] for a in found} == ids
            everyone = await answers(first_nc, f"$SRV.{verb}", 3)
            assert {a["name"] for a in everyone} == {"pricing", "billing"}
            for svc in (first, second):
                assert (await ask(first_nc, f"$SRV.{verb}.pricing.{svc.id}"))["id"] == svc.id
            with pytest.raises(nats.errors.NoRespondersError):
                await first_nc.request(f"$SRV.{verb}.shipping", b"", timeout=5)
            with pytest.raises(nats.errors.NoRespondersError):
                await first_nc.request(f"$SRV.{verb}.pricing.{other.id}", b"", timeout=5)
    finally:
        for svc in (first, second, other):
            await svc.close()
        await first_nc.close()
        await second_nc.close()


async def test_stats_count_100_requests_with_7_handler_errors(
    nc: Client, service: gnats.MicroService
) -> None:
    async with gnats.Responder(nc, QUOTE, PRICE, service=service) as responder:
        serving = await responder.start("pricing.quote", price)
        for n in range(100):
            await quote(nc, f"sku-{n}", -n if n % 14 == 13 else n)  # 13, 27, ..., 97: 7 fail
        stats = service.stats()
        (endpoint,) = stats.endpoints
        assert (endpoint.num_requests, endpoint.num_errors) == (100, 7)
        assert endpoint.last_error == "500:ValueError: negative quantity -97"
        assert endpoint.processing_time > 0
        assert endpoint.average_processing_time == endpoint.processing_time // 100
        assert (serving.answered, serving.failed) == (93, 7)
        wire = (await ask(nc, "$SRV.STATS.pricing"))["endpoints"][0]
        assert (wire["num_requests"], wire["num_errors"]) == (100, 7)
        assert wire["last_error"] == endpoint.last_error
        service.reset()
        zeroed = service.stats()
        assert zeroed.started >= stats.started
        assert zeroed.endpoints[0].as_dict() == {
            **endpoint.as_dict(),
            "num_requests": 0,
            "num_errors": 0,
            "last_error": "",
            "processing_time": 0,
            "average_processing_time": 0,
        }


class Blob(BaseModel):
    text: str


async def test_every_error_reply_counts_as_an_error(
    nc: Client, service: gnats.MicroService
) -> None:
    async def handle(quote: Quote) -> Blob:
        if quote.sku == "ghost":
            raise ServiceError(404, "unknown sku")
        return Blob(text="x" * (quote.quantity or 1))

    too_large = nc.max_payload + 1
    async with gnats.Responder(nc, QUOTE, JsonCodec(Blob), service=service) as responder:
        await responder.start("pricing.quote", handle)
        expected = [
            (QUOTE.encode(Quote(sku="ghost", quantity=1)), "404:unknown sku"),
            (b'{"sku": 1', "400:bad request: cannot decode"),
            (QUOTE.encode(Quote(sku="big", quantity=too_large)), "500:the reply is too large"),
        ]
        for n, (data, error) in enumerate(expected, start=1):
            reply = await nc.request("pricing.quote", data, timeout=5)
            assert reply.headers is not None
            assert error.startswith(reply.headers[gnats.ERROR_CODE_HEADER] + ":")
            (endpoint,) = service.stats().endpoints
            assert (endpoint.num_requests, endpoint.num_errors) == (n, n)
            assert endpoint.last_error.startswith(error), endpoint.last_error
        await quote(nc, "apple", 1)
        await nc.publish("pricing.quote", b"{}")  # no reply subject: nothing to answer
        (endpoint,) = (await ask(nc, "$SRV.STATS.pricing"))["endpoints"]  # after the publish
        assert (endpoint["num_requests"], endpoint["num_errors"]) == (5, 4)
        assert endpoint["last_error"].startswith("no reply subject")


async def test_a_request_cancelled_at_the_drain_deadline_counts_as_an_error(
    nc: Client, service: gnats.MicroService
) -> None:
    entered = asyncio.Event()

    async def stuck(_: bytes) -> bytes:
        entered.set()
        await asyncio.Event().wait()
        return b""

    responder = gnats.Responder(nc, BytesCodec(), BytesCodec(), service=service)
    serving = await responder.start("pricing.stuck", stuck)
    endpoint = service._endpoints["pricing-stuck"]  # it leaves the service once stopped
    request = asyncio.ensure_future(nc.request("pricing.stuck", b"", timeout=5))
    await entered.wait()
    await serving.stop(timeout=0)
    reply = await request
    assert reply.headers is not None
    assert reply.headers[gnats.ERROR_CODE_HEADER] == "503"
    assert (endpoint.num_requests, endpoint.num_errors) == (1, 1)
    assert endpoint.last_error == "503:the responder is stopping"
    assert service.endpoints == ()
    await responder.close()


async def test_an_endpoint_leaves_when_its_subscription_stops(
    nc: Client, service: gnats.MicroService
) -> None:
    async with gnats.Responder(nc, QUOTE, PRICE, queue="pricing", service=service) as responder:
        assert service.endpoints == ()
        assert not service.running  # answers discovery once an endpoint starts
        quotes = await responder.start("pricing.quote", price)
        await responder.start("pricing.bulk.*", price)
        assert service.running
        info = await ask(nc, "$SRV.INFO")
        assert [(e["name"], e["subject"], e["queue_group"]) for e in info["endpoints"]] == [
            ("pricing-quote", "pricing.quote", "pricing"),
            ("pricing-bulk", "pricing.bulk.*", "pricing"),
        ]
        assert [e["metadata"] for e in info["endpoints"]] == [None, None]  # none given: as nats.go
        await quotes.stop()
        assert service.endpoints == ("pricing-bulk",)
        assert [e["name"] for e in (await ask(nc, "$SRV.STATS"))["endpoints"]] == ["pricing-bulk"]
        again = await responder.start("pricing.quote", price)  # the name is free again
        assert again.endpoint == "pricing-quote"
        assert service.endpoints == ("pricing-bulk", "pricing-quote")
    assert service.endpoints == ()  # closing the responder stopped them
    assert (await ask(nc, "$SRV.INFO"))["endpoints"] == []


async def test_instances_split_requests_in_the_queue_group_q(nats_url: str) -> None:
    connections = [await nats.connect(nats_url) for _ in range(2)]
    services = [gnats.MicroService(c, name="pricing", version="1.0.0") for c in connections]
    responders = [
        gnats.Responder(c, QUOTE, PRICE, service=s)
        for c, s in zip(connections, services, strict=True)
    ]
    try:
        for responder in responders:
            await responder.start("pricing.quote", price)
        for n in range(20):
            await quote(connections[0], "apple", n)
        counted = [s.stats().endpoints[0] for s in services]
        assert {e.queue_group for e in counted} == {"q"}
        assert sum(e.num_requests for e in counted) == 20  # each answered once
        assert responders[0].queue is None  # as given
    finally:
        for responder, svc, connection in zip(responders, services, connections, strict=True):
            await responder.close()
            await svc.close()
            await connection.close()


@pytest.mark.parametrize(
    ("options", "bad"),
    [
        ({"name": ""}, ""),
        ({"name": "pricing.v1"}, "pricing.v1"),
        ({"name": "pri cing"}, "pri cing"),
        ({"name": "pricing\n"}, "pricing\n"),
        ({"version": "1.0"}, "1.0"),
        ({"version": "v1.0.0"}, "v1.0.0"),
        ({"version": "01.0.0"}, "01.0.0"),
        ({"version": "1.0.0\n"}, "1.0.0\n"),
        ({"metadata": {"region": 1}}, 1),
        ({"metadata": {2: "x"}}, 2),
        ({"metadata": ["region"]}, ["region"]),
        ({"description": 3}, 3),
    ],
)
async def test_bad_names_versions_and_metadata_are_refused(
    nc: Client, options: dict[str, Any], bad: object
) -> None:
    given: dict[str, Any] = {"name": "pricing", "version": "1.0.0", **options}
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        gnats.MicroService(nc, **given)


async def test_endpoint_names_are_checked_and_unique(
    nc: Client, service: gnats.MicroService
) -> None:
    async with gnats.Responder(nc, QUOTE, PRICE, service=service) as responder:
        with pytest.raises(ValueError, match=r"invalid endpoint name 'pricing\.quote'"):
            await responder.start("pricing.quote", price, endpoint="pricing.quote")
        with pytest.raises(ValueError, match=r"endpoint 'quote' metadata .*1"):
            await responder.start("pricing.quote", price, endpoint="quote", metadata={"a": 1})  # type: ignore[dict-item]
        with pytest.raises(ValueError, match=r"cannot name an endpoint after subject '>'"):
            await responder.start(">", price)
        await responder.start("pricing.*", price)
        with pytest.raises(ValueError, match=r"endpoint name 'pricing' is taken .*'pricing\.\*'"):
            await responder.start("pricing.>", price)  # its name is "pricing" too
        await responder.start("pricing.>", price, endpoint="everything")
        assert service.endpoints == ("pricing", "everything")
        other = gnats.Responder(nc, QUOTE, PRICE, service=service)
        with pytest.raises(ValueError, match="'everything' is taken"):
            await other.start("shipping.quote", price, endpoint="everything")
        # Refused before subscribing: nothing serves the subject.
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("shipping.quote", b"{}", timeout=5)
    plain = gnats.Responder(nc, QUOTE, PRICE)
    with pytest.raises(ValueError, match="need a Responder with service="):
        await plain.start("pricing.quote", price, endpoint="quote")


async def test_close_stops_answering_and_is_idempotent(nc: Client) -> None:
    svc = gnats.MicroService(nc, name="pricing", version="1.0.0")
    responder = gnats.Responder(nc, QUOTE, PRICE, service=svc)
    async with svc:
        await svc.start()
        await svc.start()  # once is enough
        assert (await ask(nc, "$SRV.INFO.pricing"))["endpoints"] == []
        serving = await responder.start("pricing.quote", price)
    assert not svc.running
    for verb in ("PING", "INFO", "STATS"):
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request(f"$SRV.{verb}", b"", timeout=5)
    await svc.close()  # again: nothing happens
    assert serving.running  # the endpoint belongs to its responder: it keeps serving
    await quote(nc, "apple", 1)
    with pytest.raises(SubscribeError, match="'pricing' is closed"):
        await svc.start()
    with pytest.raises(SubscribeError, match="'pricing' is closed"):
        await responder.start("pricing.other", price)
    await responder.close()


async def test_a_group_closes_an_owned_service(nc: Client) -> None:
    group = Group(drain_timeout=5)
    svc = group.own(gnats.MicroService(nc, name="pricing", version="1.0.0"))
    responder = group.own(gnats.Responder(nc, QUOTE, PRICE, service=svc))
    async with group:
        await responder.start("pricing.quote", price)
        assert (await ask(nc, "$SRV.PING.pricing"))["id"] == svc.id
    assert not svc.running
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("$SRV.PING", b"", timeout=5)


async def test_a_responder_without_a_service_is_unchanged(nc: Client) -> None:
    responder = gnats.Responder(nc, QUOTE, PRICE, queue="pricing")
    assert responder.service is None
    assert (responder.request_codec, responder.response_codec) == (QUOTE, PRICE)
    assert responder.queue == "pricing"
    async with responder:
        serving = await responder.start("pricing.quote", price)
        assert serving.endpoint is None
        await quote(nc, "apple", 1)
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("$SRV.PING", b"", timeout=5)


async def test_a_nodejs_client_sees_the_goflux_service(
    nc: Client, nats_url: str, service: gnats.MicroService
) -> None:
    async with gnats.Responder(nc, QUOTE, PRICE, service=service) as responder:
        await responder.start("pricing.quote", price, endpoint="quote", metadata={"unit": "EUR"})
        for n in range(100):
            await quote(nc, f"sku-{n}", -n if n % 14 == 13 else n)
        seen = await run_node("micro_client.mjs", nats_url, "pricing", service.id)
        expected_info = service.info().as_dict()
    assert expected_info["endpoints"] == [
        {
            "name": "quote",
            "subject": "pricing.quote",
            "queue_group": "q",
            "metadata": {"unit": "EUR"},
        }
    ]
    for found in (seen, seen["instance"]):
        assert found["ping"] == [service.ping().as_dict()]
        assert found["info"] == [expected_info]
        (stats,) = found["stats"]
        assert (stats["type"], stats["id"], stats["name"]) == (
            TYPES["STATS"],
            service.id,
            "pricing",
        )
        (endpoint,) = stats["endpoints"]
        assert (endpoint["num_requests"], endpoint["num_errors"]) == (100, 7)
        assert endpoint["last_error"] == "500:ValueError: negative quantity -97"
        assert endpoint["average_processing_time"] == endpoint["processing_time"] // 100 > 0


async def test_an_idle_service_holds_no_discovery_request_it_answered(nc: Client) -> None:
    # nats-py's callback task keeps the last request it called back with until the
    # next; a large one sent to a discovery subject must not stay in memory.
    async with gnats.MicroService(nc, name="pricing", version="1.0.0") as svc:
        await svc.start()
        for verb in ("PING", "INFO", "STATS"):
            subject = f"$SRV.{verb}.pricing"
            reply = await nc.request(subject, b"x" * 500_000, timeout=5)
            assert json.loads(reply.data)["name"] == "pricing"
            kept = [last_called_back(sub) for sub in svc._subscriptions]
            answered = [msg for msg in kept if msg is not None and msg.subject == subject]
            assert len(answered) == 1  # (its task still keeps it, emptied)
            assert (answered[0].data, answered[0].headers) == (b"", None)
