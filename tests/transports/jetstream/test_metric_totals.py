"""Metric totals are exact: every consumed message counted once, across a drain and a restart.

The counters are running totals reported by observable counters (goflux._otel.tally); these
tests read them with the SDK's own readers, with cumulative and with delta temporality,
and compare them with what the handlers saw on a real server.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry.sdk.metrics import Counter as SdkCounter
from opentelemetry.sdk.metrics import Histogram as SdkHistogram
from opentelemetry.sdk.metrics import MeterProvider, ObservableCounter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    InMemoryMetricReader,
    MetricsData,
    Sum,
)

from goflux import JsonCodec, Message, Telemetry
from goflux.transports import jetstream
from tests.conftest import STREAM
from tests.helpers import drained
from tests.models import Order, order

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
COUNT = 300
FAILING = {f"o-{n}" for n in range(0, COUNT, 10)}  # their first processing raises
DELTA = {
    SdkCounter: AggregationTemporality.DELTA,
    ObservableCounter: AggregationTemporality.DELTA,
    SdkHistogram: AggregationTemporality.DELTA,
}


def sums(data: MetricsData | None, name: str) -> Counter[tuple[tuple[str, object], ...]]:
    """Each attribute set's value of counter ``name`` (its count, for a histogram)."""
    found: Counter[tuple[tuple[str, object], ...]] = Counter()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != name:
                    continue
                assert isinstance(metric.data, Sum | Histogram)
                for point in metric.data.data_points:
                    value = point.count if isinstance(metric.data, Histogram) else point.value
                    found[tuple(sorted((point.attributes or {}).items()))] += int(value)
    return found


def by(totals: Counter[tuple[tuple[str, object], ...]], key: str) -> Counter[object]:
    """The totals summed by one attribute (None where a point lacks it)."""
    out: Counter[object] = Counter()
    for attributes, value in totals.items():
        out[dict(attributes).get(key)] += value
    return out


@pytest.mark.slow  # redeliveries, a drain and a restart
async def test_totals_equal_the_messages_handled_across_a_drain_and_a_restart(
    js: JetStreamContext,
) -> None:
    cumulative = InMemoryMetricReader()
    delta = InMemoryMetricReader(preferred_temporality=DELTA)
    provider = MeterProvider(metric_readers=[cumulative, delta])
    telemetry = Telemetry(meter_provider=provider)
    publisher = jetstream.Publisher(js, JsonCodec(Order))
    await publisher.publish_many(jetstream.Outgoing("orders.new", order(n)) for n in range(COUNT))
    await jetstream.ensure_consumer(
        js, stream=STREAM, name="totals", filter_subject="orders.new", max_ack_pending=50
    )
    handled: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    last_delivery: dict[str, int] = {}  # the delivery count each message was handled at
    enough = asyncio.Event()
    done = asyncio.Event()
    deltas: list[MetricsData | None] = []
    # The server's own record of the naks it applied: an advisory each, sent on the
    # stream's queue ahead of the message's redelivery, so every one is here once the
    # last redelivery has been handled.
    naked: list[bytes] = []

    async def nak_applied(msg: Msg) -> None:
        naked.append(msg.data)

    advisories = await js._nc.subscribe(
        f"$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.{STREAM}.totals", cb=nak_applied
    )

    async def handle(message: Message[Order]) -> None:
        key = message.payload.id
        if key in FAILING and not failed[key]:
            failed[key] += 1
            raise RuntimeError(f"first try of {key}")
        handled[key] += 1
        assert message.delivery is not None
        last_delivery[key] = message.delivery.num_delivered
        if sum(handled.values()) >= COUNT // 3:
            enough.set()
        if len(handled) == COUNT:
            done.set()

    subscriber = jetstream.Subscriber(
        js, JsonCodec(Order), stream=STREAM, consumer="totals", telemetry=telemetry
    )
    first = await subscriber.start("orders.new", handle)
    await enough.wait()
    deltas.append(delta.get_metrics_data())  # mid-run: the readers see totals so far
    await first.stop()  # drain: running handlers finish, the rest is handed back
    deltas.append(delta.get_metrics_data())
    second = await subscriber.start("orders.new", handle)
    await done.wait()
    await drained(js, STREAM, "totals")  # nothing left to arrive during the last stop
    await second.stop()
    deltas.append(delta.get_metrics_data())
    await advisories.drain()  # what was received is counted (nothing more comes)
    subscriptions = (first, second)

    # Every message handled successfully exactly once; each failing one failed once.
    assert set(handled) == {f"o-{n}" for n in range(COUNT)}
    assert set(handled.values()) == {1}
    assert set(failed) == FAILING
    assert set(failed.values()) == {1}
    processed = sum(s.handled + s.failed for s in subscriptions)
    assert processed == COUNT + len(FAILING)
    assert first.handled > 0
    assert second.handled > 0

    totals = cumulative.get_metrics_data()
    consumed = sums(totals, "messaging.client.consumed.messages")
    assert sum(consumed.values()) == processed
    durations = sums(totals, "messaging.process.duration")
    assert by(durations, "error.type") == {None: COUNT, "RuntimeError": len(FAILING)}
    settlements = by(sums(totals, "goflux.consumer.settlements"), "goflux.settlement.outcome")
    assert settlements["ack"] == COUNT
    # A nak for each failure, and one for each message the drain handed back (unstarted
    # or arriving while it drained): each one the server applied, and no other.
    assert settlements["nak"] == len(naked)
    assert settlements["nak"] >= len(FAILING)
    # Each nak'd message came back once. The server may also redeliver a message no
    # nak handed back: one it chose for the draining subscription's open pull request
    # just before the unsubscribe arrived, and then could not deliver to the inbox. It
    # requeues that one at once, and its delivery count counts the attempt, so that it
    # arrives as a redelivery. So there are at least as many redeliveries as naks,
    # and at most one per delivery count a handled message had gone past.
    redelivered = sum(s.redelivered for s in subscriptions)
    assert settlements["nak"] <= redelivered <= sum(n - 1 for n in last_delivery.values())
    assert sum(sums(totals, "goflux.consumer.redeliveries").values()) == redelivered

    # The delta reader's points add up to the same totals.
    for name in ("messaging.client.consumed.messages", "goflux.consumer.settlements"):
        assert sum((sums(d, name) for d in deltas), Counter()) == sums(totals, name), name
    assert sum((sums(d, "messaging.process.duration") for d in deltas), Counter()) == sums(
        totals, "messaging.process.duration"
    )
    provider.shutdown()


async def test_telemetries_on_one_provider_add_to_the_same_totals(js: JetStreamContext) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    for count in (3, 4):  # two publishers, each with its own Telemetry on the provider
        publisher = jetstream.Publisher(
            js, JsonCodec(Order), telemetry=Telemetry(meter_provider=provider)
        )
        for n in range(count):
            await publisher.publish("orders.new", order(n))
    sent = sums(reader.get_metrics_data(), "messaging.client.sent.messages")
    assert sum(sent.values()) == 7
    assert len(sent) == 1  # one attribute set, not two that overwrite each other
    provider.shutdown()


async def test_redeliveries_handed_back_by_a_drain_are_counted(js: JetStreamContext) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    publisher = jetstream.Publisher(js, JsonCodec(Order))
    await publisher.publish_many(jetstream.Outgoing("orders.new", order(n)) for n in range(20))
    # Every message delivered once and refused, by a plain nats-py consumer.
    pull = await js.pull_subscribe("orders.new", durable="again", stream=STREAM)
    refused = 0
    while refused < 20:
        for msg in await pull.fetch(20 - refused, timeout=5):
            await msg.nak()
            refused += 1
    await pull.unsubscribe()
    subscriber = jetstream.Subscriber(
        js,
        JsonCodec(Order),
        stream=STREAM,
        consumer="again",
        telemetry=Telemetry(meter_provider=provider),
        concurrency=1,
        max_in_flight=10,
    )
    started = asyncio.Event()

    async def hold(message: Message[Order]) -> None:  # the first holds; nine wait behind
        started.set()
        await asyncio.Event().wait()

    subscription = await subscriber.start("orders.new", hold)
    await started.wait()
    while subscription.outstanding < 10:  # ten redeliveries received: one runs, nine wait
        await js._nc.flush()
    # The deadline passes with the first still running: it is cancelled, and it and
    # the nine behind it are handed back, never processed.
    await subscription.stop(timeout=0.1)
    assert subscription.handled == 0
    assert subscription.redelivered >= 10  # every one received was a redelivery
    redeliveries = sums(reader.get_metrics_data(), "goflux.consumer.redeliveries")
    assert sum(redeliveries.values()) == subscription.redelivered
    provider.shutdown()


@pytest.mark.slow  # a child process
def test_telemetries_made_before_and_after_the_global_provider_is_set_all_count(
    nats_url: str,
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.transports.jetstream.global_meter_job", nats_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=40,  # below the module's 60 s
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == {"global.early": 3, "global.explicit": 3, "global.late": 3}
