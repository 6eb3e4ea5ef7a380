"""Spark adapter: source rows/s and sink messages/s against raw single-process nats-py.

- Source: a batch read of the whole stream range through the goflux source (typed
  columns, ``noop`` sink, ``local[2]``) against one raw nats-py process reading the
  same range with its best path (an unacknowledged consumer, callback, hand-sent pull
  requests) and decoding every payload into the same model.
- Sink: ``foreach_batch_publisher`` over a cached DataFrame of the same rows (two
  partitions) against raw ``publish_async`` of the same JSON bodies from one process
  (same window), without and with message IDs (goflux always sets one: it is what
  makes a replayed batch idempotent, and the server's de-duplication costs time).
- Spark Connect: the same source and sink cases from a Connect client (its own
  process, see bench.spark_connect) against a Connect server on this machine
  (``local[2]``), in the same rounds as the classic session's.
- Micro-batch overhead: a streaming query over small micro-batches (100 messages)
  into a ``noop`` sink; the median ``triggerExecution`` time of a batch.

What each case returns is what it measured: rows the source produced (counted by an
observation on the query), messages the raw reader decoded, messages the stream
stored on the sink's subject during the case. A count short of the request stops the
run (``CountError``); so does a measured micro-batch without its 100 rows.

The CPU column counts this process only; Spark's work runs in its JVM and workers.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import nats
from nats.aio.msg import Msg
from pydantic import TypeAdapter
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from bench.harness import Table, check_count, interleave, wait_for
from bench.payload import ORDER, Order
from bench.sizes import Sizes
from bench.spark_connect import ConnectClient, rows_written
from goflux import JsonCodec
from goflux.testing import NatsServer, SparkConnectServer
from goflux.transports import jetstream
from goflux.transports import spark as gspark

STREAM, OUT = "SPARKBENCH", "SPARKOUT"
ADAPTER = TypeAdapter(Order)


async def raw_read(url: str, count: int) -> int:
    """One process reads sequences 1..count and decodes each payload; returns how many."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    info = await js.add_consumer(
        STREAM,
        deliver_policy="by_start_sequence",
        opt_start_seq=1,
        ack_policy="none",
        filter_subject="bench.data",
        mem_storage=True,
    )
    subject = f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{info.name}"
    inbox = nc.new_inbox()
    done = asyncio.Event()
    state = {"received": 0, "requested": 0}
    batch = 2_000

    async def pull() -> None:
        state["requested"] += batch
        request = json.dumps({"batch": batch, "no_wait": True}).encode()
        await nc.publish(subject, request, reply=inbox)

    async def on_message(msg: Msg) -> None:
        if not msg.reply:
            return
        ADAPTER.validate_json(msg.data)
        state["received"] += 1
        if state["received"] == count:
            done.set()
        elif state["requested"] - state["received"] < batch:
            await pull()

    sub = await nc.subscribe(inbox, cb=on_message)
    await pull()
    await pull()
    await wait_for(done, lambda: state["received"])
    await sub.unsubscribe()
    await js.delete_consumer(STREAM, info.name)
    await nc.close()
    return state["received"]


async def stored_on(url: str, subject: str) -> int:
    """How many messages the sink's stream holds on ``subject``."""
    nc = await nats.connect(url)
    try:
        state = (await nc.jetstream().stream_info(OUT, subjects_filter=subject)).state
        return (state.subjects or {}).get(subject, 0)
    finally:
        await nc.close()


async def raw_publish(
    url: str, bodies: list[bytes], window: int, *, ids: str | None = None
) -> None:
    """Publish ``bodies`` pipelined; with ``ids``, each with a message ID as goflux sets it."""
    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=window)
    if ids is None:
        futures = [await js.publish_async("sparkout.raw", body) for body in bodies]
    else:
        futures = [
            await js.publish_async(
                "sparkout.raw",
                body,
                headers={"Nats-Msg-Id": f"{ids}:{i}", "X-Message-ID": f"{ids}:{i}"},
            )
            for i, body in enumerate(bodies)
        ]
    await asyncio.gather(*futures)
    await nc.close()


def _publish(url: str, count: int, window: int) -> None:
    async def go() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name=STREAM, subjects=["bench.>"])
        await jetstream.ensure_stream(js, name=OUT, subjects=["sparkout.>"])
        publisher = jetstream.Publisher(js, JsonCodec(Order))
        await publisher.publish_many(
            (jetstream.Outgoing("bench.data", ORDER) for _ in range(count)), window=window
        )
        await nc.close()

    asyncio.run(go())


# Spark gives a Python worker it starts on its own (the planner and the streaming
# source runner of a Python data source) a fixed 10 s to connect back to the JVM; no
# setting changes it. On a machine short of CPU (the full check runs three test runs
# side by side, this one niced) the interpreter's start can take longer, and the query
# fails before its first batch. Nothing was read then, so the run starts it again.
WORKER_START_FAILED = "Python worker failed to connect back"
QUERY_STARTS = 3


def micro_batch_overhead(spark: SparkSession, url: str, batches: int) -> list[float]:
    """Seconds per micro-batch of 100 messages (engine plus source, noop sink).

    A query that fails before its first batch because Spark's Python worker did not
    connect back in time (see ``WORKER_START_FAILED``) is started again, up to
    ``QUERY_STARTS`` times in all.

    Raises:
        CountError: A measured batch did not read its 100 rows.
        StreamingQueryException: The query failed otherwise, or did not start in
            ``QUERY_STARTS`` attempts.
    """
    for attempt in range(1, QUERY_STARTS + 1):
        try:
            return _micro_batch_overhead(spark, url, batches)
        except StreamingQueryException as exc:
            if WORKER_START_FAILED not in str(exc) or attempt == QUERY_STARTS:
                raise
            print(
                f"micro-batch query: Spark's Python worker did not connect back in 10 s "
                f"(attempt {attempt} of {QUERY_STARTS}); starting the query again",
                file=sys.stderr,
            )
    raise AssertionError("unreachable")


def _micro_batch_overhead(spark: SparkSession, url: str, batches: int) -> list[float]:
    df = gspark.read_stream(spark, Order, servers=url, stream=STREAM, max_messages_per_trigger=100)
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (
            df.writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="0 seconds")
            .start()
        )
        try:
            while len(query.recentProgress) < batches + 2:
                query.awaitTermination(0.5)
            progress: list[dict[str, Any]] = list(query.recentProgress)
        finally:
            query.stop()
    # The first two batches pay for worker start-up and imports.
    measured = progress[2 : batches + 2]
    for p in measured:
        check_count(f"micro-batch {p['batchId']}: rows", p["numInputRows"], 100)
    return [p["durationMs"]["triggerExecution"] / 1000 for p in measured]


def run(rounds: int, sizes: Sizes) -> tuple[list[Table], list[float]]:
    source_rows, sink_rows, window = (
        sizes.spark_source_rows,
        sizes.spark_sink_rows,
        sizes.spark_window,
    )
    server = NatsServer().start()
    connect_server = SparkConnectServer("local[2]").start()
    spark = gspark.local_session("local[2]", app_name="goflux-bench")
    spark.sparkContext.setLogLevel("ERROR")
    connect: ConnectClient | None = None
    try:
        url = server.url
        _publish(url, source_rows, window)
        connect = client = ConnectClient(connect_server, url, sink_rows, window)
        source = gspark.read(spark, Order, servers=url, stream=STREAM)
        source.write.format("noop").mode("overwrite").save()  # warm the workers
        rows = gspark.read(
            spark,
            Order,
            servers=url,
            stream=STREAM,
            ending=sink_rows + 1,
            messages_per_partition=sink_rows // 2,  # one partition per core
        ).cache()
        rows.count()
        bodies = [JsonCodec(Order).encode(ORDER)] * sink_rows
        round_ids = iter(range(10_000))

        def goflux_source() -> int:
            return rows_written(source)

        def goflux_sink() -> None:
            publisher = gspark.foreach_batch_publisher(
                servers=url,
                subject="sparkout.goflux",
                codec=JsonCodec(Order),
                id_prefix=f"bench-{next(round_ids)}",
                window=window,
            )
            publisher(rows, 0)

        def stored(subject: str, publish: Callable[[], object]) -> Callable[[], int]:
            """The case ``publish``, returning what the stream stored on ``subject``."""

            def case() -> int:
                before = asyncio.run(stored_on(url, subject))
                publish()
                return asyncio.run(stored_on(url, subject)) - before

            return case

        source_results = interleave(
            {
                "raw nats-py read (1 process)": lambda: asyncio.run(raw_read(url, source_rows)),
                "goflux source (local[2])": goflux_source,
                "goflux source (Spark Connect, local[2] server)": client.source,
            },
            rounds,
            expected=source_rows,
        )
        sink_results = interleave(
            {
                "raw publish_async (1 process)": stored(
                    "sparkout.raw", lambda: asyncio.run(raw_publish(url, bodies, window))
                ),
                "raw publish_async + message IDs (1 process)": stored(
                    "sparkout.raw",
                    lambda: asyncio.run(
                        raw_publish(url, bodies, window, ids=f"raw-{next(round_ids)}")
                    ),
                ),
                "goflux foreach_batch_publisher (local[2])": stored("sparkout.goflux", goflux_sink),
                "goflux foreach_batch_publisher (Spark Connect)": stored(
                    "sparkout.connect", lambda: client.sink(f"connect-{next(round_ids)}")
                ),
            },
            rounds,
            expected=sink_rows,
        )
        tables = [
            Table(
                "spark_source",
                f"Spark source: typed rows/s over {source_rows:,} messages",
                source_results,
                "raw nats-py read (1 process)",
                note="The CPU column counts this process only; Spark works in its JVM "
                "and Python workers. The Spark Connect rows run from a client process "
                "of their own against a Connect server on this machine (local[2]).",
            ),
            Table(
                "spark_sink",
                f"Spark sink: messages/s for {sink_rows:,} rows "
                f"({window:,} PubAcks in flight per task)",
                sink_results,
                "raw publish_async (1 process)",
            ),
        ]
        return tables, micro_batch_overhead(spark, url, sizes.spark_batches)
    finally:
        if connect is not None:
            connect.close()
        spark.stop()
        connect_server.stop()
        server.stop()


def overhead_table(times: list[float]) -> str:
    return "\n".join(
        [
            "### Spark micro-batch overhead (100 messages per batch, noop sink)",
            "",
            "| batches | median s | min s | max s | goal |",
            "|---:|---:|---:|---:|---:|",
            f"| {len(times)} | {statistics.median(times):.3f} | {min(times):.3f} | "
            f"{max(times):.3f} | <= 0.300 |",
        ]
    )


__all__ = ("overhead_table", "run")
