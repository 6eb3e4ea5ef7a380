"""run_micro_batches: any subscriber into a foreachBatch-style function."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.js import JetStreamContext
from pyspark.sql import DataFrame, SparkSession

from goflux import JsonCodec
from goflux.transports import channel, jetstream
from goflux.transports import spark as gspark
from tests.spark.helpers import Sale, sale

STREAM = "SALES"


class Recorder:
    """A batch function that keeps each batch's rows (and can fail once)."""

    def __init__(self, fail_first: bool = False) -> None:
        self.batches: list[tuple[int, list[dict[str, Any]]]] = []
        self.fail_first = fail_first

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = [row.asDict(recursive=True) for row in df.collect()]
        if self.fail_first:
            self.fail_first = False
            raise RuntimeError("sink down")
        self.batches.append((batch_id, rows))


async def durable(js: JetStreamContext) -> jetstream.Subscriber[Sale]:
    await jetstream.ensure_stream(js, name=STREAM, subjects=["sales.>"])
    await jetstream.ensure_consumer(js, stream=STREAM, name="spark", ack_wait=60)
    return jetstream.Subscriber(
        js, JsonCodec(Sale), stream=STREAM, consumer="spark", max_in_flight=200
    )


async def test_jetstream_batches_are_acked_after_the_function_returns(
    spark: SparkSession, js: JetStreamContext
) -> None:
    subscriber = await durable(js)
    publisher = jetstream.Publisher(js, JsonCodec(Sale))
    await publisher.publish_many(jetstream.Outgoing("sales.new", sale(n)) for n in range(250))
    recorder = Recorder()
    stats = await gspark.run_micro_batches(
        spark, subscriber, "sales.>", recorder, max_messages=100, max_wait=0.5, max_batches=3
    )
    assert stats == gspark.MicroBatchStats(batches=3, messages=250)
    assert [(batch_id, len(rows)) for batch_id, rows in recorder.batches] == [
        (0, 100),
        (1, 100),
        (2, 50),
    ]
    rows = [row for _, batch in recorder.batches for row in batch]
    assert [row["seq"] for row in rows] == list(range(1, 251))
    assert rows[0]["id"] == "s-0"
    assert rows[0]["lines"] == [{"sku": "k-0", "quantity": 1, "tags": []}]
    assert {row["stream"] for row in rows} == {STREAM}
    info = await js.consumer_info(STREAM, "spark")
    assert (info.num_ack_pending, info.num_pending, info.num_redelivered) == (0, 0, 0)


async def test_a_failed_batch_is_handed_back_and_redelivered(
    spark: SparkSession, js: JetStreamContext
) -> None:
    subscriber = await durable(js)
    publisher = jetstream.Publisher(js, JsonCodec(Sale))
    await publisher.publish_many(jetstream.Outgoing("sales.new", sale(n)) for n in range(30))
    recorder = Recorder(fail_first=True)
    with pytest.raises(RuntimeError, match="sink down"):
        await gspark.run_micro_batches(
            spark, subscriber, "sales.>", recorder, max_messages=100, max_wait=0.5
        )
    assert recorder.batches == []
    stats = await gspark.run_micro_batches(
        spark, subscriber, "sales.>", recorder, max_messages=100, max_wait=0.5, max_batches=1
    )
    assert stats.messages == 30
    assert sorted(row["seq"] for row in recorder.batches[0][1]) == list(range(1, 31))
    info = await js.consumer_info(STREAM, "spark")
    assert (info.num_ack_pending, info.num_pending) == (0, 0)
    assert {row["num_delivered"] for row in recorder.batches[0][1]} == {2}


async def test_channel_subscriber_needs_and_uses_the_payload_type(spark: SparkSession) -> None:
    bus: channel.Bus[Sale] = channel.Bus()
    subscriber = channel.Subscriber(bus)
    recorder = Recorder()
    with pytest.raises(TypeError, match="payload_type"):
        await gspark.run_micro_batches(spark, subscriber, "sales.>", recorder)
    started = asyncio.Event()
    running = asyncio.create_task(
        gspark.run_micro_batches(
            spark,
            subscriber,
            "sales.>",
            recorder,
            payload_type=Sale,
            max_messages=5,
            max_wait=0.5,
            max_batches=2,
            started=started,
        )
    )
    await started.wait()
    async with channel.Publisher(bus) as publisher:
        for n in range(10):
            await publisher.publish("sales.new", sale(n))
    stats = await running
    assert stats == gspark.MicroBatchStats(batches=2, messages=10)
    rows = [row for _, batch in recorder.batches for row in batch]
    assert [row["id"] for row in rows] == [f"s-{n}" for n in range(10)]
    assert {row["seq"] for row in rows} == {None}
