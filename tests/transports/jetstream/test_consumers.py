"""The consumers the pull engine reads from: admission and recovery, on a real server."""

from __future__ import annotations

import re

import pytest
from nats.js import JetStreamContext

from goflux import JsonCodec, Message, SubscribeError
from goflux.transports import jetstream
from goflux.transports.jetstream._consumers import (
    AcknowledgedConsumer,
    Admission,
    OrderedConsumer,
    Recovery,
    new_consumer_name,
    ordered_consumer_config,
)
from goflux.transports.jetstream._options import SubscriberOptions
from tests.conftest import STREAM
from tests.models import Order, order

CODEC = JsonCodec(Order)

OPTIONS = SubscriberOptions(max_in_flight=10, drain_timeout=1.0, ordered=True)


# The forms of a delivery's reply subject: the original one, and the newer one with a
# domain and an account hash after ACK, without and with a random token at the end.
FORMS = {
    "original": "$JS.ACK.{stream}.{consumer}.1.{sseq}.{cseq}.1700000000000000000.0",
    "domain": "$JS.ACK.hub.ACCHASH.{stream}.{consumer}.1.{sseq}.{cseq}.1700000000000000000.0",
    "token": "$JS.ACK.hub.ACCHASH.{stream}.{consumer}.1.{sseq}.{cseq}.1700000000000000000.0.x7",
}


def delivery(
    js: JetStreamContext, consumer: str, stream_seq: int, consumer_seq: int, form: str = "original"
) -> str:
    """A delivery's reply subject as the server addresses it: the facts are in it."""
    return FORMS[form].format(stream=STREAM, consumer=consumer, sseq=stream_seq, cseq=consumer_seq)


# What the client names the consumers it creates: 12 random characters of 62. Every
# delivery's reply subject carries the name, and nats-py's parser pays per character.
GENERATED_NAME = re.compile(r"[0-9A-Za-z]{12}")


def test_generated_consumer_names_are_short_random_and_distinct() -> None:
    names = [new_consumer_name() for _ in range(20_000)]
    assert all(GENERATED_NAME.fullmatch(name) for name in names)
    assert len(set(names)) == len(names)
    # Every character of the alphabet turns up, in every position.
    for position in range(12):
        assert len({name[position] for name in names}) == 62


@pytest.mark.parametrize("mode", ["ephemeral", "ordered"])
async def test_the_consumers_a_subscriber_creates_have_generated_names(
    js: JetStreamContext, mode: str
) -> None:
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, ordered=mode == "ordered")
    first = await sub.start("orders.>", ignore)
    second = await sub.start("orders.>", ignore)
    names = {first.consumer, second.consumer}
    assert len(names) == 2
    assert all(GENERATED_NAME.fullmatch(name) for name in names)
    assert {info.name for info in await js.consumers_info(STREAM)} == names
    await sub.close()


async def ignore(message: Message[Order]) -> None:
    """A handler that does nothing."""


async def ordered(js: JetStreamContext) -> OrderedConsumer:
    info = await js.add_consumer(STREAM, ordered_consumer_config("orders.>", OPTIONS, None))
    return OrderedConsumer(js, STREAM, info, subject="orders.>", options=OPTIONS)


@pytest.mark.parametrize("form", FORMS)
async def test_an_ordered_consumer_takes_only_the_next_delivery(
    js: JetStreamContext, form: str
) -> None:
    consumer = await ordered(js)
    name = consumer.name
    assert consumer.admit(delivery(js, name, 1, 1, form)) is Admission.TAKE
    assert consumer.admit(delivery(js, name, 2, 2, form)) is Admission.TAKE
    assert consumer.admit(delivery(js, "replaced", 3, 3, form)) is Admission.SKIP
    # Stream sequences may jump (a filter); consumer sequences may not.
    assert consumer.admit(delivery(js, name, 5, 3, form)) is Admission.TAKE
    assert consumer.admit(delivery(js, name, 7, 5, form)) is Admission.GAP  # 4 went missing
    assert consumer.admit(delivery(js, name, 6, 4, form)) is Admission.TAKE  # still expected
    # A delivery count other than 1 (never sent to an ordered consumer) is read in full.
    redelivered = delivery(js, name, 8, 5, form).replace(f".{name}.1.", f".{name}.2.")
    assert consumer.admit(redelivered) is Admission.TAKE
    assert consumer.admit(delivery(js, name, 9, 7, form)) is Admission.GAP
    assert consumer.admit(delivery(js, name, 9, 6, form)) is Admission.TAKE
    assert consumer.admit("$JS.ACK.not.enough") is Admission.SKIP


async def test_an_ordered_consumer_replaces_itself_after_the_last_message_taken(
    js: JetStreamContext,
) -> None:
    await jetstream.Publisher(js, CODEC).publish_many(
        jetstream.Outgoing("orders.a", order(n)) for n in range(5)
    )
    consumer = await ordered(js)
    first = consumer.name
    for seq in (1, 2, 3):
        assert consumer.admit(delivery(js, first, seq, seq)) is Admission.TAKE
    assert await consumer.recover("lost", "test") is Recovery.PULL
    assert consumer.name != first
    assert GENERATED_NAME.fullmatch(consumer.name)
    assert consumer.next_subject.endswith(f".CONSUMER.MSG.NEXT.{STREAM}.{consumer.name}")
    names = {info.name for info in await js.consumers_info(STREAM)}
    assert names == {consumer.name}  # the old one is deleted
    info = await js.consumer_info(STREAM, consumer.name)
    assert (info.config.deliver_policy, info.config.opt_start_seq) == ("by_start_sequence", 4)
    # A late delivery of the replaced consumer is not taken (nor read as a gap).
    assert consumer.admit(delivery(js, first, 4, 4)) is Admission.SKIP
    # The new consumer's first delivery is consumer sequence 1 again.
    assert consumer.admit(delivery(js, consumer.name, 4, 1)) is Admission.TAKE
    assert consumer.admit(delivery(js, first, 5, 1)) is Admission.SKIP
    assert consumer.admit(delivery(js, consumer.name, 5, 2)) is Admission.TAKE
    await consumer.remove()
    assert await js.consumers_info(STREAM) == []


@pytest.mark.parametrize("count", ["1", "2"])
async def test_an_ordered_consumer_resumes_after_the_stream_sequence_it_took_last(
    js: JetStreamContext, count: str
) -> None:
    """Read on the fast path (a first delivery) and the full one (any other count)."""
    await jetstream.Publisher(js, CODEC).publish_many(
        jetstream.Outgoing("orders.a", order(n)) for n in range(6)
    )
    consumer = await ordered(js)
    first = consumer.name
    assert consumer.admit(delivery(js, first, 1, 1)) is Admission.TAKE
    assert consumer.admit(delivery(js, first, 2, 2)) is Admission.TAKE
    # Stream sequence 4 as the consumer's third delivery (a filter skipped 3).
    last = delivery(js, first, 4, 3).replace(f".{first}.1.", f".{first}.{count}.")
    assert consumer.admit(last) is Admission.TAKE
    assert await consumer.recover("lost", "test") is Recovery.PULL
    info = await js.consumer_info(STREAM, consumer.name)
    assert (info.config.deliver_policy, info.config.opt_start_seq) == ("by_start_sequence", 5)
    await consumer.remove()


@pytest.mark.parametrize("policy", ["new", "last_per_subject"])
async def test_an_ordered_consumer_replaced_before_taking_anything_misses_nothing_written(
    js: JetStreamContext, policy: str
) -> None:
    options = SubscriberOptions(
        max_in_flight=10,
        drain_timeout=1.0,
        consumer_config={"deliver_policy": policy},
        ordered=True,
    )
    info = await js.add_consumer(STREAM, ordered_consumer_config("orders.>", options, None))
    consumer = OrderedConsumer(js, STREAM, info, subject="orders.>", options=options)
    await jetstream.Publisher(js, CODEC).publish_many(  # written while it was lost
        jetstream.Outgoing("orders.a", order(n)) for n in range(4)
    )
    assert await consumer.recover("lost", "test") is Recovery.PULL
    replaced = await js.consumer_info(STREAM, consumer.name)
    assert (replaced.config.deliver_policy, replaced.config.opt_start_seq) == (
        "by_start_sequence",
        1,
    )
    assert replaced.num_pending == 4
    await consumer.remove()


async def test_an_acknowledged_consumer_fails_only_when_it_is_gone(js: JetStreamContext) -> None:
    await jetstream.ensure_consumer(js, stream=STREAM, name="billing", filter_subject="orders.>")
    consumer = AcknowledgedConsumer(js, STREAM, "billing", ephemeral=False)
    assert consumer.admit(delivery(js, "anyone", 9, 9)) is Admission.TAKE
    assert await consumer.recover("lost", "reconnected") is Recovery.PULL
    assert await consumer.recover("unavailable", "503") is Recovery.WAIT  # it still exists
    deleted = await consumer.recover("deleted", "409")
    assert isinstance(deleted, SubscribeError)
    assert "'billing' was deleted" in str(deleted)
    await consumer.remove()  # a durable is not the subscription's to delete
    assert (await js.consumer_info(STREAM, "billing")).name == "billing"
    await js.delete_consumer(STREAM, "billing")
    gone = await consumer.recover("unavailable", "503")
    assert isinstance(gone, SubscribeError)
    assert "consumer of 'billing'" in str(gone)
