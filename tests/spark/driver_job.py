"""A streaming job run as its own process (its own JVM) so a test can SIGKILL it.

Usage: python -m tests.spark.driver_job URL CHECKPOINT OUT [BLOCK_SEQ FIFO]

Reads stream SALES in micro-batches of 2,000 (one batch on PySpark < 4.2, which has
no admission control) into a parquet sink with Trigger.AvailableNow. With BLOCK_SEQ,
the task that reaches that sequence writes a line to FIFO and blocks, so the test can
kill the driver while the batch is planned (its offsets written) but not committed.
"""

from __future__ import annotations

import sys
import threading

from pyspark.sql import functions as F  # noqa: N812

from goflux.transports import spark as gspark
from tests.spark.helpers import Sale


def main(argv: list[str]) -> None:
    url, checkpoint, out = argv[:3]
    block_seq = int(argv[3]) if len(argv) > 3 else -1
    fifo = argv[4] if len(argv) > 4 else ""
    spark = gspark.local_session("local[2]", app_name="goflux-driver-job")
    spark.sparkContext.setLogLevel("ERROR")

    def guard(seq: int) -> int:
        if seq == block_seq:
            with open(fifo, "w") as signal:
                signal.write("blocked\n")
            threading.Event().wait()  # until SIGKILL
        return seq

    df = gspark.read_stream(
        spark, Sale, servers=url, stream="SALES", max_messages_per_trigger=2_000
    )
    df = df.withColumn("seq", F.udf(guard, "long")("seq"))
    query = (
        df.writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
