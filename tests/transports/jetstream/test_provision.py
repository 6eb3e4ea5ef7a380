"""Stream and consumer provisioning against a real nats-server."""

from __future__ import annotations

import nats
import pytest
from nats.js import JetStreamContext

from goflux.transports import jetstream


async def test_ensure_stream_creates_then_is_idempotent(bare_js: JetStreamContext) -> None:
    created = await jetstream.ensure_stream(
        bare_js, name="EVENTS", subjects=["events.*"], storage="memory", max_msgs=1000
    )
    again = await jetstream.ensure_stream(
        bare_js, name="EVENTS", subjects=["events.*"], storage="memory", max_msgs=1000
    )
    assert created.config.max_msgs == again.config.max_msgs == 1000
    assert again.config.storage == "memory"
    assert again.created == created.created  # not recreated
    assert [s.config.name for s in await bare_js.streams_info()] == ["EVENTS"]


async def test_limits_change_on_a_live_stream(bare_js: JetStreamContext) -> None:
    # The reference "limits-based stream" walk-through, done with ensure_stream.
    await jetstream.ensure_stream(bare_js, name="events", subjects=["events.*"], storage="file")
    for n in range(6):
        await bare_js.publish(f"events.e{n % 3}", b"")
    assert (await bare_js.stream_info("events")).state.messages == 6

    info = await jetstream.ensure_stream(bare_js, name="events", subjects=["events.*"], max_msgs=4)
    assert info.config.max_msgs == 4
    assert (await bare_js.stream_info("events")).state.messages == 4

    for _ in range(10):
        await bare_js.publish("events.big", b"x" * 50)
    info = await jetstream.ensure_stream(
        bare_js, name="events", subjects=["events.*"], max_msgs=4, max_bytes=300
    )
    assert info.config.max_bytes == 300
    assert (await bare_js.stream_info("events")).state.bytes <= 300

    info = await jetstream.ensure_stream(
        bare_js, name="events", subjects=["events.*"], max_age=3600.0, max_msgs_per_subject=1
    )
    assert info.config.max_age == pytest.approx(3600.0)
    assert info.config.max_msgs == 4  # settings not given keep their values
    assert (await bare_js.stream_info("events")).state.messages == 1  # one subject left


async def test_retention_duplicate_window_replicas_and_discard(bare_js: JetStreamContext) -> None:
    info = await jetstream.ensure_stream(
        bare_js,
        name="WORK",
        subjects=["work.>"],
        retention="workqueue",
        duplicate_window=30.0,
        num_replicas=1,
        discard="new",
        max_msgs=2,
    )
    assert info.config.retention == "workqueue"
    assert info.config.duplicate_window == pytest.approx(30.0)
    assert info.config.discard == "new"
    await bare_js.publish("work.a", b"1")
    await bare_js.publish("work.a", b"2")
    with pytest.raises(nats.js.errors.APIError, match="maximum messages exceeded"):
        await bare_js.publish("work.a", b"3")  # discard new: the limit refuses, keeps old


async def test_overlapping_subjects_name_the_other_stream(bare_js: JetStreamContext) -> None:
    await jetstream.ensure_stream(bare_js, name="ORDERS", subjects=["orders.>"])
    with pytest.raises(jetstream.SubjectOverlap, match=r"overlap with ORDERS") as info:
        await jetstream.ensure_stream(bare_js, name="EU", subjects=["orders.eu.*"])
    assert info.value.streams == ("ORDERS",)
    assert info.value.err_code == 10065


async def test_an_impossible_change_is_an_incompatible_config(bare_js: JetStreamContext) -> None:
    await jetstream.ensure_stream(bare_js, name="S", subjects=["s.>"], storage="file")
    with pytest.raises(jetstream.IncompatibleConfig, match="storage type"):
        await jetstream.ensure_stream(bare_js, name="S", subjects=["s.>"], storage="memory")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"name": "a.b", "subjects": ["x"]}, ValueError, "invalid stream name"),
        ({"name": "S", "subjects": []}, ValueError, "non-empty list"),
        ({"name": "S", "subjects": "x.>"}, ValueError, "non-empty list"),
        ({"name": "S", "subjects": ["x..y"]}, ValueError, "empty token"),
        ({"name": "S", "subjects": ["x"], "max_msg": 1}, TypeError, "unknown stream option"),
    ],
)
async def test_bad_stream_input_is_refused_before_the_server(
    bare_js: JetStreamContext, kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        await jetstream.ensure_stream(bare_js, **kwargs)  # type: ignore[arg-type]


async def test_ensure_consumer_durable_idempotent_and_updatable(bare_js: JetStreamContext) -> None:
    await jetstream.ensure_stream(bare_js, name="S", subjects=["s.>"])
    first = await jetstream.ensure_consumer(
        bare_js, stream="S", name="worker", filter_subject="s.jobs.>", ack_wait=10, max_deliver=5
    )
    again = await jetstream.ensure_consumer(
        bare_js, stream="S", name="worker", filter_subject="s.jobs.>", ack_wait=10, max_deliver=5
    )
    assert again.created == first.created
    assert (again.config.durable_name, again.config.ack_wait) == ("worker", 10.0)
    updated = await jetstream.ensure_consumer(
        bare_js, stream="S", name="worker", filter_subject="s.jobs.>", max_deliver=7, backoff=[1, 5]
    )
    assert updated.config.max_deliver == 7
    assert updated.config.backoff == [1.0, 5.0]


async def test_ensure_consumer_options_and_errors(bare_js: JetStreamContext) -> None:
    await jetstream.ensure_stream(bare_js, name="S", subjects=["s.>"])
    ephemeral = await jetstream.ensure_consumer(
        bare_js,
        stream="S",
        deliver_policy="by_start_sequence",
        opt_start_seq=3,
        inactive_threshold=5,
    )
    assert ephemeral.name
    assert not ephemeral.config.durable_name
    assert ephemeral.config.opt_start_seq == 3
    multi = await jetstream.ensure_consumer(
        bare_js, stream="S", name="multi", filter_subjects=["s.a", "s.b"], max_ack_pending=10
    )
    assert sorted(multi.config.filter_subjects or []) == ["s.a", "s.b"]

    with pytest.raises(jetstream.StreamNotFound):
        await jetstream.ensure_consumer(bare_js, stream="NOPE", name="c")
    with pytest.raises(jetstream.IncompatibleConfig, match="ack policy"):
        await jetstream.ensure_consumer(bare_js, stream="S", name="multi", ack_policy="all")
    with pytest.raises(TypeError, match="unknown consumer option"):
        await jetstream.ensure_consumer(bare_js, stream="S", name="x", ack_wiat=3)
    with pytest.raises(ValueError, match="pull consumers"):
        await jetstream.ensure_consumer(bare_js, stream="S", name="x", deliver_subject="push.here")
    with pytest.raises(ValueError, match="invalid consumer name"):
        await jetstream.ensure_consumer(bare_js, stream="S", name="has space")
