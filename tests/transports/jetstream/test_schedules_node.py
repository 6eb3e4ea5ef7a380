"""Message schedules between goflux and nats.js (tests/node/schedules.mjs), both ways.

nats.js 2.29 (the legacy client the project pins) has no typed schedules: it schedules
with the server's raw ``Nats-Schedule`` headers, and reads a scheduled message as any
other. goflux receives its scheduled message typed; it receives goflux's with the
codec's body, goflux's headers and the producer's trace context.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

from nats.js import JetStreamContext

from goflux import JsonCodec, Message
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports.jetstream import Schedule
from tests.conftest import Otel
from tests.models import Order, order
from tests.nodejs import run_node

CODEC = JsonCodec(Order)
STREAM = "SCHED"


async def schedules_stream(js: JetStreamContext) -> None:
    await jetstream.ensure_stream(
        js, name=STREAM, subjects=["schedules.>", "orders.>"], allow_msg_schedules=True
    )


async def test_goflux_receives_typed_what_nats_js_scheduled(
    nats_server: NatsServer, bare_js: JetStreamContext
) -> None:
    await schedules_stream(bare_js)
    got: list[Message[Order]] = []
    arrived = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        got.append(msg)
        arrived.set()

    subscription = await jetstream.Subscriber(bare_js, CODEC, stream=STREAM).start(
        "orders.from-node", handle
    )
    due = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    body = json.dumps({"id": "js-1", "customerId": "c-js", "amount": 4.5})
    ack = await run_node(
        "schedules.mjs",
        "publish",
        nats_server.url,
        "schedules.from-node",
        "orders.from-node",
        f"@at {due}",
        body,
    )
    assert ack == {"stream": STREAM, "seq": 1}
    await asyncio.wait_for(arrived.wait(), 10)
    await subscription.stop()
    [msg] = got
    assert msg.payload == Order(id="js-1", customerId="c-js", amount=4.5)
    assert msg.subject == "orders.from-node"


async def test_nats_js_receives_a_goflux_scheduled_message(
    nats_server: NatsServer, bare_js: JetStreamContext, otel: Otel
) -> None:
    await schedules_stream(bare_js)
    publisher = jetstream.Publisher(bare_js, CODEC, telemetry=otel.telemetry)
    await publisher.publish(
        "schedules.to-node",
        order(3),
        headers={"Tenant": "acme"},
        schedule=Schedule.at(datetime.now(UTC)),
        target="orders.to-node",
    )
    got = await run_node("schedules.mjs", "read", nats_server.url, STREAM, "orders.to-node")
    assert got["subject"] == "orders.to-node"
    assert CODEC.decode(got["data"].encode()) == order(3)
    headers = got["headers"]
    assert headers["X-Goflux-Tenant"] == "acme"
    assert headers["Nats-Scheduler"] == "schedules.to-node"
    assert headers["Nats-Schedule-Next"] == "purge"
    producer = otel.span("send schedules.to-node").context
    assert headers["traceparent"].split("-")[1:3] == [
        f"{producer.trace_id:032x}",
        f"{producer.span_id:016x}",
    ]
    assert not any(name.startswith("Nats-Schedule-Target") for name in headers)
