"""The Spark rows over Spark Connect: the same source and sink cases from a Connect client.

PySpark lets one process hold a classic session or Connect sessions, not both, so the
Connect cases run in a client process of their own, kept alive for the whole run and
driven over its stdin and stdout (one JSON line per case). The parent times each call
around the request, so the measured time includes a millisecond of pipe traffic and
everything Spark does; the client's start-up and warm-up are not measured.

Usage (by bench.spark): python -m bench.spark_connect SC_URL NATS_URL SINK_ROWS WINDOW
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F  # noqa: N812 - Spark's usual name

from bench.payload import Order
from goflux import JsonCodec
from goflux.testing import SparkConnectServer
from goflux.transports import spark as gspark

ROOT = Path(__file__).resolve().parent.parent
STREAM = "SPARKBENCH"


class ConnectClient:
    """A Connect client process that runs the source and sink cases on request."""

    def __init__(self, server: SparkConnectServer, url: str, sink_rows: int, window: int) -> None:
        argv = [sys.executable, "-m", "bench.spark_connect", server.url, url]
        self._process = subprocess.Popen(
            [*argv, str(sink_rows), str(window)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._ask({"case": "ready"})

    def _ask(self, request: dict[str, Any]) -> int:
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the Spark Connect bench client exited ({request['case']})")
        return int(json.loads(line)["count"])

    def source(self) -> int:
        """Rows the goflux source produced over the whole stream (observed)."""
        return self._ask({"case": "source"})

    def sink(self, prefix: str) -> None:
        """Publish the cached rows through ``foreach_batch_publisher``."""
        self._ask({"case": "sink", "prefix": prefix})

    def close(self) -> None:
        """End the client (closing its stdin ends its loop)."""
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(60)


def rows_written(df: DataFrame) -> int:
    """Write ``df`` to the ``noop`` sink; return how many rows went through (observed).

    Shared with bench.spark's classic cases.
    """
    observation = Observation()
    df.observe(observation, F.count(F.lit(1)).alias("rows")).write.format("noop").mode(
        "overwrite"
    ).save()
    return int(observation.get["rows"])


def _serve(connect_url: str, url: str, sink_rows: int, window: int) -> None:
    spark = gspark.connect_session(connect_url)
    source = gspark.read(spark, Order, servers=url, stream=STREAM)
    source.write.format("noop").mode("overwrite").save()  # warm the server's workers
    rows = gspark.read(
        spark,
        Order,
        servers=url,
        stream=STREAM,
        ending=sink_rows + 1,
        messages_per_partition=sink_rows // 2,  # one partition per core
    ).cache()
    rows.count()
    for line in sys.stdin:
        request = json.loads(line)
        count = 0
        if request["case"] == "source":
            count = rows_written(source)
        elif request["case"] == "sink":
            publisher = gspark.foreach_batch_publisher(
                servers=url,
                subject="sparkout.connect",
                codec=JsonCodec(Order),
                id_prefix=request["prefix"],
                window=window,
            )
            publisher(rows, 0)
            count = publisher.history[-1].published
        print(json.dumps({"count": count}), flush=True)
    spark.stop()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
