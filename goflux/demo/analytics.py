"""The Spark job: revenue per customer per minute, from JetStream back to JetStream."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812

from goflux import JsonCodec
from goflux.demo.model import ORDER_STREAM, CustomerRevenue, Order
from goflux.transports import spark as gspark

_WORKER_START_FAILED = "Python worker failed to connect back"
_QUERY_STARTS = 3  # attempts to start the query when its Python worker starts too slowly

__all__ = ("revenue_job", "revenue_per_customer")


def revenue_per_customer(orders: DataFrame) -> DataFrame:
    """Sum accepted orders per customer and one-minute window of their ``placed`` time."""
    return (
        orders.groupBy(F.window("placed", "1 minute"), "customer")
        .agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders"))
        .select(
            "customer",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            F.round("revenue", 2).alias("revenue"),
            "orders",
        )
    )


def revenue_job(
    spark: SparkSession,
    url: str,
    checkpoint: str,
    *,
    max_messages_per_trigger: int,
    on_progress: Callable[[list[gspark.SinkStats]], None],
) -> gspark.BatchPublisher[CustomerRevenue]:
    """Run the job over every accepted order stored now (``Trigger.AvailableNow``).

    Each micro-batch publishes the windows it changed (update mode) on
    ``revenue.by_customer``; the ``batch`` column tells versions apart. A row's
    message ID is its customer, window and batch, the same when Spark replays the
    batch after a crash, so the server de-duplicates the replay. (Keys, not
    positional IDs: on Spark Connect the foreachBatch function cannot see its query.)
    ``on_progress`` gets the sink's history about once a second while the job runs.
    """
    orders = gspark.read_stream(
        spark,
        Order,
        servers=url,
        stream=ORDER_STREAM,
        subjects="orders.accepted",
        max_messages_per_trigger=max_messages_per_trigger,
    )
    publisher = gspark.foreach_batch_publisher(
        servers=url,
        subject="revenue.by_customer",
        codec=JsonCodec(CustomerRevenue),
        key_column="key",
    )

    def publish(batch: DataFrame, batch_id: int) -> None:
        rows = batch.withColumn("batch", F.lit(batch_id)).withColumn(
            "key",
            F.concat_ws(":", "customer", F.col("window_start").cast("string"), "batch"),
        )
        publisher(rows, batch_id)

    writer = (
        revenue_per_customer(orders)
        .writeStream.outputMode("update")
        .foreachBatch(publish)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
    )
    for attempt in range(1, _QUERY_STARTS + 1):
        query = writer.start()
        try:
            while not query.awaitTermination(1):
                on_progress(publisher.history)
            break
        except StreamingQueryException as exc:
            # Spark gives the Python worker of a Python data source a fixed 10 s to
            # connect back (no setting changes it): on a driver short of CPU the query
            # fails before its first batch. Started again from the same checkpoint, it
            # reads what it had not committed (the sink's message IDs keep it once).
            if _WORKER_START_FAILED not in str(exc) or attempt == _QUERY_STARTS:
                raise
    on_progress(publisher.history)
    return publisher
