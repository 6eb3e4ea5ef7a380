"""message_context() and forward_context(): the handled message, deep in the handler."""

from __future__ import annotations

import asyncio

import pytest
from nats.js import JetStreamContext

from goflux import Headers, InvalidHeader, JsonCodec, Message, chain, chain_publishers
from goflux.middleware import (
    RetryPolicy,
    current_headers,
    current_message,
    current_message_id,
    forward_context,
    message_context,
    retry_ack,
)
from goflux.transports import channel, jetstream
from tests.conftest import STREAM, Otel
from tests.helpers import Inbox, ScriptedPublisher
from tests.models import Order, order

CODEC = JsonCodec(Order)


def deep_in_the_code() -> tuple[str | None, Headers]:
    """Code that has no message parameter, several calls below the handler."""
    return current_message_id(), current_headers()


async def test_the_handled_message_is_reachable_from_nested_code_and_tasks() -> None:
    seen: list[object] = []

    async def handler(msg: Message[int]) -> None:
        seen.append(deep_in_the_code())
        seen.append(await asyncio.create_task(asyncio.to_thread(lambda: None)) or None)
        seen.append(await asyncio.create_task(spawned()))
        assert current_message() is msg

    async def spawned() -> str | None:
        return current_message_id()

    message = Message("s", 1, headers=Headers({"Tenant": "acme"}), id="m-1")
    await message_context()(handler)(message)
    assert seen == [("m-1", Headers({"Tenant": "acme"})), None, "m-1"]
    assert current_message() is None  # reset after the handler
    assert current_message_id() is None
    assert current_headers() == Headers()


async def test_current_headers_is_a_copy() -> None:
    async def handler(msg: Message[int]) -> None:
        current_headers()["Tenant"] = "changed"
        assert msg.headers["Tenant"] == "acme"

    await message_context()(handler)(Message("s", 1, headers=Headers({"Tenant": "acme"})))


async def test_forwarded_publishes_carry_headers_and_the_causing_id() -> None:
    recorder = ScriptedPublisher()
    publisher = forward_context()(recorder)

    async def handler(msg: Message[int]) -> None:
        await publisher.publish("out.a", 1)
        await publisher.publish("out.b", 2, headers={"tenant": "override", "Extra": "x"})
        await publisher.publish("out.c", 3, message_id="explicit")

    incoming = Headers([("Tenant", "acme"), ("Trace-Tag", "a"), ("Trace-Tag", "b")])
    await message_context()(handler)(Message("in", 0, headers=incoming, id="m-1"))
    await publisher.publish("out.e", 5)  # outside a handler: unchanged
    assert [call[3] for call in recorder.calls] == [None, None, "explicit", None]
    first, second, _, outside = recorder.calls
    assert first[2] == Headers(
        [*incoming.multi_items(), ("Causation-Id", "m-1"), ("Correlation-Id", "m-1")]
    )
    assert second[2] is not None
    assert second[2].get_all("tenant") == ["override"]  # what the caller set wins
    assert second[2].get_all("Trace-Tag") == ["a", "b"]
    assert second[2]["Extra"] == "x"
    assert outside[2] is None
    await publisher.close()
    assert recorder.closed


async def test_the_correlation_id_travels_along_a_chain() -> None:
    recorder = ScriptedPublisher()
    publisher = forward_context()(recorder)

    async def handler(msg: Message[int]) -> None:
        await publisher.publish("out", 1)

    incoming = Headers({"Correlation-Id": "first", "Causation-Id": "older"})
    await message_context()(handler)(Message("in", 0, headers=incoming, id="m-2"))
    headers = recorder.calls[0][2]
    assert headers is not None
    assert (headers["Correlation-Id"], headers["Causation-Id"]) == ("first", "m-2")


async def test_derived_ids_are_per_producer_and_subject() -> None:
    recorder = ScriptedPublisher()
    billing = forward_context(derive_ids="billing")(recorder)
    shipping = forward_context(derive_ids="shipping")(recorder)

    async def handler(msg: Message[int]) -> None:
        await billing.publish("events.billed", 1)
        await shipping.publish("events.shipped", 2)
        await billing.publish("events.billed", 3)
        await billing.publish("events.audit", 4)

    await message_context()(handler)(Message("in", 0, id="m-1"))
    assert [call[3] for call in recorder.calls] == [
        "m-1:billing:events.billed",
        "m-1:shipping:events.shipped",
        "m-1:billing:events.billed:2",
        "m-1:billing:events.audit",
    ]
    await message_context()(handler)(Message("in", 0))  # no ID: nothing to derive from
    assert [call[3] for call in recorder.calls[4:]] == [None, None, None, None]


async def test_odd_received_headers_do_not_fail_a_forwarded_publish() -> None:
    recorder = ScriptedPublisher()
    publisher = forward_context()(recorder)

    async def handler(msg: Message[int]) -> None:
        await publisher.publish("out", 1)

    received = Headers._trusted([("user/id", "7"), ("Note", "a\x00b")])  # as a peer sent them
    await message_context()(handler)(Message("in", 0, headers=received, id="m\x00x"))
    headers = recorder.calls[0][2]
    assert headers is not None
    assert "user/id" not in headers
    assert headers["Note"] == "a\\x00b"
    assert headers["Causation-Id"] == "m\\x00x"


async def test_forwarding_can_be_limited() -> None:
    recorder = ScriptedPublisher()
    only_tenant = forward_context(headers=["tenant"])(recorder)
    nothing = forward_context(headers=False)(recorder)

    async def handler(msg: Message[int]) -> None:
        await only_tenant.publish("out", 1)
        await nothing.publish("out", 2)

    incoming = Headers({"Tenant": "acme", "Secret": "s"})
    await message_context()(handler)(Message("in", 0, headers=incoming, id="m-9"))
    ids = [("Causation-Id", "m-9"), ("Correlation-Id", "m-9")]
    assert recorder.calls[0][2] == Headers([("Tenant", "acme"), *ids])
    assert recorder.calls[1][2] == Headers(ids)
    with pytest.raises(TypeError, match="collection of names"):
        forward_context(headers="Tenant")
    with pytest.raises(InvalidHeader):
        forward_context(derive_ids="bad\nname")


async def test_a_redelivered_relay_stores_its_output_once(js: JetStreamContext, otel: Otel) -> None:
    """Forwarded IDs make a relay idempotent: the retry's publish is de-duplicated."""
    await jetstream.ensure_stream(js, name="SHIPMENTS", subjects=["shipments.>"])
    shipments = chain_publishers(forward_context(derive_ids="shipping"))(
        jetstream.Publisher(js, CODEC, telemetry=otel.telemetry)
    )
    attempts = 0
    retried = asyncio.Event()

    async def relay(msg: Message[Order]) -> None:
        nonlocal attempts
        attempts += 1
        await shipments.publish("shipments.created", msg.payload)
        if attempts == 1:
            raise ConnectionError("crashed after publishing")
        retried.set()

    received = Inbox[Order]()
    out = jetstream.Subscriber(js, CODEC, stream="SHIPMENTS", telemetry=otel.telemetry)
    await out.start("shipments.>", received)
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, telemetry=otel.telemetry)
    handler = chain(retry_ack(RetryPolicy(backoff=[0.05])), message_context())(relay)
    await sub.start("orders.>", handler)
    await jetstream.Publisher(js, CODEC, telemetry=otel.telemetry).publish(
        "orders.created", order(1), headers={"Tenant": "acme"}, message_id="order-1"
    )
    [shipment] = await received.wait_for(1)
    await asyncio.wait_for(retried.wait(), 10)
    await sub.close()
    await out.close()
    info = await js.stream_info("SHIPMENTS")
    assert info.state.messages == 1  # published twice, stored once
    assert shipment.id == "order-1:shipping:shipments.created"
    assert shipment.headers["Tenant"] == "acme"
    assert shipment.headers["Causation-Id"] == "order-1"
    # Trace context: the shipment's producer span is a child of the relay's process span.
    process = [s for s in otel.spans() if s.name == "process orders.>"]
    sends = [s for s in otel.spans() if s.name == "send shipments.created"]
    assert len(process) == 2
    assert len(sends) == 2
    first_process = min(process, key=lambda s: s.start_time or 0)
    first_send = min(sends, key=lambda s: s.start_time or 0)
    assert first_send.parent is not None
    assert first_process.context is not None
    assert first_send.parent.span_id == first_process.context.span_id
    assert first_send.context is not None
    assert first_send.context.trace_id == first_process.context.trace_id


async def test_channel_forwarding_round_trip() -> None:
    bus = channel.Bus(codec=CODEC)
    out = channel.Bus(codec=CODEC)
    received = Inbox[Order]()
    await channel.Subscriber(out).start("out", received)
    forward = forward_context()(channel.Publisher(out))

    async def relay(msg: Message[Order]) -> None:
        await forward.publish("out", msg.payload)

    subscription = await channel.Subscriber(bus).start("in", message_context()(relay))
    await channel.Publisher(bus).publish("in", order(1), headers={"Tenant": "t"}, message_id="x")
    [msg] = await received.wait_for(1)
    await subscription.stop()
    assert (msg.id, msg.headers["Tenant"], msg.headers["Causation-Id"]) == (None, "t", "x")


async def test_the_correlation_id_travels_on_even_without_a_message_id() -> None:
    recorder = ScriptedPublisher()
    publisher = forward_context()(recorder)

    async def handler(msg: Message[int]) -> None:
        await publisher.publish("out", 1)

    await message_context()(handler)(Message("in", 0, headers=Headers({"Correlation-Id": "c"})))
    assert recorder.calls[0][2] == Headers({"Correlation-Id": "c"})
