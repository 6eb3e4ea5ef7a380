"""Pipes: forward, map and fan out, carrying headers, message ID and trace context."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from nats.js import JetStreamContext

from goflux import (
    InvalidSubject,
    JsonCodec,
    Message,
    NonRetryable,
    StrCodec,
    chain,
    pipe,
    pipe_flat_map,
    pipe_map,
)
from goflux.middleware import RetryPolicy, retry_ack
from goflux.transports import channel, jetstream
from tests.conftest import STREAM, Otel
from tests.helpers import Inbox
from tests.models import Order

CODEC = JsonCodec(Order)


def order(n: int, total: float = 10.0) -> Order:
    return Order(id=f"o-{n}", customerId="c-1", amount=total)


async def test_pipe_forwards_payload_headers_and_id_on_the_channel_bus() -> None:
    bus: channel.Bus[Order] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    out = Inbox[Order]()
    await sub.start("clean.>", out)
    seen: list[str] = []

    def only_big(message: Message[Order]) -> bool:
        seen.append(message.payload.id)
        return message.payload.amount >= 10

    forward = pipe(pub, subject=lambda s: s.replace("raw.", "clean.", 1), filter=only_big)
    await sub.start("raw.>", forward)
    await pub.publish("raw.eu", order(1, 5.0), message_id="m-1")
    await pub.publish("raw.eu", order(2), headers={"Tenant": "acme"}, message_id="m-2")
    [got] = await out.wait_for(1)
    assert got.subject == "clean.eu"
    assert got.payload == order(2)
    assert got.id == "m-2"
    assert got.headers["Tenant"] == "acme"
    assert seen == ["o-1", "o-2"]  # the first was filtered out
    await sub.close()


async def test_pipe_map_accepts_plain_and_async_functions() -> None:
    bus: channel.Bus[object] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    totals, names = Inbox[object](), Inbox[object]()
    await sub.start("totals", totals)
    await sub.start("names", names)

    async def name_of(message: Message[object]) -> str:
        await asyncio.sleep(0)
        assert isinstance(message.payload, Order)
        return message.payload.customer_id

    def total_of(message: Message[object]) -> float:
        assert isinstance(message.payload, Order)
        return message.payload.amount

    await sub.start("orders", pipe_map(pub, total_of, subject="totals"))
    await sub.start("orders", pipe_map(pub, name_of, subject="names"))
    await pub.publish("orders", order(1, 12.5))
    assert (await totals.wait_for(1))[0].payload == 12.5
    assert (await names.wait_for(1))[0].payload == "c-1"
    await sub.close()


async def test_pipe_flat_map_fans_out_with_derived_ids() -> None:
    bus: channel.Bus[object] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    items = Inbox[object]()
    await sub.start("items", items)

    def split(message: Message[object]) -> list[str]:
        return str(message.payload).split(",")

    async def split_async(message: Message[object]) -> AsyncIterator[str]:
        for part in str(message.payload).split(";"):
            yield part

    await sub.start("lists", pipe_flat_map(pub, split, subject="items"))
    await sub.start("semis", pipe_flat_map(pub, split_async, subject="items"))
    await pub.publish("lists", "a,b,c", message_id="L")
    await pub.publish("lists", "", message_id="E")  # one empty item
    await pub.publish("semis", "x;y")
    got = await items.wait_for(6)
    assert [(m.payload, m.id) for m in got] == [
        ("a", "L:1"),
        ("b", "L:2"),
        ("c", "L:3"),
        ("", "E:1"),
        ("x", None),
        ("y", None),
    ]
    await sub.close()


async def test_a_pipe_never_publishes_back_onto_its_input() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub = channel.Publisher(bus)
    errors: list[BaseException] = []

    def observe(message: Message[int], error: Exception) -> None:
        errors.append(error)

    loop_back = pipe(pub, subject=lambda s: s, dead_letter=observe)
    with pytest.raises(NonRetryable, match="own subject") as caught:
        await loop_back(Message("a.b", 1))
    assert isinstance(caught.value.__cause__, InvalidSubject)
    fixed = pipe(pub, subject="a.b")
    with pytest.raises(NonRetryable, match="own subject"):
        await fixed(Message("a.b", 1))
    with pytest.raises(NonRetryable, match="invalid target"):
        await pipe(pub, subject=lambda s: s + ".*")(Message("a.b", 1))
    with pytest.raises(InvalidSubject):
        pipe(pub, subject="a.*")
    with pytest.raises(TypeError, match="callable"):
        pipe_map(pub, 3, subject="x")  # type: ignore[call-overload]
    assert len(errors) == 1


async def test_dead_letter_observer_sees_map_failures_and_the_error_is_raised() -> None:
    bus: channel.Bus[object] = channel.Bus()
    pub = channel.Publisher(bus)
    observed: list[tuple[object, str]] = []

    async def observe(message: Message[object], error: Exception) -> None:
        observed.append((message.payload, str(error)))

    def explode(message: Message[object]) -> str:
        raise ValueError("cannot map")

    handler = pipe_map(pub, explode, subject="out", dead_letter=observe)
    with pytest.raises(ValueError, match="cannot map"):
        await handler(Message("in", 5))
    assert observed == [(5, "cannot map")]


async def test_pipe_on_jetstream_carries_headers_id_and_a_trace_link_end_to_end(
    js: JetStreamContext, otel: Otel
) -> None:
    await jetstream.ensure_stream(js, name="CLEAN", subjects=["clean.>"])
    tel = otel.telemetry
    clean_pub = jetstream.Publisher(js, CODEC, telemetry=tel)
    forward = pipe(clean_pub, subject=lambda s: "clean." + s.split(".", 1)[1])
    source = jetstream.Subscriber(js, CODEC, stream=STREAM, telemetry=tel)
    await source.start("orders.>", chain(retry_ack(RetryPolicy(backoff=[0.05])))(forward))
    out = Inbox[Order]()
    sink = jetstream.Subscriber(js, CODEC, stream="CLEAN", telemetry=tel)
    await sink.start("clean.>", out)
    await jetstream.Publisher(js, CODEC, telemetry=tel).publish(
        "orders.eu", order(1), headers={"Tenant": "acme"}, message_id="order-1"
    )
    [got] = await out.wait_for(1)
    await source.close()
    await sink.close()
    assert (got.subject, got.id, got.headers["Tenant"]) == ("clean.eu", "order-1", "acme")
    assert got.payload == order(1)
    send_orders = otel.span("send orders.eu")
    process_orders = otel.span("process orders.>")
    send_clean = otel.span("send clean.eu")
    process_clean = otel.span("process clean.>")
    assert send_orders.context is not None
    assert process_orders.context is not None
    assert send_clean.context is not None
    # The pipe's consumer span links to the producer; its publish is a child of it;
    # the final consumer links to the pipe's publish: a chain of links, end to end.
    assert [link.context.span_id for link in process_orders.links] == [send_orders.context.span_id]
    assert send_clean.parent is not None
    assert send_clean.parent.span_id == process_orders.context.span_id
    assert [link.context.span_id for link in process_clean.links] == [send_clean.context.span_id]
    assert send_clean.context.trace_id == process_orders.context.trace_id


@pytest.mark.slow  # the redelivery back-off
async def test_pipe_failure_is_redelivered_and_the_copy_stored_once(js: JetStreamContext) -> None:
    """A publish that fails after an earlier one succeeded: the retry is de-duplicated."""
    await jetstream.ensure_stream(js, name="ITEMS", subjects=["items.>"])
    items_pub = jetstream.Publisher(js, StrCodec())
    attempts = 0
    done = asyncio.Event()

    async def split(message: Message[str]) -> AsyncIterator[str]:
        nonlocal attempts
        attempts += 1
        yield "first"
        if attempts == 1:
            raise ConnectionError("crashed mid-way")
        yield "second"
        done.set()

    sub = jetstream.Subscriber(js, StrCodec(), stream=STREAM)
    await sub.start("orders.>", pipe_flat_map(items_pub, split, subject="items.all"))
    await jetstream.Publisher(js, StrCodec()).publish("orders.x", "o", message_id="x-1")
    await asyncio.wait_for(done.wait(), 10)
    await sub.close()
    info = await js.stream_info("ITEMS")
    assert attempts == 2
    assert info.state.messages == 2  # "first" published twice, stored once


async def test_the_same_stream_warning_is_only_for_the_same_stream(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    """An ID already in another stream is a retried publish; in the source's own
    stream it is a derived ID that collides with the source's: only that warns."""
    await jetstream.ensure_stream(js, name="COPIES", subjects=["copies.>"])
    copies = jetstream.Publisher(js, CODEC)
    await copies.publish("copies.eu", order(1), message_id="order-1")  # an earlier attempt
    await jetstream.Publisher(js, CODEC).publish("orders.eu", order(1), message_id="order-1")
    await jetstream.Publisher(js, CODEC).publish("orders.other", order(2), message_id="o-2")
    forwarded = Inbox[Order]()

    async def and_count(message: Message[Order]) -> None:
        await forward(message)
        await forwarded(message)

    orders = jetstream.Publisher(js, CODEC)
    forward = pipe(
        copies, subject=lambda s: "copies." + s.split(".", 1)[1]
    )  # order-1 is in COPIES already: no warning
    same = pipe(orders, subject="orders.same")  # o-2 is in ORDERS already: a warning

    async def route(message: Message[Order]) -> None:
        if message.subject == "orders.eu":
            await and_count(message)
        elif message.subject == "orders.other":
            await same(message)
            await forwarded(message)

    sub = jetstream.Subscriber(
        js, CODEC, stream=STREAM, consumer_config={"filter_subjects": ["orders.eu", "orders.other"]}
    )
    with caplog.at_level("WARNING", logger="goflux"):
        await sub.start("orders.>", route)
        await forwarded.wait_for(2)
        await sub.close()
    warnings = [r.getMessage() for r in caplog.records if "stored nothing" in r.getMessage()]
    assert len(warnings) == 1
    assert "'orders.same'" in warnings[0]


async def test_a_pipe_whose_output_comes_back_to_it_stops_there() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    loops: list[str] = []

    def observe(message: Message[int], error: Exception) -> None:
        assert isinstance(error, NonRetryable)
        loops.append(message.subject)

    everything = Inbox[int]()
    await sub.start("orders.>", everything)
    await sub.start("orders.>", pipe(pub, subject=lambda s: s + ".copy", dead_letter=observe))
    await pub.publish("orders.a", 1)
    await everything.wait_for(2)
    await sub.close()  # drains: anything still in flight is handled
    assert [m.subject for m in everything.messages] == ["orders.a", "orders.a.copy"]
    assert loops == ["orders.a.copy"]
