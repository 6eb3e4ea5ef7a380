"""JetStream publish options against a real server: TTLs, server headers, atomic batches."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from nats.js import JetStreamContext

from goflux import (
    ExpectationFailed,
    InvalidHeader,
    JsonCodec,
    PayloadTooLarge,
    PublishError,
    StreamFeatureDisabled,
)
from goflux.transports import jetstream
from goflux.transports.jetstream import Outgoing
from tests.conftest import Otel
from tests.models import Order, order

CODEC = JsonCodec(Order)


async def messages_in(js: JetStreamContext, stream: str) -> int:
    return (await js.stream_info(stream)).state.messages


async def until_messages(js: JetStreamContext, stream: str, count: int, within: float) -> float:
    """Wait until ``stream`` holds ``count`` messages: the server's state is the signal
    (each look is a round trip, as in ``tests.helpers.drained``)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while (held := await messages_in(js, stream)) != count:
        assert loop.time() - start < within, f"{stream} holds {held}, not {count}"
        await js._nc.flush()
    return loop.time() - start


async def stored_headers(js: JetStreamContext, stream: str, seq: int) -> dict[str, str]:
    raw = await js.get_msg(stream, seq)
    return dict(raw.headers or {})


@pytest.fixture
async def ttl_js(bare_js: JetStreamContext) -> JetStreamContext:
    await jetstream.ensure_stream(
        bare_js, name="TTL", subjects=["ttl.>"], allow_msg_ttl=True, allow_rollup_hdrs=True
    )
    return bare_js


# ------------------------------------------------------------------ TTLs


@pytest.mark.slow  # a TTL timer
async def test_a_message_with_ttl_1_is_gone_after_about_a_second(ttl_js: JetStreamContext) -> None:
    publisher = jetstream.Publisher(ttl_js, CODEC)
    await publisher.publish("ttl.keep", order(1))
    receipt = await publisher.publish("ttl.short", order(2), ttl=1)
    assert await messages_in(ttl_js, "TTL") == 2
    assert (await stored_headers(ttl_js, "TTL", receipt.sequence))["Nats-TTL"] == "1"
    waited = await until_messages(ttl_js, "TTL", 1, within=10)
    assert waited >= 0.5  # the server expired it, not the publish
    assert (await ttl_js.get_last_msg("TTL", "ttl.keep")).data == CODEC.encode(order(1))


async def test_ttl_forms(ttl_js: JetStreamContext) -> None:
    publisher = jetstream.Publisher(ttl_js, CODEC)
    a = await publisher.publish("ttl.a", order(1), ttl=timedelta(minutes=2))
    b = await publisher.publish("ttl.b", order(2), ttl="never")
    c = await publisher.publish("ttl.c", order(3), ttl=5.0)
    assert (await stored_headers(ttl_js, "TTL", a.sequence))["Nats-TTL"] == "120"
    assert (await stored_headers(ttl_js, "TTL", b.sequence))["Nats-TTL"] == "never"
    assert (await stored_headers(ttl_js, "TTL", c.sequence))["Nats-TTL"] == "5"


@pytest.mark.parametrize("ttl", [0.5, 1.5, 0, -3, float("nan"), True, "1s", timedelta(0)])
async def test_a_ttl_the_server_would_cut_or_refuse_is_refused(
    ttl_js: JetStreamContext, ttl: object
) -> None:
    with pytest.raises(ValueError, match="ttl must be"):
        await jetstream.Publisher(ttl_js, CODEC).publish("ttl.a", order(1), ttl=ttl)  # type: ignore[arg-type]
    assert await messages_in(ttl_js, "TTL") == 0


async def test_ttl_on_a_stream_without_allow_msg_ttl_says_so(js: JetStreamContext) -> None:
    with pytest.raises(StreamFeatureDisabled, match="allow_msg_ttl=True") as caught:
        await jetstream.Publisher(js, CODEC).publish("orders.a", order(1), ttl=1)
    assert caught.value.stream == "ORDERS"
    assert caught.value.setting == "allow_msg_ttl"
    assert caught.value.permanent
    assert await messages_in(js, "ORDERS") == 0


@pytest.mark.slow  # a TTL timer
async def test_publish_many_items_carry_ttls(ttl_js: JetStreamContext) -> None:
    publisher = jetstream.Publisher(ttl_js, CODEC)
    receipts = await publisher.publish_many(
        [Outgoing("ttl.a", order(1), ttl=1), Outgoing("ttl.b", order(2))]
    )
    assert (await stored_headers(ttl_js, "TTL", receipts[0].sequence))["Nats-TTL"] == "1"
    assert "Nats-TTL" not in await stored_headers(ttl_js, "TTL", receipts[1].sequence)
    await until_messages(ttl_js, "TTL", 1, within=10)


# ------------------------------------------------------- server headers


async def test_a_rollup_sent_as_a_server_header_rolls_up(ttl_js: JetStreamContext) -> None:
    publisher = jetstream.Publisher(ttl_js, CODEC)
    for n in range(3):
        await publisher.publish("ttl.state", order(n))
    await publisher.publish("ttl.state", order(9), server_headers={"Nats-Rollup": "sub"})
    assert await messages_in(ttl_js, "TTL") == 1


async def test_a_rollup_on_a_stream_that_denies_it_says_which_setting(
    js: JetStreamContext,
) -> None:
    with pytest.raises(StreamFeatureDisabled, match="allow_rollup_hdrs"):
        await jetstream.Publisher(js, CODEC).publish(
            "orders.a", order(1), server_headers={"Nats-Rollup": "sub"}
        )


@pytest.mark.parametrize(
    ("server_headers", "why"),
    [
        ({"Nats-Msg-Id": "other"}, "use message_id="),
        ({"nats-msg-id": "other"}, "use message_id="),
        ({"Nats-TTL": "5"}, "use ttl="),
        ({"Nats-Batch-Id": "b"}, "publish_atomic"),
        ({"Tenant": "acme"}, "not one of the server's Nats-"),
        ({"Nats-Expected-Stream": "ORDERS"}, "given twice"),
        ({"Nats-Rollup": "sub\r\nNats-Msg-Id: x"}, "CR, LF"),
    ],
)
async def test_server_headers_cannot_contradict_goflux_options(
    js: JetStreamContext, server_headers: dict[str, str], why: str
) -> None:
    with pytest.raises(InvalidHeader, match=why):
        await jetstream.Publisher(js, CODEC).publish(
            "orders.a",
            order(1),
            message_id="m-1",
            expected_stream="ORDERS",
            server_headers=server_headers,
        )
    assert await messages_in(js, "ORDERS") == 0


async def test_expectations_by_hand_work_like_the_options(js: JetStreamContext) -> None:
    publisher = jetstream.Publisher(js, CODEC)
    await publisher.publish("orders.a", order(1))
    with pytest.raises(ExpectationFailed):
        await publisher.publish(
            "orders.a", order(2), server_headers={"Nats-Expected-Last-Sequence": "7"}
        )
    receipt = await publisher.publish(
        "orders.a", order(2), server_headers={"Nats-Expected-Last-Sequence": "1"}
    )
    assert receipt.sequence == 2


async def test_a_user_header_named_nats_msg_id_cannot_change_the_message_id(
    js: JetStreamContext,
) -> None:
    publisher = jetstream.Publisher(js, CODEC)
    first = await publisher.publish(
        "orders.a", order(1), message_id="m-1", headers={"Nats-Msg-Id": "sneaky"}
    )
    stored = await stored_headers(js, "ORDERS", first.sequence)
    assert stored["Nats-Msg-Id"] == "m-1"
    assert stored["X-Goflux-Nats-Msg-Id"] == "sneaky"
    again = await publisher.publish(
        "orders.a", order(1), message_id="m-1", headers={"Nats-Msg-Id": "different"}
    )
    assert again.duplicate  # de-duplicated on message_id, whatever the user header says


# -------------------------------------------------------- atomic batches


@pytest.fixture
async def atomic_js(bare_js: JetStreamContext) -> JetStreamContext:
    await jetstream.ensure_stream(
        bare_js, name="BATCH", subjects=["batch.>"], allow_atomic=True, max_msg_size=1024
    )
    return bare_js


def items(count: int, **overrides: Outgoing[Order]) -> list[Outgoing[Order]]:
    batch = [Outgoing(f"batch.{n % 3}", order(n), message_id=f"b-{n}") for n in range(count)]
    for index, item in overrides.items():
        batch[int(index.removeprefix("at"))] = item
    return batch


async def test_an_atomic_batch_of_100_is_stored_whole(
    atomic_js: JetStreamContext, otel: Otel
) -> None:
    publisher = jetstream.Publisher(atomic_js, CODEC, telemetry=otel.telemetry)
    receipts = await publisher.publish_atomic(items(100))
    assert [r.sequence for r in receipts] == list(range(1, 101))
    assert {r.stream for r in receipts} == {"BATCH"}
    assert await messages_in(atomic_js, "BATCH") == 100
    stored = await stored_headers(atomic_js, "BATCH", 37)
    assert stored["Nats-Msg-Id"] == "b-36"
    assert "traceparent" in stored
    sends = [s for s in otel.spans() if s.name.startswith("send batch.")]
    assert len(sends) == 100


async def test_an_atomic_batch_the_server_rejects_stores_none(
    atomic_js: JetStreamContext,
) -> None:
    too_big = Order(id="x" * 2000, customerId="c", amount=1.0)  # over max_msg_size
    publisher = jetstream.Publisher(atomic_js, CODEC)
    with pytest.raises(PublishError, match=r"message 50 \(to 'batch.1'\).*size") as caught:
        await publisher.publish_atomic(items(100, at49=Outgoing("batch.1", too_big)))
    assert caught.value.permanent
    assert await messages_in(atomic_js, "BATCH") == 0
    # The publisher is still good for the next batch.
    assert len(await publisher.publish_atomic(items(3))) == 3
    assert await messages_in(atomic_js, "BATCH") == 3


async def test_a_failed_expectation_in_a_batch_stores_none(atomic_js: JetStreamContext) -> None:
    publisher = jetstream.Publisher(atomic_js, CODEC)
    await publisher.publish("batch.0", order(0))
    bad = Outgoing("batch.1", order(1), server_headers={"Nats-Expected-Last-Sequence": "99"})
    with pytest.raises(ExpectationFailed, match=r"did not hold at its commit.*wrong last sequence"):
        await publisher.publish_atomic([bad, *items(10)])
    assert await messages_in(atomic_js, "BATCH") == 1


async def test_an_atomic_batch_on_a_stream_without_allow_atomic_says_so(
    js: JetStreamContext,
) -> None:
    batch = [Outgoing("orders.a", order(n)) for n in range(5)]
    with pytest.raises(StreamFeatureDisabled, match="allow_atomic=True") as caught:
        await jetstream.Publisher(js, CODEC).publish_atomic(batch)
    assert caught.value.stream == "ORDERS"
    assert await messages_in(js, "ORDERS") == 0


async def test_bad_input_anywhere_in_a_batch_sends_nothing(atomic_js: JetStreamContext) -> None:
    publisher = jetstream.Publisher(atomic_js, CODEC)
    with pytest.raises(InvalidHeader):
        await publisher.publish_atomic(
            items(50, at49=Outgoing("batch.1", order(1), headers={"bad name": "x"}))
        )
    with pytest.raises(TypeError, match="item 2"):
        await publisher.publish_atomic([*items(2), "nope"])  # type: ignore[list-item]
    huge = Order(id="x" * 2_000_000, customerId="c", amount=1.0)
    with pytest.raises(PayloadTooLarge):
        await publisher.publish_atomic(items(5, at4=Outgoing("batch.1", huge)))
    assert await messages_in(atomic_js, "BATCH") == 0
    assert await publisher.publish_atomic([]) == []


async def test_a_batch_over_the_servers_limit_stores_none(atomic_js: JetStreamContext) -> None:
    with pytest.raises(PublishError, match="too large"):
        await jetstream.Publisher(atomic_js, CODEC).publish_atomic(items(1001))
    assert await messages_in(atomic_js, "BATCH") == 0


async def test_atomic_batch_messages_carry_ttls(bare_js: JetStreamContext) -> None:
    await jetstream.ensure_stream(
        bare_js, name="BT", subjects=["bt.>"], allow_atomic=True, allow_msg_ttl=True
    )
    receipts = await jetstream.Publisher(bare_js, CODEC).publish_atomic(
        [Outgoing("bt.a", order(1), ttl=60), Outgoing("bt.b", order(2))]
    )
    raw = await bare_js.get_msg("BT", receipts[0].sequence)
    assert (raw.headers or {})["Nats-TTL"] == "60"
    assert CODEC.decode(raw.data or b"") == order(1)


async def test_server_headers_in_another_case_are_sent_as_the_server_spells_them(
    ttl_js: JetStreamContext,
) -> None:
    publisher = jetstream.Publisher(ttl_js, CODEC)
    for n in range(2):
        await publisher.publish("ttl.state", order(n))
    with pytest.raises(ExpectationFailed):
        await publisher.publish(
            "ttl.state", order(5), server_headers={"nats-expected-last-sequence": "1"}
        )
    await publisher.publish("ttl.state", order(9), server_headers={"NATS-ROLLUP": "sub"})
    assert await messages_in(ttl_js, "TTL") == 1


@pytest.mark.parametrize(
    ("server_headers", "why"),
    [
        ({"NATS-Something-New": "1"}, "spell it Nats-"),
        ({"Nats-Expected-Last-Sequence": "abc"}, "sequence number"),
        ({"nats-expected-last-subject-sequence": "-1"}, "sequence number"),
    ],
)
async def test_server_headers_the_server_would_misread_are_refused(
    js: JetStreamContext, server_headers: dict[str, str], why: str
) -> None:
    with pytest.raises(InvalidHeader, match=why):
        await jetstream.Publisher(js, CODEC).publish(
            "orders.a", order(1), server_headers=server_headers
        )
    assert await messages_in(js, "ORDERS") == 0


async def test_a_batch_repeating_a_stored_message_id_says_so(atomic_js: JetStreamContext) -> None:
    publisher = jetstream.Publisher(atomic_js, CODEC)
    await publisher.publish("batch.0", order(0), message_id="b-1")
    with pytest.raises(PublishError, match="message ID of the batch repeats") as caught:
        await publisher.publish_atomic(items(5))  # its second message has ID b-1
    assert caught.value.permanent
    assert await messages_in(atomic_js, "BATCH") == 1
