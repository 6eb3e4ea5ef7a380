"""Where a foreachBatch publisher's statistics live when it runs somewhere else.

On Spark Connect the publisher is pickled and run in a server-side process; the copy
records its history in a global temporary view that the original reads. The same
mechanism is exercised here on the classic session, by pickling by hand.
"""

from __future__ import annotations

import pickle

from pyspark.sql import SparkSession

from goflux import JsonCodec
from goflux.testing import NatsServer
from goflux.transports import spark as gspark
from tests.spark.helpers import Sale, make_stream, publish, sale, stream_state


def test_a_pickled_copy_records_history_where_the_original_reads_it(
    spark: SparkSession, nats_server: NatsServer
) -> None:
    url = nats_server.url
    publish(url, "SALES", [sale(n) for n in range(50)])
    make_stream(url, "OUT")
    rows = gspark.read(spark, Sale, servers=url, stream="SALES")
    publisher = gspark.foreach_batch_publisher(
        servers=url, subject="out.sales", codec=JsonCodec(Sale), key_column="id"
    )
    shipped = pickle.loads(pickle.dumps(publisher))
    assert publisher.history == []  # shipped, nothing recorded yet

    shipped(rows, 7)
    assert publisher.history == [gspark.SinkStats(batch_id=7, published=50, duplicates=0)]
    assert shipped.history == publisher.history  # the copy keeps its own too
    view = spark.table(f"global_temp.{publisher.stats_view}")
    assert [tuple(r) for r in view.orderBy("position").collect()] == [(0, 7, 50, 0)]

    # A restarted query gets a new copy: it goes on from what the first one recorded.
    again = pickle.loads(pickle.dumps(publisher))
    again(rows, 7)
    assert publisher.last == gspark.SinkStats(batch_id=7, published=50, duplicates=50)
    assert [s.duplicates for s in publisher.history] == [0, 50]
    assert stream_state(url, "OUT") == (50, 1, 50)


def test_a_publisher_never_pickled_keeps_history_in_memory(
    spark: SparkSession, nats_server: NatsServer
) -> None:
    url = nats_server.url
    publish(url, "SALES", [sale(n) for n in range(10)])
    make_stream(url, "OUT")
    rows = gspark.read(spark, Sale, servers=url, stream="SALES")
    publisher = gspark.foreach_batch_publisher(
        servers=url, subject="out.sales", codec=JsonCodec(Sale), key_column="id"
    )
    publisher(rows, 0)
    assert publisher.history == [gspark.SinkStats(batch_id=0, published=10, duplicates=0)]
    assert not spark.catalog.tableExists(f"global_temp.{publisher.stats_view}")
