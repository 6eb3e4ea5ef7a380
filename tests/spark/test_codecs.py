"""The source and the sinks with codecs other than JSON, on a local[2] SparkSession.

The payload's fields are the columns whatever the codec; the codec travels to the
executors, which decode (source) and encode (sinks) with it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from goflux import Codec, JsonCodec
from goflux.codecs import Gzip, MsgpackCodec, YamlCodec, Zstd, pipe
from goflux.testing import NatsServer
from goflux.transports import spark as gspark
from tests.spark.helpers import (
    Sale,
    bodies,
    fetch_all,
    make_stream,
    publish,
    publish_raw,
    run_to_end,
    sale,
)

STREAM, OUT = "SALES", "OUT"
ZSTD_MAGIC, GZIP_MAGIC = b"\x28\xb5\x2f\xfd", b"\x1f\x8b\x08\x00"
COLUMNS = [*Sale.model_fields, "subject", "stream", "seq", "timestamp"]
CODECS: dict[str, Callable[[], Codec[Sale]]] = {
    "msgpack": lambda: MsgpackCodec(Sale),
    "msgpack+gzip": lambda: pipe(MsgpackCodec(Sale), Gzip()),
    "yaml": lambda: YamlCodec(Sale),
}


def by_id(value: Sale) -> str:
    return value.id


def sales_of(df: DataFrame) -> list[Sale]:
    """The rows of ``df`` in sequence order, validated back into sales."""
    columns = gspark.PayloadColumns(Sale)
    return [columns.from_row(row.asDict(recursive=True)) for row in df.orderBy("seq").collect()]


def streamed(df: DataFrame, checkpoint: Path) -> list[dict[str, Any]]:
    """Every row an AvailableNow query over ``df`` hands to foreachBatch."""
    rows: list[dict[str, Any]] = []

    def keep(batch: DataFrame, batch_id: int) -> None:
        rows.extend(row.asDict(recursive=True) for row in batch.collect())

    run_to_end(df.writeStream.foreachBatch(keep), checkpoint)
    return rows


@pytest.mark.parametrize("name", CODECS)
def test_read_and_read_stream_decode_with_the_codec_into_the_payload_columns(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path, name: str
) -> None:
    codec = CODECS[name]()
    values = [sale(n) for n in range(1, 41)]
    publish(nats_server.url, STREAM, values, codec=codec)

    batch = gspark.read(spark, Sale, servers=nats_server.url, stream=STREAM, codec=codec)
    assert batch.columns == COLUMNS
    assert batch.schema["lines"].dataType.simpleString() == (
        "array<struct<sku:string,quantity:bigint,tags:array<string>>>"
    )
    assert sales_of(batch) == values

    stream = gspark.read_stream(spark, Sale, servers=nats_server.url, stream=STREAM, codec=codec)
    assert stream.columns == COLUMNS
    rows = sorted(streamed(stream, tmp_path / "checkpoint"), key=lambda row: row["seq"])
    columns = gspark.PayloadColumns(Sale)
    assert [columns.from_row(row) for row in rows] == values
    assert [row["seq"] for row in rows] == list(range(1, 41))


def test_payloads_the_codec_cannot_decode_go_to_corrupt_or_fail_the_read(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    codec = pipe(MsgpackCodec(Sale), Gzip())
    not_gzip = JsonCodec(Sale).encode(sale(2))  # what a JSON publisher wrote
    not_a_sale = Gzip().encode(MsgpackCodec(dict[str, int]).encode({"id": 5}))
    publish(url, STREAM, [sale(1)], codec=codec)
    publish_raw(url, STREAM, "sales.odd", [not_gzip, not_a_sale])
    publish(url, STREAM, [sale(4)], codec=codec)

    options: dict[str, Any] = {"servers": url, "stream": STREAM, "codec": codec}
    kept = gspark.read(spark, Sale, on_decode_error="corrupt", **options)
    rows = kept.orderBy("seq").collect()
    assert [(row.seq, row.id, row._corrupt) for row in rows] == [
        (1, "s-1", None),
        (2, None, not_gzip),
        (3, None, not_a_sale),
        (4, "s-4", None),
    ]
    stream = gspark.read_stream(spark, Sale, on_decode_error="corrupt", **options)
    streamed_rows = sorted(streamed(stream, tmp_path / "checkpoint"), key=lambda r: r["seq"])
    assert [(r["id"], r["_corrupt"]) for r in streamed_rows] == [
        ("s-1", None),
        (None, not_gzip),
        (None, not_a_sale),
        ("s-4", None),
    ]

    failing = gspark.read(spark, Sale, on_decode_error="fail", **options)
    expected = (
        "stream 'SALES' sequence 2 (subject sales.odd), decoded with "
        "pipe(MsgpackCodec(Sale), Gzip()): pipe(MsgpackCodec(Sale), Gzip()): stage 2 of 2 "
        "(Gzip()) failed"
    )
    with pytest.raises(Exception, match=re.escape(expected)):
        failing.collect()
    # The same read from sequence 3: gzip is fine there, the MessagePack is no sale.
    with pytest.raises(Exception, match=r"sequence 3 \(subject sales.odd\), decoded with pipe"):
        gspark.read(spark, Sale, starting=3, **options).collect()


def test_sinks_encode_rows_with_the_codec_for_any_goflux_subscriber(
    spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    values = [sale(n) for n in range(300)]
    publish(url, STREAM, values)  # JSON in
    make_stream(url, OUT)
    zstd = pipe(MsgpackCodec(Sale), Zstd())
    gzip = pipe(MsgpackCodec(Sale), Gzip())

    publisher = gspark.foreach_batch_publisher(
        servers=url, subject="out.zstd", codec=zstd, key_column="id"
    )
    publisher(gspark.read(spark, Sale, servers=url, stream=STREAM).repartition(3), 0)
    assert publisher.last == gspark.SinkStats(batch_id=0, published=300, duplicates=0)

    source = gspark.read_stream(spark, Sale, servers=url, stream=STREAM)
    writer = gspark.write_stream(source, servers=url, subject="out.gzip", codec=gzip)
    run_to_end(writer, tmp_path / "checkpoint")

    assert {body[:4] for body in bodies(url, OUT)} == {ZSTD_MAGIC, GZIP_MAGIC}

    # A goflux subscriber fetching with the same codec reads every sale back ...
    fetched = fetch_all(url, OUT, "out.zstd", pipe(MsgpackCodec(Sale), Zstd()), 300)
    assert sorted(fetched, key=by_id) == sorted(values, key=by_id)
    fetched = fetch_all(url, OUT, "out.gzip", pipe(MsgpackCodec(Sale), Gzip()), 300)
    assert sorted(fetched, key=by_id) == sorted(values, key=by_id)
    # ... and so does the source with the codec.
    back = gspark.read(spark, Sale, servers=url, stream=OUT, subjects="out.gzip", codec=gzip)
    assert sorted(sales_of(back), key=by_id) == sorted(values, key=by_id)
