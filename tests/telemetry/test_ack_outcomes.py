"""Attributes of the settlement metrics in the cases the Go-names scenario does not cover.

Messages read with ``fetch()`` count their acks under the consumer's filter subject, and
a fetch that gives up hands back what it took as naks; a confirmed ack that cannot be
sent counts as an ack that failed; and a subscription on a template's pattern reports
the template's text as ``messaging.destination.template`` in its dropped, settlement
and redelivery counters. Everything runs on a real nats-server and is read from the
SDK's in-memory metric reader.
"""

from __future__ import annotations

import asyncio

import pydantic
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from opentelemetry.sdk.metrics.export import NumberDataPoint, Sum

from goflux import Message, SettlementError, StrCodec, SubjectTemplate, SubscribeError
from goflux.transports import jetstream
from goflux.transports import nats as gnats
from tests.conftest import STREAM, Otel
from tests.telemetry.held import hold_one

pytestmark = pytest.mark.timeout(60)


def counts(otel: Otel, name: str) -> list[tuple[dict[str, object], int]]:
    """The data points of the counter ``name``: attributes and value (none: empty)."""
    if otel.reader.get_metrics_data() is None:  # nothing recorded at all
        return []
    metric = otel.metrics().get(name)
    if metric is None:
        return []
    data = metric.data
    assert isinstance(data, Sum)
    return [
        (dict(point.attributes or {}), int(point.value))
        for point in data.data_points
        if isinstance(point, NumberDataPoint)
    ]


def outcome(action: str, subject: str, *, error: bool = False) -> dict[str, object]:
    return {
        "goflux.ack.action": action,
        "goflux.ack.error": error,
        "messaging.destination.name": subject,
    }


async def test_fetched_messages_count_their_acks_under_the_consumers_filter_subject(
    js: JetStreamContext, otel: Otel
) -> None:
    await jetstream.ensure_consumer(
        js, stream=STREAM, name="batch", filter_subject="orders.created"
    )
    publisher = jetstream.Publisher(js, StrCodec())
    for n in range(3):
        await publisher.publish("orders.created", f"o-{n}")
    subscriber = jetstream.Subscriber(
        js, StrCodec(), stream=STREAM, consumer="batch", telemetry=otel.telemetry
    )
    first, second, third = await subscriber.fetch(3, expires=5)
    await first.ack()
    await second.nak(0.5)
    await third.term()
    assert sorted(counts(otel, "goflux.processor.ack.outcome"), key=repr) == sorted(
        [
            (outcome("ack", "orders.created"), 1),
            (outcome("nak_with_delay", "orders.created"), 1),
            (outcome("term", "orders.created"), 1),
        ],
        key=repr,
    )
    await subscriber.close()


async def test_a_failed_fetch_counts_what_it_hands_back_as_naks(
    js: JetStreamContext, otel: Otel
) -> None:
    await jetstream.ensure_consumer(
        js, stream=STREAM, name="batch", filter_subject="orders.created"
    )
    publisher = jetstream.Publisher(js, StrCodec())
    for n in range(2):
        await publisher.publish("orders.created", f"o-{n}")
    subscriber = jetstream.Subscriber(
        js, StrCodec(), stream=STREAM, consumer="batch", telemetry=otel.telemetry
    )
    # Asks for more than there is: the fetch takes both and waits for the rest, until
    # the consumer is deleted under it (the server ends the request after the two).
    fetching = asyncio.create_task(subscriber.fetch(5, expires=30))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10  # checked between requests: a request is never cancelled
    while (await js.consumer_info(STREAM, "batch")).num_ack_pending < 2:
        assert loop.time() < deadline, "the fetch holds both messages"
    await js.delete_consumer(STREAM, "batch")
    with pytest.raises(SubscribeError, match="Consumer Deleted"):
        await fetching  # the two are handed back before it raises
    assert counts(otel, "goflux.processor.ack.outcome") == [(outcome("nak", "orders.created"), 2)]
    settlements = counts(otel, "goflux.consumer.settlements")
    assert [(a["goflux.settlement.outcome"], n) for a, n in settlements] == [("nak", 2)]
    await subscriber.close()


async def test_a_confirmed_ack_that_cannot_be_sent_counts_as_an_ack_that_failed(
    nc: Client, js: JetStreamContext, otel: Otel
) -> None:
    held, subscription = await hold_one(js, otel)
    await nc.close()
    with pytest.raises(SettlementError):
        await held.ack(confirm=True)
    assert counts(otel, "goflux.processor.ack.outcome") == [
        (outcome("ack", "orders.created", error=True), 1)
    ]
    await subscription.stop()


async def test_a_hand_back_whose_nak_cannot_be_sent_counts_as_a_nak_that_failed(
    nc: Client, js: JetStreamContext, otel: Otel
) -> None:
    # The pull engine tells the subscription of each message it naks on arrival
    # (draining, or on a retired inbox) and whether the nak went out; a connection
    # that fails just then cannot be staged on demand, so the engine's report is
    # made here as it makes it, on a running subscription.
    async def handle(msg: Message[str]) -> None:
        pass

    subscriber = jetstream.Subscriber(js, StrCodec(), stream=STREAM, telemetry=otel.telemetry)
    subscription = await subscriber.start("orders.created", handle)
    reply = f"$JS.ACK.{STREAM}.{subscription.consumer}.2.7.7.1700000000000000000.0"
    subscription._handed_back(reply, False)
    subscription._handed_back(reply, True)
    assert sorted(counts(otel, "goflux.processor.ack.outcome"), key=repr) == sorted(
        [
            (outcome("nak", "orders.created", error=True), 1),
            (outcome("nak", "orders.created"), 1),
        ],
        key=repr,
    )
    assert sum(value for _, value in counts(otel, "goflux.consumer.redeliveries")) == 2
    await subscription.stop()


class Region(pydantic.BaseModel):
    region: str


ORDERS = SubjectTemplate("orders.{region}.created", Region)


def templates(points: list[tuple[dict[str, object], int]]) -> set[object]:
    return {attributes.get("messaging.destination.template") for attributes, _ in points}


async def test_core_nats_drops_on_a_template_report_the_template_text(
    nc: Client, otel: Otel
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def stuck(msg: Message[str]) -> None:
        started.set()
        await release.wait()

    subscriber = gnats.Subscriber(nc, StrCodec(), pending_messages=1, telemetry=otel.telemetry)
    subscription = await subscriber.start(ORDERS.pattern, stuck)
    publisher = gnats.Publisher(nc, StrCodec())
    await publisher.publish(ORDERS.format(region="eu"), "first")
    await started.wait()
    for n in range(5):  # one waits in the pending queue, the rest are dropped
        await publisher.publish(ORDERS.format(region="eu"), f"o-{n}")
    await nc.flush()
    release.set()
    await subscription.stop()
    dropped = counts(otel, "goflux.consumer.dropped")
    assert sum(n for _, n in dropped) >= 1
    assert templates(dropped) == {"orders.{region}.created"}


async def test_jetstream_metrics_on_a_template_report_the_template_text(
    js: JetStreamContext, otel: Otel
) -> None:
    publisher = jetstream.Publisher(js, StrCodec())
    await publisher.publish(ORDERS.format(region="eu"), "o-1")
    done = asyncio.Event()

    async def fail_once(msg: Message[str]) -> None:
        if msg.delivery is not None and msg.delivery.num_delivered == 1:
            await msg.nak()  # redelivered at once: one redelivery counted
            return
        await msg.ack()
        done.set()

    subscriber = jetstream.Subscriber(
        js, StrCodec(), stream=STREAM, manual_ack=True, telemetry=otel.telemetry
    )
    subscription = await subscriber.start(ORDERS.pattern, fail_once)
    async with asyncio.timeout(10):
        await done.wait()
    await subscription.stop()
    settlements = counts(otel, "goflux.consumer.settlements")
    redeliveries = counts(otel, "goflux.consumer.redeliveries")
    assert {a["goflux.settlement.outcome"] for a, _ in settlements} == {"ack", "nak"}
    assert redeliveries == [(redeliveries[0][0], 1)]
    assert templates(settlements) == templates(redeliveries) == {"orders.{region}.created"}
    # goflux.processor.ack.outcome has Go's attributes: the subject subscribed to.
    assert {a["messaging.destination.name"] for a, _ in counts(
        otel, "goflux.processor.ack.outcome"
    )} == {"orders.*.created"}  # fmt: skip
