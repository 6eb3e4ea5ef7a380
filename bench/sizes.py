"""How much each case does: the full run, and the smoke run the test suite makes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """Operations per case (per round) for every suite."""

    codec_ops: int = 20_000
    channel_msgs: int = 50_000
    sequential: int = 2_000
    pipelined: int = 30_000
    window: int = 4_000
    consumed: int = 30_000
    latency_msgs: int = 5_000
    latency_rate: float = 1_000.0
    in_flight: int = 10_000
    spark_source_rows: int = 100_000
    spark_sink_rows: int = 50_000
    spark_window: int = 1_000
    spark_batches: int = 20
    kv_puts: int = 5_000
    kv_gets: int = 10_000
    kv_watched: int = 50_000
    batch_get_msgs: int = 10_000  # stored messages read per case and round
    service_orders: int = 200_000  # goflux run: orders consumed per case and round
    service_calibration: float = 1.0  # seconds of polling alone: the server's CPU per poll
    http_msgs: int = 2_000  # HTTP publish -> handler, per case and round
    http_concurrency: int = 16  # publishers sending at once
    http_requests: int = 1_000  # HTTP request/reply, sequential, per case and round
    shapes_msgs: int = 50_000  # consume-shapes: 100 B and 1 KB messages per case and round
    shapes_large_msgs: int = 10_000  # consume-shapes: 64 KB messages per case and round


FULL = Sizes()
SMOKE = Sizes(
    codec_ops=300,
    channel_msgs=200,
    sequential=30,
    pipelined=300,
    window=100,
    consumed=300,
    latency_msgs=60,
    in_flight=200,
    spark_source_rows=2_000,
    spark_sink_rows=1_000,
    spark_window=100,
    spark_batches=2,
    kv_puts=30,
    kv_gets=30,
    kv_watched=300,
    batch_get_msgs=300,
    service_orders=3_000,
    service_calibration=0.2,
    http_msgs=200,
    http_requests=50,
    shapes_msgs=60,
    shapes_large_msgs=20,
)
