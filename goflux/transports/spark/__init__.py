"""Spark adapter: JetStream as a Structured Streaming source, foreachBatch sinks.

Needs ``goflux[spark]`` (pyspark 4 with pyarrow) and ``goflux[nats]``::

    from goflux.transports import spark as gspark

    spark = gspark.local_session()
    orders = gspark.read_stream(spark, Order, servers=url, stream="ORDERS")
    publish = gspark.foreach_batch_publisher(
        servers=url, subject="totals.by_customer", codec=JsonCodec(Total), key_column="id"
    )
    totals.writeStream.foreachBatch(publish).option("checkpointLocation", path).start()

- :func:`read_stream` / :func:`read`: typed DataFrames over a stream; offsets are
  stream sequences in Spark's checkpoint, so processing is exactly-once. Payloads
  are JSON, or decoded with any codec (``codec=MsgpackCodec(Order)``).
- :func:`foreach_batch_publisher` and the ``goflux-jetstream`` stream sink: each row
  published with a deterministic message ID, so a replayed batch is de-duplicated.
- :func:`run_micro_batches`: any subscriber fed to a ``foreachBatch``-style function,
  acknowledged after the function returns (at-least-once).
"""

try:
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("goflux.transports.spark needs pyspark: pip install 'goflux[spark]'") from exc
try:
    import nats  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("goflux.transports.spark needs nats-py: pip install 'goflux[nats]'") from exc

from goflux._exports import publish_names as _publish_names
from goflux.transports.spark._codec import PayloadCodec
from goflux.transports.spark._connection import ConnectionOptions, ConnectionSettings
from goflux.transports.spark._datasource.source import FORMAT, JetStreamDataSource, register
from goflux.transports.spark._errors import (
    DataLossError,
    SchemaError,
    SourceOptionError,
    SparkError,
)
from goflux.transports.spark._micro import MicroBatchStats, run_micro_batches
from goflux.transports.spark._options import SinkOptions, SourceOptions
from goflux.transports.spark._read import ReadOptions, read, read_stream
from goflux.transports.spark._schema import PayloadColumns
from goflux.transports.spark._session import connect_session, is_connect, local_session
from goflux.transports.spark._write import (
    BatchPublisher,
    SinkStats,
    WriteOptions,
    foreach_batch_publisher,
    write_stream,
)

__all__ = (
    "FORMAT",
    "BatchPublisher",
    "ConnectionOptions",
    "ConnectionSettings",
    "DataLossError",
    "JetStreamDataSource",
    "MicroBatchStats",
    "PayloadCodec",
    "PayloadColumns",
    "ReadOptions",
    "SchemaError",
    "SinkOptions",
    "SinkStats",
    "SourceOptionError",
    "SourceOptions",
    "SparkError",
    "WriteOptions",
    "connect_session",
    "foreach_batch_publisher",
    "is_connect",
    "local_session",
    "read",
    "read_stream",
    "register",
    "run_micro_batches",
    "write_stream",
)

_publish_names(__name__, globals())
