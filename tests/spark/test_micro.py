"""run_micro_batches: any subscriber into a foreachBatch-style function."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from nats.js import JetStreamContext
from pyspark.sql import DataFrame, SparkSession

from goflux import Codec, JsonCodec
from goflux.codecs import Gzip, MsgpackCodec, pipe
from goflux.transports import channel, jetstream
from goflux.transports import spark as gspark
from tests.helpers import drained
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


async def durable(js: JetStreamContext, sales: int) -> jetstream.Subscriber[Sale]:
    """A subscriber bound to the durable consumer "spark", with ``sales`` sales stored."""
    await jetstream.ensure_stream(js, name=STREAM, subjects=["sales.>"])
    await jetstream.ensure_consumer(js, stream=STREAM, name="spark", ack_wait=60)
    publisher = jetstream.Publisher(js, JsonCodec(Sale))
    await publisher.publish_many(jetstream.Outgoing("sales.new", sale(n)) for n in range(sales))
    return jetstream.Subscriber(
        js, JsonCodec(Sale), stream=STREAM, consumer="spark", max_in_flight=200
    )


async def test_jetstream_batches_are_acked_after_the_function_returns(
    spark: SparkSession, js: JetStreamContext
) -> None:
    subscriber = await durable(js, 250)
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
    # Acks are fire-and-forget: wait for the server's view (a lost ack times out here).
    async with asyncio.timeout(10):
        info = await drained(js, STREAM, "spark")
    assert info.num_redelivered == 0


async def test_a_failed_batch_is_handed_back_and_redelivered(
    spark: SparkSession, js: JetStreamContext
) -> None:
    subscriber = await durable(js, 30)
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
    async with asyncio.timeout(10):  # the acks reach the server (a lost one times out)
        await drained(js, STREAM, "spark")
    assert {row["num_delivered"] for row in recorder.batches[0][1]} == {2}


async def test_the_payload_type_is_the_one_the_subscriber_codec_states(
    spark: SparkSession, js: JetStreamContext
) -> None:
    await jetstream.ensure_stream(js, name=STREAM, subjects=["sales.>"])
    await jetstream.ensure_consumer(js, stream=STREAM, name="spark", ack_wait=60)
    codec = pipe(MsgpackCodec(Sale), Gzip())
    publisher = jetstream.Publisher(js, codec)
    await publisher.publish_many(jetstream.Outgoing("sales.new", sale(n)) for n in range(20))
    subscriber = jetstream.Subscriber(js, codec, stream=STREAM, consumer="spark")
    recorder = Recorder()
    stats = await gspark.run_micro_batches(
        spark, subscriber, "sales.>", recorder, max_messages=20, max_wait=0.5, max_batches=1
    )
    assert stats == gspark.MicroBatchStats(batches=1, messages=20)
    rows = recorder.batches[0][1]
    columns = gspark.PayloadColumns(Sale)
    assert [columns.from_row(row) for row in rows] == [sale(n) for n in range(20)]


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


async def test_cancelling_waits_for_the_running_function_then_hands_the_batch_back(
    spark: SparkSession, js: JetStreamContext
) -> None:
    subscriber = await durable(js, 5)
    entered, release = threading.Event(), threading.Event()
    finished: list[int] = []

    def slow(df: DataFrame, batch_id: int) -> None:
        entered.set()
        release.wait(30)
        finished.append(df.count())

    running = asyncio.create_task(
        gspark.run_micro_batches(spark, subscriber, "sales.>", slow, max_messages=5, max_wait=0.5)
    )
    assert await asyncio.to_thread(entered.wait, 60)
    running.cancel()
    done, _ = await asyncio.wait({running}, timeout=0.3)
    assert not done  # still waiting for the function's thread
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert finished == [5]
    info = await js.consumer_info(STREAM, "spark")
    assert info.ack_floor.stream_seq == 0  # nothing acked
    recorder = Recorder()
    await gspark.run_micro_batches(
        spark, subscriber, "sales.>", recorder, max_messages=5, max_wait=0.3, max_batches=1
    )
    rows = recorder.batches[0][1]
    assert sorted(row["seq"] for row in rows) == [1, 2, 3, 4, 5]
    assert {row["num_delivered"] for row in rows} == {2}  # handed back at once


async def test_message_key_is_stable_across_redeliveries(
    spark: SparkSession, js: JetStreamContext
) -> None:
    subscriber = await durable(js, 3)
    recorder = Recorder(fail_first=True)
    with pytest.raises(RuntimeError):
        await gspark.run_micro_batches(spark, subscriber, "sales.>", recorder, max_wait=0.3)
    await gspark.run_micro_batches(
        spark, subscriber, "sales.>", recorder, max_wait=0.3, max_batches=1
    )
    rows = sorted(recorder.batches[0][1], key=lambda row: row["seq"])
    assert [row["message_key"] for row in rows] == [f"{STREAM}:{n}" for n in (1, 2, 3)]


@pytest.mark.parametrize(
    "codec", [JsonCodec(Sale), pipe(MsgpackCodec(Sale), Gzip())], ids=["json", "msgpack+gzip"]
)
async def test_a_key_value_watcher_gives_batches_of_typed_entries(
    spark: SparkSession, bare_js: JetStreamContext, codec: Codec[Sale]
) -> None:
    kv = await jetstream.key_value(bare_js, "sales", codec, history=5)
    for n in range(3):
        await kv.put(f"store.{n}", sale(n))
    await kv.delete("store.1")
    recorder = Recorder()
    stats = await gspark.run_micro_batches(
        spark,
        kv.watcher(include_history=True),
        ">",
        recorder,
        max_messages=10,
        max_wait=0.5,
        max_batches=1,
    )
    assert stats.messages == 4
    rows = recorder.batches[0][1]
    assert [(r["key"], r["operation"], r["revision"]) for r in rows] == [
        ("store.0", "put", 1),
        ("store.1", "put", 2),
        ("store.2", "put", 3),
        ("store.1", "delete", 4),
    ]
    assert rows[0]["value"]["id"] == "s-0"
    assert rows[0]["value"]["lines"] == [{"sku": "k-0", "quantity": 1, "tags": []}]
    assert rows[3]["value"] is None
    assert [r["subject"] for r in rows] == ["store.0", "store.1", "store.2", "store.1"]
