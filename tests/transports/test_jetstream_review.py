"""JetStream defects found in the review of the subscription split, each on a real server."""

from __future__ import annotations

import asyncio

import pytest
from nats.js import JetStreamContext

from goflux import JsonCodec, Message, SubscribeError
from goflux.transports import jetstream
from tests.conftest import STREAM
from tests.models import Order

CODEC = JsonCodec(Order)


async def noop(_: Message[Order]) -> None:
    pass


async def test_deleting_an_ephemeral_consumer_fails_the_subscription(
    js: JetStreamContext,
) -> None:
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, expires=5.0)
    subscription = await sub.start("orders.>", noop)
    await asyncio.sleep(0.2)  # a pull request is open at the server
    await js.delete_consumer(STREAM, subscription.consumer)
    with pytest.raises(SubscribeError, match="deleted"):
        await asyncio.wait_for(subscription.wait(), 5)
    assert not subscription.running
    await sub.close()


@pytest.mark.parametrize("ordered", [False, True])
async def test_deleting_the_stream_fails_an_ephemeral_or_ordered_subscription(
    js: JetStreamContext, ordered: bool
) -> None:
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, expires=5.0, ordered=ordered)
    subscription = await sub.start("orders.>", noop)
    await asyncio.sleep(0.2)
    await js.delete_stream(STREAM)
    with pytest.raises(SubscribeError):
        await asyncio.wait_for(subscription.wait(), 5)
    await sub.close()
