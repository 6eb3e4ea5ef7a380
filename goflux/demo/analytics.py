"""The Spark job: revenue per customer per minute, from JetStream back to JetStream."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812

from goflux import JsonCodec
from goflux.demo.model import ORDER_STREAM, CustomerRevenue, Order
from goflux.transports import spark as gspark

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
    on_batch: Callable[[int, gspark.SinkStats], None],
) -> gspark.BatchPublisher[CustomerRevenue]:
    """Run the job over every accepted order stored now (``Trigger.AvailableNow``).

    Each micro-batch publishes the windows it changed (update mode) on
    ``revenue.by_customer``; the ``batch`` column tells versions apart. Message IDs
    are positional (query, batch, partition, row), so a batch Spark replays after a
    crash is de-duplicated by the server.
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
        servers=url, subject="revenue.by_customer", codec=JsonCodec(CustomerRevenue)
    )

    def publish(batch: DataFrame, batch_id: int) -> None:
        publisher(batch.withColumn("batch", F.lit(batch_id)), batch_id)
        if publisher.last is not None:
            on_batch(batch_id, publisher.last)

    query = (
        revenue_per_customer(orders)
        .writeStream.outputMode("update")
        .foreachBatch(publish)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return publisher
