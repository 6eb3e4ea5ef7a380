"""The JetStream source against a real nats-server and a local[2] SparkSession."""

from __future__ import annotations

import asyncio
import json
import os
import signal as signal_module
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pyspark.sql import DataFrame, SparkSession

from goflux import Headers, JsonCodec
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports import spark as gspark
from goflux.transports.spark._datasource.reader import ADMISSION_CONTROL
from tests.spark.helpers import (
    Sale,
    delete_stream,
    needs_admission_control,
    on_server,
    publish,
    publish_raw,
    purge,
    sale,
)

STREAM = "SALES"
ROOT = Path(__file__).resolve().parents[2]


def run_available_now(df: DataFrame, checkpoint: Path, out: Path) -> dict[str, Any]:
    """Run an AvailableNow query into a parquet sink; return its last progress."""
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return query.lastProgress or {}


def collect_batches(df: DataFrame, checkpoint: Path) -> list[list[dict[str, Any]]]:
    """Run an AvailableNow query with foreachBatch; return each batch's rows."""
    batches: list[list[dict[str, Any]]] = []

    def keep(batch: DataFrame, batch_id: int) -> None:
        batches.append([row.asDict(recursive=True) for row in batch.collect()])

    query = (
        df.writeStream.foreachBatch(keep)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return batches


def test_available_now_reads_everything_once_then_only_new(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    publish(nats_server.url, STREAM, [sale(n) for n in range(100_000)])
    df = gspark.read_stream(spark, Sale, servers=nats_server.url, stream=STREAM)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"

    run_available_now(df, checkpoint, out)
    stored = spark.read.parquet(str(out))
    counts = stored.selectExpr("count(*) AS n", "count(DISTINCT seq) AS d", "max(seq) AS m")
    assert counts.first().asDict() == {"n": 100_000, "d": 100_000, "m": 100_000}

    progress = run_available_now(df, checkpoint, out)  # restart: nothing new
    assert progress.get("numInputRows", 0) == 0
    assert spark.read.parquet(str(out)).count() == 100_000

    publish(nats_server.url, STREAM, [sale(n) for n in range(100_000, 110_000)])
    run_available_now(df, checkpoint, out)
    stored = spark.read.parquet(str(out))
    counts = stored.selectExpr("count(*) AS n", "count(DISTINCT seq) AS d", "min(seq) AS lo")
    assert counts.first().asDict() == {"n": 110_000, "d": 110_000, "lo": 1}
    new = stored.where("seq > 100000").select("id").collect()
    assert sorted(int(row.id[2:]) for row in new) == list(range(100_000, 110_000))


@needs_admission_control
def test_max_messages_per_trigger_bounds_every_batch(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    publish(nats_server.url, STREAM, [sale(n) for n in range(2_500)])
    df = gspark.read_stream(
        spark, Sale, servers=nats_server.url, stream=STREAM, max_messages_per_trigger=1_000
    )
    batches = collect_batches(df, tmp_path / "checkpoint")
    assert [len(batch) for batch in batches] == [1_000, 1_000, 500]
    seqs = [row["seq"] for batch in batches for row in batch]
    assert seqs == sorted(seqs)
    assert seqs == list(range(1, 2_501))


def test_subject_filter_returns_only_matching_rows(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    subjects = ["sales.eu", "sales.us", "sales.eu.north"]
    publish(nats_server.url, STREAM, [sale(n) for n in range(300)], subjects=subjects)
    df = gspark.read_stream(
        spark, Sale, servers=nats_server.url, stream=STREAM, subjects=["sales.eu.>", "sales.us"]
    )
    rows = [row for batch in collect_batches(df, tmp_path / "c") for row in batch]
    assert {row["subject"] for row in rows} == {"sales.us", "sales.eu.north"}
    assert sorted(row["seq"] for row in rows) == [n + 1 for n in range(300) if n % 3 != 0]


def test_typed_columns_match_the_model(spark: SparkSession, nats_server: NatsServer) -> None:
    values = [sale(n) for n in range(1, 50)]
    publish(nats_server.url, STREAM, values)
    df = gspark.read(spark, Sale, servers=nats_server.url, stream=STREAM)
    assert df.columns == [
        "id",
        "customer",
        "amount",
        "lines",
        "placed",
        "note",
        "subject",
        "stream",
        "seq",
        "timestamp",
    ]
    assert df.schema["lines"].dataType.simpleString() == (
        "array<struct<sku:string,quantity:bigint,tags:array<string>>>"
    )
    rows = sorted(df.collect(), key=lambda row: row.seq)
    codec = JsonCodec(Sale)
    columns = gspark.PayloadColumns(Sale)
    for row, value in zip(rows, values, strict=True):
        rebuilt = columns.from_row(row.asDict(recursive=True))
        assert codec.encode(rebuilt) == codec.encode(value)
        assert row.stream == STREAM
        assert row.timestamp.tzinfo is None or row.timestamp.utcoffset() is not None


def test_batch_read_of_a_bounded_range(spark: SparkSession, nats_server: NatsServer) -> None:
    publish(nats_server.url, STREAM, [sale(n) for n in range(100)])
    df = gspark.read(spark, Sale, servers=nats_server.url, stream=STREAM, starting=10, ending=20)
    assert sorted(row.seq for row in df.select("seq").collect()) == list(range(10, 20))
    split = gspark.read(
        spark, Sale, servers=nats_server.url, stream=STREAM, messages_per_partition=7
    )
    assert split.rdd.getNumPartitions() == 15
    assert sorted(row.seq for row in split.select("seq").collect()) == list(range(1, 101))


def test_starting_latest_and_time(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    publish(nats_server.url, STREAM, [sale(n) for n in range(10)])
    middle = datetime.now(UTC)
    publish(nats_server.url, STREAM, [sale(n) for n in range(10, 15)])
    by_time = gspark.read(spark, Sale, servers=nats_server.url, stream=STREAM, starting=middle)
    assert sorted(row.seq for row in by_time.select("seq").collect()) == list(range(11, 16))
    latest = gspark.read_stream(
        spark, Sale, servers=nats_server.url, stream=STREAM, starting="latest"
    )
    assert [row for batch in collect_batches(latest, tmp_path / "c") for row in batch] == []
    publish(nats_server.url, STREAM, [sale(n) for n in range(15, 18)])
    rows = [row for batch in collect_batches(latest, tmp_path / "c") for row in batch]
    assert [row["seq"] for row in rows] == [16, 17, 18]


def test_fail_on_data_loss_fails_the_query_after_a_purge(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    publish(nats_server.url, STREAM, [sale(n) for n in range(100)])
    df = gspark.read_stream(spark, Sale, servers=nats_server.url, stream=STREAM)
    checkpoint = tmp_path / "checkpoint"
    assert sum(map(len, collect_batches(df, checkpoint))) == 100
    publish(nats_server.url, STREAM, [sale(n) for n in range(100, 150)])
    purge(nats_server.url, STREAM)  # 101..150 go before the query read them

    query = (
        df.writeStream.foreachBatch(lambda batch, batch_id: None)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="DataLossError") as failed:
        query.awaitTermination()
    assert "sequence 101 to 150 were deleted" in str(failed.value)


def test_data_loss_skipped_when_allowed(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    publish(nats_server.url, STREAM, [sale(n) for n in range(100)])
    df = gspark.read_stream(
        spark, Sale, servers=nats_server.url, stream=STREAM, fail_on_data_loss=False
    )
    checkpoint = tmp_path / "checkpoint"
    assert sum(map(len, collect_batches(df, checkpoint))) == 100
    publish(nats_server.url, STREAM, [sale(n) for n in range(100, 150)])
    purge(nats_server.url, STREAM)
    publish(nats_server.url, STREAM, [sale(n) for n in range(150, 160)])
    rows = [row for batch in collect_batches(df, checkpoint) for row in batch]
    assert sorted(row["seq"] for row in rows) == list(range(151, 161))


def test_headers_keep_every_line(spark: SparkSession, nats_server: NatsServer) -> None:
    headers = Headers([("Tag", "a"), ("Tag", "b"), ("Region", "eu")])
    publish(nats_server.url, STREAM, [sale(1)], headers=headers)
    df = gspark.read(spark, Sale, servers=nats_server.url, stream=STREAM, include_headers=True)
    (row,) = df.select("headers").collect()
    lines = [(h.key, h.value) for h in row.headers]
    # Wire order: goflux writes the first value of each name, then the repeats.
    assert lines == [("X-Goflux-Tag", "a"), ("X-Goflux-Region", "eu"), ("X-Goflux-Tag", "b")]


def test_undecodable_payloads_go_to_corrupt_or_fail(
    spark: SparkSession, nats_server: NatsServer
) -> None:
    publish(nats_server.url, STREAM, [sale(1)])
    publish_raw(nats_server.url, STREAM, "sales.new", [b"{not json", b'{"id": 5}'])
    publish(nats_server.url, STREAM, [sale(4)])
    kept = gspark.read(
        spark, Sale, servers=nats_server.url, stream=STREAM, on_decode_error="corrupt"
    )
    rows = sorted(kept.collect(), key=lambda row: row.seq)
    assert [(row.seq, row.id, row._corrupt) for row in rows] == [
        (1, "s-1", None),
        (2, None, b"{not json"),
        (3, None, b'{"id": 5}'),
        (4, "s-4", None),
    ]
    failing = gspark.read(spark, Sale, servers=nats_server.url, stream=STREAM)
    with pytest.raises(Exception, match=r"sequence 2 \(subject sales.new\)"):
        failing.collect()


def test_raw_mode_yields_bytes(spark: SparkSession, nats_server: NatsServer) -> None:
    publish_raw(nats_server.url, STREAM, "sales.raw", [b"\x00\x01", b"plain"])
    df = gspark.read(spark, None, servers=nats_server.url, stream=STREAM)
    assert df.columns == ["value", "subject", "stream", "seq", "timestamp"]
    assert [(row.value, row.seq) for row in df.orderBy("seq").collect()] == [
        (b"\x00\x01", 1),
        (b"plain", 2),
    ]


def test_offsets_are_stream_sequences_in_the_checkpoint(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    publish(nats_server.url, STREAM, [sale(n) for n in range(30)])
    df = gspark.read_stream(spark, Sale, servers=nats_server.url, stream=STREAM)
    checkpoint = tmp_path / "checkpoint"
    collect_batches(df, checkpoint)
    lines = (checkpoint / "offsets" / "0").read_text().splitlines()
    assert json.loads(lines[-1]) == {"stream": STREAM, "seq": 31}
    assert lines[-1] == '{"stream": "SALES", "seq": 31}'  # key order is stable


@pytest.mark.timeout(300)  # two driver JVMs: about 30 s, far more on a loaded machine
def test_driver_killed_between_offsets_and_commit_loses_and_repeats_nothing(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    publish(nats_server.url, STREAM, [sale(n) for n in range(8_000)])
    # Batches of 2,000 (seq 3000 in batch 1); without admission control (PySpark < 4.2)
    # one batch of all 8,000.
    blocked, last = (1, 3) if ADMISSION_CONTROL else (0, 0)
    checkpoint, out, fifo = tmp_path / "checkpoint", tmp_path / "out", tmp_path / "fifo"
    os.mkfifo(fifo)
    job = [sys.executable, "-m", "tests.spark.driver_job", nats_server.url, str(checkpoint)]
    first = subprocess.Popen([*job, str(out), "3000", str(fifo)], start_new_session=True, cwd=ROOT)
    try:
        with open(fifo) as signal:  # blocks until the task holding seq 7500 runs
            assert signal.readline() == "blocked\n"
    finally:
        os.killpg(first.pid, signal_module.SIGKILL)
        first.wait()
    assert (checkpoint / "offsets" / str(blocked)).exists()
    assert not (checkpoint / "commits" / str(blocked)).exists()

    second = subprocess.run([*job, str(out)], cwd=ROOT, timeout=240, check=False)
    assert second.returncode == 0
    stored = spark.read.parquet(str(out))
    counts = stored.selectExpr("count(*) AS n", "count(DISTINCT seq) AS d", "min(seq) AS lo")
    assert counts.first().asDict() == {"n": 8_000, "d": 8_000, "lo": 1}
    assert sorted((checkpoint / "commits").iterdir())[-1].name == str(last)


class Address(BaseModel):
    city: str
    zip: int


class Member(BaseModel):
    name: str
    address: Address
    visits: int


def test_corrupt_mode_keeps_payloads_that_do_not_decode_or_fit(
    spark: SparkSession, nats_server: NatsServer
) -> None:
    good = b'{"name":"a","address":{"city":"x","zip":1},"visits":1}'
    too_big = b'{"name":"b","address":{"city":"y","zip":2},"visits":18446744073709551616}'
    publish_raw(nats_server.url, "MEMBERS", "members.new", [good, b"garbage", too_big])
    df = gspark.read(
        spark, Member, servers=nats_server.url, stream="MEMBERS", on_decode_error="corrupt"
    )
    table = df.orderBy("seq").toArrow()  # nested fields of a null struct are nullable
    assert table.column("_corrupt").to_pylist() == [None, b"garbage", too_big]
    assert table.column("address").to_pylist() == [{"city": "x", "zip": 1}, None, None]
    failing = gspark.read(spark, Member, servers=nats_server.url, stream="MEMBERS", starting=3)
    with pytest.raises(Exception, match=r"sequence 3 .*does not fit its Spark columns"):
        failing.collect()


def test_credentials_in_the_url_stay_out_of_query_plans(
    spark: SparkSession, nats_server: NatsServer
) -> None:
    url = nats_server.url.replace("nats://", "nats://alice:S3cretPw@")
    df = gspark.read_stream(spark, Sale, servers=url, stream=STREAM)
    plan = df._jdf.queryExecution().toString()
    assert "servers=nats://127.0.0.1" in plan  # the options are shown...
    assert "user=alice" in plan
    assert "S3cretPw" not in plan  # ...but the password is redacted


def test_a_stream_recreated_while_the_query_runs_fails_it(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    publish(nats_server.url, STREAM, [sale(n) for n in range(20)])
    df = gspark.read_stream(spark, Sale, servers=nats_server.url, stream=STREAM)
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="1 second")  # rarely polls between the delete and the create
        .start()
    )
    try:
        query.processAllAvailable()
        delete_stream(nats_server.url, STREAM)
        publish(nats_server.url, STREAM, [sale(n) for n in range(30)])
        # Either way the query fails: usually it sees the new stream, on a loaded
        # machine it may poll in the moment the stream is gone.
        with pytest.raises(Exception, match=r"deleted and created again|'SALES' not found"):
            query.processAllAvailable()
    finally:
        query.stop()


def test_streams_without_limits_retention_are_refused(
    spark: SparkSession, nats_server: NatsServer
) -> None:
    on_server(
        nats_server.url,
        lambda js: jetstream.ensure_stream(
            js, name="WORK", subjects=["work.>"], retention="workqueue"
        ),
    )
    df = gspark.read(spark, Sale, servers=nats_server.url, stream="WORK")
    with pytest.raises(Exception, match="workqueue retention"):
        df.collect()


def test_empty_reads_yield_no_rows(spark: SparkSession, nats_server: NatsServer) -> None:
    make = gspark.read(spark, Sale, servers=nats_server.url, stream=STREAM, starting=1, ending=1)
    publish(nats_server.url, STREAM, [sale(1)])
    assert make.count() == 0
    latest = gspark.read(spark, Sale, servers=nats_server.url, stream=STREAM, starting="latest")
    assert latest.count() == 0
    with pytest.raises(Exception, match="starting sequence 5 is past the end"):
        gspark.read(spark, Sale, servers=nats_server.url, stream=STREAM, starting=5).count()
    with pytest.raises(gspark.SourceOptionError, match="timezone-aware"):
        gspark.read_stream(
            spark, Sale, servers=nats_server.url, stream=STREAM, starting=datetime(2026, 1, 1)
        )


def test_a_running_query_survives_a_server_restart_between_batches(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    publish(nats_server.url, STREAM, [sale(n) for n in range(100)])
    df = gspark.read_stream(spark, Sale, servers=nats_server.url, stream=STREAM)
    out = tmp_path / "out"
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        nats_server.kill()
        asyncio.run(nats_server.restart())
        publish(nats_server.url, STREAM, [sale(n) for n in range(100, 150)])
        query.processAllAvailable()
        assert query.isActive
    finally:
        query.stop()
    stored = spark.read.parquet(str(out)).selectExpr("count(*) AS n", "count(DISTINCT seq) AS d")
    assert stored.first().asDict() == {"n": 150, "d": 150}
