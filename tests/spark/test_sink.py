"""The foreachBatch publisher and the goflux-jetstream stream sink."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from goflux import BytesCodec, JsonCodec
from goflux.testing import NatsServer
from goflux.transports import spark as gspark
from tests.spark.helpers import (
    Sale,
    bodies,
    forget_commit,
    make_stream,
    message_ids,
    publish,
    published_during,
    run_to_end,
    sale,
    stream_state,
)

SOURCE, OUT = "SALES", "OUT"


def run(df: DataFrame, publisher: gspark.BatchPublisher[Sale], checkpoint: Path) -> None:
    run_to_end(df.writeStream.foreachBatch(publisher), checkpoint)


def test_a_replayed_batch_is_reported_duplicate_and_changes_nothing(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    make_stream(url, OUT)
    df = gspark.read_stream(spark, Sale, servers=url, stream=SOURCE)
    publisher = gspark.foreach_batch_publisher(
        servers=url, subject="out.sales", codec=JsonCodec(Sale)
    )
    checkpoint = tmp_path / "checkpoint"
    for first in (0, 1_000, 2_000):  # a batch per run (max_messages_per_trigger: 4.2+)
        publish(url, SOURCE, [sale(n) for n in range(first, first + 1_000)])
        run(df, publisher, checkpoint)
    assert [(s.batch_id, s.published, s.duplicates) for s in publisher.history] == [
        (0, 1_000, 0),
        (1, 1_000, 0),
        (2, 1_000, 0),
    ]
    before = stream_state(url, OUT)
    assert before == (3_000, 1, 3_000)

    forget_commit(checkpoint, 2)  # as if the driver died before committing
    run(df, publisher, checkpoint)
    assert publisher.last == gspark.SinkStats(batch_id=2, published=1_000, duplicates=1_000)
    assert stream_state(url, OUT) == before


def test_key_column_ids_survive_a_change_of_partitioning(
    spark: SparkSession, nats_server: NatsServer
) -> None:
    url = nats_server.url
    publish(url, SOURCE, [sale(n) for n in range(500)])
    make_stream(url, OUT)
    df = gspark.read(spark, Sale, servers=url, stream=SOURCE).cache()
    publisher = gspark.foreach_batch_publisher(
        servers=url, subject="out.sales", codec=JsonCodec(Sale), key_column="id"
    )
    publisher(df.repartition(2), 0)
    publisher(df.repartition(5, "customer"), 0)
    assert [(s.published, s.duplicates) for s in publisher.history] == [(500, 0), (500, 500)]
    assert stream_state(url, OUT)[0] == 500


def test_typed_rows_round_trip_to_the_same_json(
    spark: SparkSession, nats_server: NatsServer
) -> None:
    url = nats_server.url
    values = [sale(n) for n in range(200)]
    publish(url, SOURCE, values)
    make_stream(url, OUT)
    df = gspark.read(spark, Sale, servers=url, stream=SOURCE)
    publisher = gspark.foreach_batch_publisher(
        servers=url, subject="out.sales", codec=JsonCodec(Sale), key_column="id"
    )
    publisher(df, 0)
    codec = JsonCodec(Sale)
    assert sorted(bodies(url, OUT)) == sorted(codec.encode(v) for v in values)


def test_raw_bytes_and_subject_column(spark: SparkSession, nats_server: NatsServer) -> None:
    url = nats_server.url
    make_stream(url, OUT)
    df = spark.createDataFrame(
        [(b"\x00a", "out.one", "k1"), (b"b", "out.two", "k2")], "value binary, to string, k string"
    )
    publisher = gspark.foreach_batch_publisher(
        servers=url, subject_column="to", codec=BytesCodec(), key_column="k"
    )
    publisher(df, 0)
    assert sorted(bodies(url, OUT)) == [b"\x00a", b"b"]


def test_a_refused_publish_fails_the_batch(spark: SparkSession, nats_server: NatsServer) -> None:
    publish(nats_server.url, SOURCE, [sale(1)])
    df = gspark.read(spark, Sale, servers=nats_server.url, stream=SOURCE)
    publisher = gspark.foreach_batch_publisher(
        servers=nats_server.url, subject="nowhere.sales", codec=JsonCodec(Sale), key_column="id"
    )
    with pytest.raises(Exception, match="PublishError"):
        publisher(df, 0)
    assert publisher.history == []


def test_bad_sink_arguments_fail_before_spark_runs(
    spark: SparkSession, nats_server: NatsServer
) -> None:
    with pytest.raises(gspark.SourceOptionError, match="subject or subject_column"):
        gspark.foreach_batch_publisher(servers=nats_server.url, codec=JsonCodec(Sale))
    publisher = gspark.foreach_batch_publisher(
        servers=nats_server.url, subject="out.x", codec=JsonCodec(Sale), key_column="nope"
    )
    df = gspark.read(spark, Sale, servers=nats_server.url, stream=SOURCE, starting=1, ending=1)
    with pytest.raises(gspark.SourceOptionError, match="key_column 'nope'"):
        publisher(df, 0)
    positional = gspark.foreach_batch_publisher(
        servers=nats_server.url, subject="out.x", codec=JsonCodec(Sale)
    )
    with pytest.raises(gspark.SourceOptionError, match="id_prefix"):
        positional(df, 0)


def test_stream_sink_publishes_and_deduplicates_a_replay(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    make_stream(url, OUT)
    df = gspark.read_stream(spark, Sale, servers=url, stream=SOURCE)
    checkpoint = tmp_path / "checkpoint"

    def run_sink() -> None:
        writer = gspark.write_stream(df, servers=url, subject="out.sales", codec=JsonCodec(Sale))
        run_to_end(writer, checkpoint)

    for first in (0, 500, 1_000):  # a batch per run (max_messages_per_trigger: 4.2+)
        publish(url, SOURCE, [sale(n) for n in range(first, first + 500)])
        run_sink()
    assert stream_state(url, OUT) == (1_500, 1, 1_500)
    stored = message_ids(url, OUT)
    forget_commit(checkpoint, 2)
    replayed = published_during(url, "out.sales", run_sink)
    # The replay happened: batch 2's 500 rows were published again, each once, under
    # the IDs they were stored with (<query id>:<batch id>:<partition>:<row>) ...
    sent = [(msg.headers or {}).get("Nats-Msg-Id", "") for msg in replayed]
    assert len(sent) == len(set(sent)) == 500
    assert set(sent) == {i for i in stored if i.split(":")[1] == "2"}
    # ... and the server refused every one as a duplicate.
    assert stream_state(url, OUT) == (1_500, 1, 1_500)
    codec = JsonCodec(Sale)
    assert sorted(bodies(url, OUT)) == sorted(codec.encode(sale(n)) for n in range(1_500))
