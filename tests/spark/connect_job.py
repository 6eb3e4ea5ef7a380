"""Spark jobs run over Spark Connect, each in its own client process.

Usage: python -m tests.spark.connect_job SC_URL NATS_URL JOB JSON_ARGS

PySpark lets one process use either a classic session or Connect sessions, never
both (a Connect session switches the process to Connect mode for good), so the
Connect tests run their jobs here, beside the suite's classic session. The job
prints one JSON object as its last line: what the test checks.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812

from goflux import JsonCodec
from goflux.codecs import Gzip, MsgpackCodec, Zstd, pipe
from goflux.transports import spark as gspark
from tests.spark.helpers import Sale, run_to_end, starting_again

SOURCE, OUT = "SALES", "OUT"


def source(spark: SparkSession, url: str, args: dict[str, Any]) -> dict[str, Any]:
    """Read SOURCE into a parquet sink (Trigger.AvailableNow); count what it holds."""
    df = gspark.read_stream(
        spark, Sale, servers=url, stream=SOURCE, max_messages_per_trigger=args["per_trigger"]
    )
    writer = df.writeStream.format("parquet").option("path", args["out"])
    query = run_to_end(writer, args["checkpoint"])
    stored = spark.read.parquet(args["out"])
    counts = stored.selectExpr("count(*) AS n", "count(DISTINCT seq) AS d", "min(seq) AS lo")
    row = counts.first()
    assert row is not None
    return {"batches": len(query.recentProgress), **row.asDict()}


def batch_read(spark: SparkSession, url: str, args: dict[str, Any]) -> dict[str, Any]:
    """A batch read of ``[starting, ending)``."""
    df = gspark.read(spark, Sale, servers=url, stream=SOURCE, starting=args["starting"])
    counts = df.selectExpr(
        "count(*) AS n", "count(DISTINCT seq) AS d", "min(seq) AS lo", "max(seq) AS hi"
    )
    row = starting_again(counts.first)
    assert row is not None
    first = starting_again(df.orderBy("seq").select("id").first)
    return {**row.asDict(), "first_id": None if first is None else first.id}


def sink(spark: SparkSession, url: str, args: dict[str, Any]) -> dict[str, Any]:
    """SOURCE to out.sales through foreach_batch_publisher or write_stream."""
    df = gspark.read_stream(
        spark, Sale, servers=url, stream=SOURCE, max_messages_per_trigger=args["per_trigger"]
    )
    ids: dict[str, Any] = {}
    if args["ids"] == "key":
        ids = {"key_column": "id"}
    elif args["ids"] == "prefix":
        ids = {"id_prefix": args["prefix"]}
    codec = JsonCodec(Sale)
    publisher = None
    if args["via"] == "write_stream":
        writer = gspark.write_stream(df, servers=url, subject="out.sales", codec=codec, **ids)
    else:
        publisher = gspark.foreach_batch_publisher(
            servers=url, subject="out.sales", codec=codec, **ids
        )
        writer = df.writeStream.foreachBatch(publisher)
    error = None
    try:
        run_to_end(writer, args["checkpoint"])
    except StreamingQueryException as exc:  # the test checks the message
        error = str(exc)
    history = (
        None
        if publisher is None
        else [[s.batch_id, s.published, s.duplicates] for s in publisher.history]
    )
    return {"error": error, "history": history, "view": getattr(publisher, "stats_view", None)}


def micro_batches(spark: SparkSession, url: str, args: dict[str, Any]) -> dict[str, Any]:
    """run_micro_batches on a Connect session: a durable consumer's messages to out.sales."""
    import asyncio  # noqa: PLC0415

    import nats  # noqa: PLC0415

    from goflux.transports import jetstream  # noqa: PLC0415

    publisher = gspark.foreach_batch_publisher(
        servers=url, subject="out.sales", codec=JsonCodec(Sale), key_column="message_key"
    )
    counts: list[int] = []

    def fn(df: Any, batch_id: int) -> None:
        counts.append(df.count())
        publisher(df.withColumn("batch", F.lit(batch_id)), batch_id)

    async def go() -> gspark.MicroBatchStats:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            await jetstream.ensure_consumer(js, stream=SOURCE, name="micro", ack_wait=60)
            subscriber = jetstream.Subscriber(
                js, JsonCodec(Sale), stream=SOURCE, consumer="micro", max_in_flight=400
            )
            return await gspark.run_micro_batches(
                spark,
                subscriber,
                SOURCE.lower() + ".>",
                fn,
                max_messages=args["max_messages"],
                max_wait=0.5,
                max_batches=args["batches"],
            )
        finally:
            await nc.close()

    stats = asyncio.run(go())
    return {
        "batches": stats.batches,
        "messages": stats.messages,
        "counts": counts,
        "history": [[s.batch_id, s.published, s.duplicates] for s in publisher.history],
    }


def codecs(spark: SparkSession, url: str, args: dict[str, Any]) -> dict[str, Any]:
    """SOURCE (MessagePack, gzip) to out.sales (MessagePack, Zstandard), then read back.

    The source decodes with its codec, the foreachBatch publisher encodes with its
    own, and a batch read of OUT decodes with that one: each codec pickled to the
    server's Python processes.
    """
    sink_codec = pipe(MsgpackCodec(Sale), Zstd())
    df = gspark.read_stream(
        spark, Sale, servers=url, stream=SOURCE, codec=pipe(MsgpackCodec(Sale), Gzip())
    )
    publisher = gspark.foreach_batch_publisher(
        servers=url, subject="out.sales", codec=sink_codec, key_column="id"
    )
    run_to_end(df.writeStream.foreachBatch(publisher), args["checkpoint"])
    back = gspark.read(spark, Sale, servers=url, stream=OUT, codec=sink_codec)
    rows = starting_again(back.select("id", "amount", "lines").collect)
    return {
        "columns": back.columns,
        "published": sum(stats.published for stats in publisher.history),
        "ids": sorted(row.id for row in rows),
        "amount": sum(row.amount for row in rows),
        "quantity": sum(line.quantity for row in rows for line in row.lines),
    }


JOBS = {
    "source": source,
    "read": batch_read,
    "sink": sink,
    "micro_batches": micro_batches,
    "codecs": codecs,
}


def main(argv: list[str]) -> None:
    connect_url, url, job, raw = argv
    spark = gspark.connect_session(connect_url)
    try:
        result = JOBS[job](spark, url, json.loads(raw))
    finally:
        spark.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
