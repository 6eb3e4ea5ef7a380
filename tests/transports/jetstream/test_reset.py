"""reset_consumer against a real nats-server (2.15): replays, the ack floor, refusals."""

from __future__ import annotations

import asyncio

import pytest
from nats.js import JetStreamContext

from goflux import StrCodec
from goflux.transports import jetstream
from tests.helpers import Inbox

STREAM = "RESET"
DEADLINE = 10.0


@pytest.fixture
async def stream(js: JetStreamContext) -> str:
    await jetstream.ensure_stream(js, name=STREAM, subjects=["jobs.>"])
    for n in range(1, 6):
        await js.publish("jobs.new", f"job-{n}".encode())
    return STREAM


async def acked_up_to(js: JetStreamContext, consumer: str, sequence: int) -> None:
    """Wait until the server counts ``consumer`` acknowledged up to ``sequence``."""
    async with asyncio.timeout(DEADLINE):
        while (await js.consumer_info(STREAM, consumer)).ack_floor.stream_seq < sequence:
            await js._nc.flush()


async def test_a_running_subscriber_replays_from_the_reset_sequence(
    js: JetStreamContext, stream: str
) -> None:
    await jetstream.ensure_consumer(js, stream=stream, name="replay")
    inbox: Inbox[str] = Inbox()
    subscriber = jetstream.Subscriber(js, StrCodec(), stream=stream, consumer="replay")
    async with await subscriber.start("jobs.>", inbox):
        await inbox.wait_for(5)
        await acked_up_to(js, "replay", 5)

        state = await jetstream.reset_consumer(js, stream, "replay", sequence=2)
        assert (state.sequence, state.delivered, state.ack_floor) == (2, 1, 1)
        assert (state.num_pending, state.num_ack_pending) == (4, 0)
        assert state.info.name == "replay"

        # The same subscriber, still running, gets 2..5 again, then new messages.
        await inbox.wait_for(9)
        await js.publish("jobs.new", b"job-6")
        await inbox.wait_for(10)
        assert inbox.payloads == [
            *(f"job-{n}" for n in range(1, 6)),
            *(f"job-{n}" for n in range(2, 7)),
        ]
    await acked_up_to(js, "replay", 6)


async def test_without_a_sequence_it_redelivers_from_the_ack_floor(
    js: JetStreamContext, stream: str
) -> None:
    await jetstream.ensure_consumer(js, stream=stream, name="floor", ack_wait=3600)
    pull = await js.pull_subscribe_bind("floor", stream)
    first = await pull.fetch(3, timeout=5)
    await first[0].ack_sync()  # 1 acknowledged, 2 and 3 held unacknowledged

    state = await jetstream.reset_consumer(js, stream, "floor")
    assert (state.sequence, state.ack_floor, state.num_ack_pending) == (2, 1, 0)
    assert state.num_pending == 4  # 2..5

    again = await pull.fetch(1, timeout=5)  # without the reset: 4, after an hour 2
    assert (again[0].data, again[0].metadata.sequence.stream) == (b"job-2", 2)
    await pull.unsubscribe()


async def test_the_ack_floor_reset_delivers_everything_after_it_with_counts_from_1(
    js: JetStreamContext, stream: str
) -> None:
    """After the floor, acknowledged or not; each message's max_deliver budget restarts."""
    await jetstream.ensure_consumer(js, stream=stream, name="budget", ack_wait=3600, max_deliver=2)
    pull = await js.pull_subscribe_bind("budget", stream)
    (first,) = await pull.fetch(1, timeout=5)
    await first.ack_sync()  # the floor: 1
    for delivery in (1, 2):  # job-2 refused once, then held at its last allowed delivery
        (held,) = await pull.fetch(1, timeout=5)
        assert (held.data, held.metadata.num_delivered) == (b"job-2", delivery)
        if delivery == 1:
            await js._nc.request(held.reply, b"-NAK", timeout=5)  # answered once taken
    rest = await pull.fetch(2, timeout=5)
    assert [m.data for m in rest] == [b"job-3", b"job-4"]
    await rest[0].ack_sync()  # job-3 acknowledged out of order: the floor stays at 1
    assert (await js.consumer_info(stream, "budget")).ack_floor.stream_seq == 1

    state = await jetstream.reset_consumer(js, stream, "budget")
    assert (state.sequence, state.ack_floor, state.num_pending) == (2, 1, 4)
    again = await pull.fetch(4, timeout=5)
    assert [(m.data, m.metadata.num_delivered) for m in again] == [
        (f"job-{n}".encode(), 1)
        for n in range(2, 6)  # job-3 too; job-2 at 1 of 2 again
    ]
    await pull.unsubscribe()


async def test_a_reset_names_what_is_missing_or_refused(js: JetStreamContext, stream: str) -> None:
    with pytest.raises(jetstream.StreamNotFound, match="consumer 'c' on stream 'NOPE'"):
        await jetstream.reset_consumer(js, "NOPE", "c")
    with pytest.raises(jetstream.ConsumerNotFound, match="consumer 'nope' on stream 'RESET'"):
        await jetstream.reset_consumer(js, stream, "nope", sequence=3)

    await jetstream.ensure_consumer(js, stream=stream, name="fresh", deliver_policy="new")
    with pytest.raises(jetstream.IncompatibleConfig, match="reset to stream sequence 3") as caught:
        await jetstream.reset_consumer(js, stream, "fresh", sequence=3)
    assert caught.value.err_code == 10204
    assert "not allowed" in str(caught.value)

    await jetstream.ensure_consumer(
        js,
        stream=stream,
        name="later",
        deliver_policy="by_start_sequence",
        opt_start_seq=3,
    )
    with pytest.raises(jetstream.IncompatibleConfig, match="below start seq"):
        await jetstream.reset_consumer(js, stream, "later", sequence=2)
    assert (await jetstream.reset_consumer(js, stream, "later", sequence=4)).sequence == 4

    with pytest.raises(ValueError, match="sequence=0"):
        await jetstream.reset_consumer(js, stream, "later", sequence=0)
    with pytest.raises(TypeError, match="sequence must be an int"):
        await jetstream.reset_consumer(js, stream, "later", sequence="3")  # type: ignore[arg-type]
