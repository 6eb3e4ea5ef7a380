"""A JetStream message held by the application after its handler returned."""

from __future__ import annotations

import asyncio

from nats.js import JetStreamContext

from goflux import Message, StrCodec
from goflux.transports import jetstream
from goflux.transports.jetstream import JetStreamSubscription
from tests.conftest import STREAM, Otel


async def hold_one(
    js: JetStreamContext, otel: Otel
) -> tuple[Message[str], JetStreamSubscription[str]]:
    """Publish one order and return it unsettled (``manual_ack``), with its subscription."""
    await jetstream.Publisher(js, StrCodec()).publish("orders.created", "o-1")
    held: list[Message[str]] = []
    got = asyncio.Event()

    async def keep(msg: Message[str]) -> None:
        held.append(msg)  # settled later, outside the handler
        got.set()

    subscriber = jetstream.Subscriber(
        js, StrCodec(), stream=STREAM, manual_ack=True, telemetry=otel.telemetry
    )
    subscription = await subscriber.start("orders.created", keep)
    async with asyncio.timeout(10):
        await got.wait()
    return held[0], subscription
