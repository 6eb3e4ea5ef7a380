"""Message schedules (ADR-51) against a real nats-server: @at, @every, cron, cancel, refusals.

The server produces a scheduled message itself, from the schedule message's body and
headers: these tests check it arrives at the target on time, typed, with the
producer's trace context, and that every refusal names what was refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone

import nats
import pytest
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from goflux import (
    FeatureUnsupported,
    InvalidHeader,
    InvalidSchedule,
    InvalidSubject,
    JsonCodec,
    Message,
    NotASchedule,
    PublishError,
    StreamFeatureDisabled,
)
from goflux.testing import NatsServer, server_binary
from goflux.transports import jetstream
from goflux.transports.jetstream import Outgoing, Schedule, cancel_schedule
from goflux.transports.jetstream._features import header_feature
from goflux.transports.jetstream._schedule import _delete as delete_message
from tests.conftest import Otel
from tests.models import Order, order

CODEC = JsonCodec(Order)
STREAM = "SCHED"


@pytest.fixture
async def sched_js(bare_js: JetStreamContext) -> JetStreamContext:
    await jetstream.ensure_stream(
        bare_js,
        name=STREAM,
        subjects=["schedules.>", "orders.>"],
        allow_msg_schedules=True,
        allow_msg_ttl=True,
    )
    return bare_js


class Arrivals:
    """A raw JetStream subscription: each message with its wall-clock arrival.

    The server stores a scheduled message in the stream without publishing it on
    its subject, so a core subscription sees nothing: a consumer does."""

    def __init__(self) -> None:
        self.messages: list[tuple[float, Msg]] = []
        self._changed = asyncio.Event()

    async def on_message(self, msg: Msg) -> None:
        self.messages.append((time.time(), msg))
        self._changed.set()

    async def until(self, count: int, within: float) -> list[tuple[float, Msg]]:
        """Wait until ``count`` messages arrived (fails after ``within`` seconds)."""
        async with asyncio.timeout(within):
            while len(self.messages) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.messages


async def arrivals(js: JetStreamContext, subject: str) -> Arrivals:
    seen = Arrivals()
    await js.subscribe(subject, stream=STREAM, cb=seen.on_message, ordered_consumer=True)
    return seen


async def held(js: JetStreamContext, subject: str) -> int:
    """How many messages ``subject`` of the stream holds."""
    info = await js.stream_info(STREAM, subjects_filter=subject)
    return (info.state.subjects or {}).get(subject, 0)


# ---------------------------------------------------------------- the forms, on time


@pytest.mark.slow
async def test_an_at_schedule_2s_ahead_arrives_typed_within_a_second_of_its_time_not_before(
    sched_js: JetStreamContext,
) -> None:
    got: list[tuple[float, Message[Order]]] = []
    arrived = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        got.append((time.time(), msg))
        arrived.set()

    subscription = await jetstream.Subscriber(sched_js, CODEC, stream=STREAM).start(
        "orders.due", handle
    )
    due = datetime.now(UTC) + timedelta(seconds=2)
    receipt = await jetstream.Publisher(sched_js, CODEC).publish(
        "schedules.o1", order(1), schedule=Schedule.at(due), target="orders.due"
    )
    assert receipt.stream == STREAM
    assert await held(sched_js, "schedules.o1") == 1  # held until its time
    await asyncio.wait_for(arrived.wait(), 10)
    await subscription.stop()
    [(when, msg)] = got
    late = when - due.timestamp()
    assert 0 <= late < 1.0, f"arrived {late:+.3f}s from its time"
    assert msg.payload == order(1)
    assert msg.subject == "orders.due"
    assert await held(sched_js, "schedules.o1") == 0  # a one-shot schedule is gone after


@pytest.mark.slow
async def test_every_second_gives_3_messages_in_3_8s_and_cancelling_stops_it(
    sched_js: JetStreamContext,
) -> None:
    ticks = await arrivals(sched_js, "orders.tick")
    publisher = jetstream.Publisher(sched_js, CODEC)
    start = time.time()
    await publisher.publish(
        "schedules.tick", order(1), schedule=Schedule.every(1), target="orders.tick"
    )
    await ticks.until(3, within=3.8 - (time.time() - start))
    assert await cancel_schedule(sched_js, stream=STREAM, subject="schedules.tick") == 1
    count = len(ticks.messages)
    # The witness: a second @every 1s schedule; two of its firings later, the
    # cancelled one would have fired at least once more.
    clock = await arrivals(sched_js, "orders.clock")
    await publisher.publish(
        "schedules.clock", order(2), schedule=Schedule.every(1), target="orders.clock"
    )
    await clock.until(2, within=5)
    assert len(ticks.messages) == count
    assert await cancel_schedule(sched_js, stream=STREAM, subject="schedules.>") == 1
    assert await cancel_schedule(sched_js, stream=STREAM, subject="schedules.>") == 0


@pytest.mark.slow
async def test_a_cron_schedule_fires_every_second(sched_js: JetStreamContext) -> None:
    seen = await arrivals(sched_js, "orders.cron")
    await jetstream.Publisher(sched_js, CODEC).publish(
        "schedules.cron",
        order(1),
        schedule=Schedule.cron("* * * * * *", time_zone="Europe/Berlin"),
        target="orders.cron",
    )
    [(first, _), (second, msg)] = await seen.until(2, within=4)
    assert 0.5 < second - first < 1.5
    assert CODEC.decode(msg.data) == order(1)
    assert (msg.headers or {})["Nats-Scheduler"] == "schedules.cron"
    assert await cancel_schedule(sched_js, stream=STREAM, subject="schedules.cron") == 1


async def test_the_scheduled_message_carries_headers_and_the_producers_trace(
    sched_js: JetStreamContext, otel: Otel
) -> None:
    got: list[Message[Order]] = []
    arrived = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        got.append(msg)
        arrived.set()

    subscriber = jetstream.Subscriber(sched_js, CODEC, stream=STREAM, telemetry=otel.telemetry)
    subscription = await subscriber.start("orders.traced", handle)
    publisher = jetstream.Publisher(sched_js, CODEC, telemetry=otel.telemetry)
    await publisher.publish(
        "schedules.traced",
        order(7),
        headers={"Tenant": "acme"},
        schedule=Schedule.at(datetime.now(UTC)),  # due now: sent at once
        target="orders.traced",
    )
    await asyncio.wait_for(arrived.wait(), 10)
    await subscription.stop()
    [msg] = got
    assert msg.payload == order(7)
    assert msg.headers == {"Tenant": "acme"}
    producer = otel.span("send schedules.traced").context
    process = otel.span("process orders.traced")
    assert [(link.context.trace_id, link.context.span_id) for link in process.links] == [
        (producer.trace_id, producer.span_id)
    ]


async def test_outgoing_items_of_publish_many_carry_schedules(sched_js: JetStreamContext) -> None:
    seen = await arrivals(sched_js, "orders.batch.*")
    now = datetime.now(UTC)
    receipts = await jetstream.Publisher(sched_js, CODEC).publish_many(
        [
            Outgoing(f"schedules.batch.{n}", order(n), schedule=Schedule.at(now), target=target)
            for n, target in enumerate(["orders.batch.a", "orders.batch.b"])
        ]
    )
    assert [r.sequence for r in receipts] == [1, 2]
    got = await seen.until(2, within=10)
    assert sorted(m.subject for _, m in got) == ["orders.batch.a", "orders.batch.b"]


# ---------------------------------------------------------------- the headers


def test_each_form_renders_its_header_value() -> None:
    moment = datetime(2030, 1, 2, 4, 4, 5, tzinfo=UTC) + timedelta(hours=-1)
    assert Schedule.at(moment).headers("orders.x") == {
        "Nats-Schedule": "@at 2030-01-02T03:04:05.000000Z",
        "Nats-Schedule-Target": "orders.x",
    }
    assert Schedule.every(timedelta(minutes=5)).pattern == "@every 300s"
    assert Schedule.every(1.5).pattern == "@every 1500000us"
    cron = Schedule.cron(" 0  */5 * * * * ", time_zone="America/New_York", ttl=60)
    assert cron.headers("orders.x") == {
        "Nats-Schedule": "0 */5 * * * *",
        "Nats-Schedule-Target": "orders.x",
        "Nats-Schedule-Time-Zone": "America/New_York",
        "Nats-Schedule-TTL": "60",
    }
    assert Schedule.cron("@hourly").pattern == "@hourly"
    assert (Schedule.at(moment).recurring, cron.recurring) == (False, True)


def test_an_at_schedule_writes_a_four_digit_year_and_refuses_one_out_of_range() -> None:
    assert Schedule.at(datetime(999, 1, 1, tzinfo=UTC)).pattern == "@at 0999-01-01T00:00:00.000000Z"
    west = timezone(timedelta(hours=-5))
    with pytest.raises(ValueError, match="outside the years 1 to 9999 in UTC") as caught:
        Schedule.at(datetime(9999, 12, 31, 23, tzinfo=west))
    assert isinstance(caught.value.__cause__, OverflowError)
    with pytest.raises(ValueError, match="outside the years 1 to 9999"):
        Schedule.at(datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))))


def test_only_the_headers_a_schedule_sets_need_its_version_and_rollup_needs_2_14() -> None:
    rollup = header_feature("Nats-Schedule-Rollup", "sub")
    assert rollup is not None
    assert rollup.since_text == "2.14.0"  # ADR-51 revision 4; 2.12 has no such header
    target = header_feature("Nats-Schedule-Target", "orders.a")
    assert target is not None
    assert target.since_text == "2.12.0"


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: Schedule.at(datetime(2030, 1, 1)), ValueError, "has no time zone"),
        (
            lambda: Schedule.at("2030-01-01"),  # type: ignore[arg-type]
            TypeError,
            "takes a datetime",
        ),
        (lambda: Schedule.every(0.5), ValueError, "at least a second"),
        (lambda: Schedule.every(timedelta(0)), ValueError, "at least a second"),
        (lambda: Schedule.every(True), TypeError, "timedelta or seconds"),
        (lambda: Schedule.every(1, ttl=0.5), ValueError, "ttl must be"),
        (lambda: Schedule.cron("*/5 * * * *"), ValueError, r"'\*/5 \* \* \* \*'.*5 fields.*'0 '"),
        (lambda: Schedule.cron("@every 1s"), ValueError, "use Schedule.at or Schedule.every"),
        (lambda: Schedule.cron("@fortnightly"), ValueError, "not a predefined schedule"),
        (lambda: Schedule.cron("@daily", time_zone="+02:00"), ValueError, "fixed offset"),
        (lambda: Schedule.cron("@daily", time_zone=""), ValueError, "not a zone name"),
    ],
)
def test_schedules_the_server_would_refuse_are_refused_here(
    make: object, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        make()  # type: ignore[operator]


async def test_a_schedule_and_its_target_go_together(sched_js: JetStreamContext) -> None:
    publisher = jetstream.Publisher(sched_js, CODEC)
    soon = Schedule.at(datetime.now(UTC) + timedelta(hours=1))
    with pytest.raises(ValueError, match="needs target="):
        await publisher.publish("schedules.a", order(1), schedule=soon)
    with pytest.raises(ValueError, match="needs a schedule="):
        await publisher.publish("schedules.a", order(1), target="orders.a")
    with pytest.raises(ValueError, match="another subject than the schedule's own"):
        await publisher.publish("schedules.a", order(1), schedule=soon, target="schedules.a")
    with pytest.raises(InvalidSubject):
        await publisher.publish("schedules.a", order(1), schedule=soon, target="orders.*")
    with pytest.raises(InvalidHeader, match="set by schedule= and target="):
        await publisher.publish(
            "schedules.a",
            order(1),
            schedule=soon,
            target="orders.a",
            server_headers={"nats-schedule-ttl": "5"},
        )
    with pytest.raises(TypeError, match="must be a Schedule"):
        await publisher.publish("schedules.a", order(1), schedule="@hourly", target="orders.a")  # type: ignore[arg-type]
    assert (await sched_js.stream_info(STREAM)).state.messages == 0


async def test_source_and_rollup_headers_go_by_hand_beside_a_schedule(
    sched_js: JetStreamContext,
) -> None:
    publisher = jetstream.Publisher(sched_js, CODEC)
    await publisher.publish(
        "schedules.sampled",
        order(1),
        schedule=Schedule.every(60),
        target="orders.sampled",
        server_headers={"Nats-Schedule-Source": "orders.raw", "Nats-Schedule-Rollup": "sub"},
    )
    stored = await sched_js.get_last_msg(STREAM, "schedules.sampled")
    assert (stored.headers or {})["Nats-Schedule-Source"] == "orders.raw"
    assert (stored.headers or {})["Nats-Schedule-Rollup"] == "sub"
    for owned in ("Nats-Schedule", "Nats-Schedule-Target", "Nats-Schedule-Time-Zone"):
        with pytest.raises(InvalidHeader, match=f"'{owned}' is set by schedule="):
            await publisher.publish(
                "schedules.x",
                order(1),
                schedule=Schedule.every(60),
                target="orders.x",
                server_headers={owned: "x"},
            )


async def test_a_schedule_replaces_what_its_subject_held_and_its_receipt_is_its_own(
    sched_js: JetStreamContext,
) -> None:
    publisher = jetstream.Publisher(sched_js, CODEC)
    for n in range(3):
        await publisher.publish("orders.o1", order(n))
    later = Schedule.at(datetime.now(UTC) + timedelta(hours=1))
    receipt = await publisher.publish(
        "orders.o1", order(9), schedule=later, target="orders.o2", message_id="s1"
    )
    # The server rolls the subject up (Nats-Rollup: sub): the three orders are gone.
    assert await held(sched_js, "orders.o1") == 1
    stored = await sched_js.get_last_msg(STREAM, "orders.o1")
    assert (receipt.stream, receipt.sequence, receipt.duplicate) == (STREAM, 4, False)
    assert stored.seq == receipt.sequence
    assert (stored.headers or {})["Nats-Rollup"] == "sub"
    # The same message ID within the duplicate window: a duplicate, nothing replaced.
    again = await publisher.publish(
        "orders.o1", order(10), schedule=Schedule.every(60), target="orders.o3", message_id="s1"
    )
    assert (again.sequence, again.duplicate) == (4, True)
    kept = await sched_js.get_last_msg(STREAM, "orders.o1")
    assert (kept.seq, (kept.headers or {})["Nats-Schedule"]) == (4, later.pattern)


async def test_a_subscriber_on_the_schedule_subject_gets_the_schedule_itself_at_once(
    sched_js: JetStreamContext,
) -> None:
    got: list[Message[Order]] = []
    arrived = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        got.append(msg)
        arrived.set()

    subscription = await jetstream.Subscriber(sched_js, CODEC, stream=STREAM).start(
        "schedules.>", handle
    )
    later = Schedule.at(datetime.now(UTC) + timedelta(hours=1))
    await jetstream.Publisher(sched_js, CODEC).publish(
        "schedules.r1", order(1), schedule=later, target="orders.due"
    )
    await asyncio.wait_for(arrived.wait(), 5)
    await subscription.stop()
    [msg] = got  # an hour early: the schedule message, not what it will produce
    assert msg.wire_headers.get("Nats-Schedule") == later.pattern
    assert msg.wire_headers.get("Nats-Scheduler") is None


# ---------------------------------------------------------------- cancelling


async def test_cancelling_deletes_schedules_only_never_other_messages(
    sched_js: JetStreamContext,
) -> None:
    publisher = jetstream.Publisher(sched_js, CODEC)
    for n in range(3):
        await publisher.publish("orders.o1", order(n))
    later = Schedule.at(datetime.now(UTC) + timedelta(hours=1))
    await publisher.publish("schedules.a", order(1), schedule=later, target="orders.a")
    await publisher.publish(
        "schedules.deep.b", order(2), schedule=Schedule.every(60), target="orders.b"
    )
    plain = await publisher.publish("schedules.plain", order(3))
    with pytest.raises(NotASchedule, match=r"'orders\.o1' of stream 'SCHED'.*sequence 3") as no:
        await cancel_schedule(sched_js, stream=STREAM, subject="orders.o1")
    assert (no.value.stream, no.value.subject, no.value.sequence) == (STREAM, "orders.o1", 3)
    assert isinstance(no.value, ValueError)
    with pytest.raises(NotASchedule):
        await cancel_schedule(sched_js, stream=STREAM, subject="schedules.plain")
    assert await cancel_schedule(sched_js, stream=STREAM, subject="schedules.>") == 2
    assert await cancel_schedule(sched_js, stream=STREAM, subject="schedules.a") == 0
    assert await cancel_schedule(sched_js, stream=STREAM, subject="orders.*") == 0
    info = await sched_js.stream_info(STREAM, subjects_filter=">")
    assert info.state.subjects == {"orders.o1": 3, "schedules.plain": 1}
    assert (await sched_js.get_last_msg(STREAM, "schedules.plain")).seq == plain.sequence


async def test_a_target_on_another_schedules_subject_hides_it_from_cancelling(
    sched_js: JetStreamContext,
) -> None:
    seen = await arrivals(sched_js, "schedules.a")
    publisher = jetstream.Publisher(sched_js, CODEC)
    first = await publisher.publish(
        "schedules.a", order(1), schedule=Schedule.every(60), target="orders.a"
    )
    now = Schedule.at(datetime.now(UTC))
    await publisher.publish("schedules.b", order(2), schedule=now, target="schedules.a")
    await seen.until(2, within=10)  # the schedule, then what schedules.b produced there
    with pytest.raises(NotASchedule, match=r"the schedule on 'schedules\.b' produced it"):
        await cancel_schedule(sched_js, stream=STREAM, subject="schedules.a")
    stored = await sched_js.get_msg(STREAM, first.sequence)  # not replaced: it still runs
    assert (stored.headers or {})["Nats-Schedule"] == "@every 60s"
    assert await cancel_schedule(sched_js, stream=STREAM, subject="schedules.>") == 0


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_a_schedule_gone_before_its_delete_counts_as_not_cancelled(
    bare_js: JetStreamContext, storage: str
) -> None:
    # Between reading a schedule and deleting it, it may fire or be replaced.
    await jetstream.ensure_stream(
        bare_js, name="GONE", subjects=["gone.>"], allow_msg_schedules=True, storage=storage
    )
    receipt = await jetstream.Publisher(bare_js, CODEC).publish("gone.a", order(1))
    assert await delete_message(bare_js, "GONE", receipt.sequence, "x") is True
    assert await delete_message(bare_js, "GONE", receipt.sequence, "x") is False
    assert await delete_message(bare_js, "GONE", 999, "x") is False


# ---------------------------------------------------------------- the server's refusals


async def test_a_target_outside_the_stream_is_refused_naming_target_and_stream(
    sched_js: JetStreamContext,
) -> None:
    await jetstream.ensure_stream(sched_js, name="ELSEWHERE", subjects=["elsewhere.>"])
    with pytest.raises(
        InvalidSchedule, match=r"'elsewhere\.x' must be a subject of stream 'SCHED'"
    ):
        await jetstream.Publisher(sched_js, CODEC).publish(
            "schedules.a",
            order(1),
            schedule=Schedule.at(datetime.now(UTC) + timedelta(hours=1)),
            target="elsewhere.x",
        )
    assert (await sched_js.stream_info(STREAM)).state.messages == 0


async def test_the_servers_refusals_name_what_it_refused(sched_js: JetStreamContext) -> None:
    publisher = jetstream.Publisher(sched_js, CODEC)
    with pytest.raises(InvalidSchedule, match="the schedule '61 \\* \\* \\* \\* \\*'") as caught:
        await publisher.publish(
            "schedules.a", order(1), schedule=Schedule.cron("61 * * * * *"), target="orders.a"
        )
    error = caught.value
    assert (error.reason, error.stream, error.schedule, error.target) == (
        "pattern",
        STREAM,
        "61 * * * * *",
        "orders.a",
    )
    assert error.permanent
    assert error.err_code == 10189
    assert error.__cause__ is not None
    with pytest.raises(InvalidSchedule, match="time zone 'Mars/Olympus_Mons'") as zone:
        await publisher.publish(
            "schedules.a",
            order(1),
            schedule=Schedule.cron("@daily", time_zone="Mars/Olympus_Mons"),
            target="orders.a",
        )
    assert zone.value.reason == "time_zone"
    [refused] = await publisher.publish_many(
        [Outgoing("schedules.b", order(2), schedule=Schedule.every(1), target="other.b")],
        return_exceptions=True,
    )
    assert isinstance(refused, InvalidSchedule)
    assert "'other.b' must be a subject of stream 'SCHED'" in str(refused)
    assert (await sched_js.stream_info(STREAM)).state.messages == 0


async def test_a_stream_without_allow_msg_schedules_says_so(bare_js: JetStreamContext) -> None:
    await jetstream.ensure_stream(bare_js, name="PLAIN", subjects=["plain.>"])
    with pytest.raises(StreamFeatureDisabled, match="allow_msg_schedules=True") as caught:
        await jetstream.Publisher(bare_js, CODEC).publish(
            "plain.schedule", order(1), schedule=Schedule.every(60), target="plain.target"
        )
    assert (caught.value.stream, caught.value.setting) == ("PLAIN", "allow_msg_schedules")


async def test_a_produced_ttl_needs_allow_msg_ttl(bare_js: JetStreamContext) -> None:
    await jetstream.ensure_stream(
        bare_js, name="NOTTL", subjects=["nottl.>"], allow_msg_schedules=True
    )
    with pytest.raises(StreamFeatureDisabled, match="allow_msg_ttl") as caught:
        await jetstream.Publisher(bare_js, CODEC).publish(
            "nottl.s", order(1), schedule=Schedule.every(60, ttl=5), target="nottl.t"
        )
    assert caught.value.stream == "NOTTL"


async def test_a_bad_schedule_in_an_atomic_batch_is_named(bare_js: JetStreamContext) -> None:
    await jetstream.ensure_stream(
        bare_js,
        name="ATOMS",
        subjects=["atoms.>"],
        allow_atomic=True,
        allow_msg_schedules=True,
    )
    publisher = jetstream.Publisher(bare_js, CODEC)
    bad = Schedule.cron("61 * * * * *")
    with pytest.raises(InvalidSchedule, match="the schedule '61") as caught:
        await publisher.publish_atomic(
            [
                Outgoing("atoms.s", order(1), schedule=bad, target="atoms.t"),
                Outgoing("atoms.plain", order(2)),
            ]
        )
    error = caught.value
    # The server names the commit (message 2); the error names the schedule.
    assert (error.reason, error.schedule, error.target) == ("pattern", bad.pattern, "atoms.t")
    assert (error.subject, error.stream, error.err_code) == ("atoms.s", "ATOMS", 10189)
    assert isinstance(error.__cause__, InvalidSchedule)
    assert isinstance(error.__cause__.__cause__, InvalidSchedule)  # the server's reply
    with pytest.raises(InvalidSchedule, match=r"one of the batch's schedules.*message 2") as two:
        await publisher.publish_atomic(
            [
                Outgoing("atoms.plain", order(2)),
                Outgoing("atoms.s1", order(1), schedule=bad, target="atoms.t"),
                Outgoing("atoms.s2", order(1), schedule=Schedule.every(5), target="atoms.t"),
            ]
        )
    assert two.value.__cause__ is not None
    assert (await bare_js.stream_info("ATOMS")).state.messages == 0


async def test_an_atomic_batch_names_the_setting_its_stream_lacks(
    bare_js: JetStreamContext,
) -> None:
    await jetstream.ensure_stream(bare_js, name="ATOMS", subjects=["atoms.>"], allow_atomic=True)
    publisher = jetstream.Publisher(bare_js, CODEC)
    later = Schedule.at(datetime.now(UTC) + timedelta(hours=1))
    cases = [
        (Outgoing("atoms.s", order(1), schedule=later, target="atoms.t"), "allow_msg_schedules"),
        (Outgoing("atoms.ttl", order(1), ttl=5), "allow_msg_ttl"),
    ]
    for item, setting in cases:
        with pytest.raises(StreamFeatureDisabled, match=f"{setting}=True") as caught:
            await publisher.publish_atomic([Outgoing("atoms.plain", order(2)), item])
        assert (caught.value.stream, caught.value.setting) == ("ATOMS", setting)
        assert "does not allow atomic batches" not in str(caught.value)
        assert isinstance(caught.value.__cause__, StreamFeatureDisabled)
    assert (await bare_js.stream_info("ATOMS")).state.messages == 0


async def test_a_scheduler_header_the_server_refuses_is_an_invalid_schedule(
    sched_js: JetStreamContext,
) -> None:
    with pytest.raises(InvalidSchedule, match="invalid scheduler") as caught:
        await jetstream.Publisher(sched_js, CODEC).publish(
            "orders.cancelled",
            order(1),
            server_headers={"Nats-Scheduler": "orders.cancelled", "Nats-Schedule-Next": "purge"},
        )
    assert (caught.value.reason, caught.value.err_code) == ("scheduler", 10212)


async def test_cancelling_on_a_missing_stream_says_so(sched_js: JetStreamContext) -> None:
    with pytest.raises(jetstream.StreamNotFound, match="NOPE"):
        await cancel_schedule(sched_js, stream="NOPE", subject="schedules.a")
    with pytest.raises(InvalidSubject):
        await cancel_schedule(sched_js, stream=STREAM, subject="schedules..a")


# ---------------------------------------------------------------- an older server


@pytest.fixture
async def old_js() -> AsyncIterator[JetStreamContext]:
    binary = await asyncio.to_thread(server_binary, "2.11.11")
    async with NatsServer(binary=binary) as server:
        nc = await nats.connect(server.url)
        try:
            yield nc.jetstream()
        finally:
            await nc.close()


async def test_each_form_the_server_lacks_is_refused_before_sending(
    old_js: JetStreamContext,
) -> None:
    await jetstream.ensure_stream(old_js, name="OLD", subjects=["old.>"])
    publisher = jetstream.Publisher(old_js, CODEC)
    soon = datetime.now(UTC) + timedelta(hours=1)
    with pytest.raises(FeatureUnsupported, match=r"message schedules.*2\.12\.0") as one_shot:
        await publisher.publish("old.s", order(1), schedule=Schedule.at(soon), target="old.t")
    assert one_shot.value.server_version == "2.11.11"
    for recurring in (Schedule.every(1), Schedule.cron("@hourly")):
        with pytest.raises(FeatureUnsupported, match=r"recurring message schedules.*2\.14\.0"):
            await publisher.publish("old.s", order(1), schedule=recurring, target="old.t")
    with pytest.raises(FeatureUnsupported, match="recurring"):
        await publisher.publish_many(
            [Outgoing("old.s", order(1), schedule=Schedule.every(5), target="old.t")]
        )
    with pytest.raises(FeatureUnsupported, match=r"cancelling the schedule 'old\.s'"):
        await cancel_schedule(old_js, stream="OLD", subject="old.s")
    assert (await old_js.stream_info("OLD")).state.messages == 0


def test_invalid_schedule_is_a_permanent_publish_error() -> None:
    error = InvalidSchedule("x", subject="s", stream="S", reason="pattern")
    assert isinstance(error, PublishError)
    assert error.permanent
    assert not error.may_be_stored
