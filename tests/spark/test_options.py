"""Source, sink and connection options: parsing, validation, secrets (no Spark session)."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from pyspark.sql import Row

from goflux import InvalidSubject, JsonCodec, StrCodec, TransportError
from goflux.transports import spark as gspark
from goflux.transports.spark._connection import ConnectionOptions
from goflux.transports.spark._options import SourceOptions, load_type
from goflux.transports.spark._sink import SinkOptions, _as_batches
from goflux.transports.spark._source import split_range
from tests.spark.helpers import Sale


def test_source_options_round_trip_through_spark_strings() -> None:
    options = SourceOptions(
        connection=ConnectionOptions(servers=("nats://a:4222", "nats://b:4222")),
        stream="SALES",
        subjects=("sales.eu", "sales.us.>"),
        starting_time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        max_messages_per_trigger=500,
        fail_on_data_loss=False,
        include_headers=True,
        on_decode_error="corrupt",
        payload_type=Sale,
        idle_timeout=2.5,
    )
    assert SourceOptions.parse(options.to_options()) == options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stream": "S"}, "'servers' is required"),
        ({"servers": "nats://x"}, "'stream' is required"),
        ({"servers": "nats://x", "stream": "S", "bogus": "1"}, "unknown option"),
        ({"servers": "nats://x", "stream": "S", "startingOffsets": "first"}, "startingOffsets"),
        ({"servers": "nats://x", "stream": "S", "maxMessagesPerTrigger": "0"}, ">= 1"),
        ({"servers": "nats://x", "stream": "S", "failOnDataLoss": "yes"}, "true or false"),
        ({"servers": "nats://x", "stream": "S", "onDecodeError": "skip"}, "fail or corrupt"),
        ({"servers": "nats://x", "stream": "S", "idleTimeout": "nan"}, "number > 0"),
        ({"servers": "nats://x", "stream": "S", "payloadType": "nowhere:Thing"}, "cannot import"),
        ({"servers": "nats://x", "stream": "S", "subjects": "s.>,s.a"}, "overlap"),
        ({"servers": "nats://x", "stream": "S", "subjects": "s.*.c,s.b.*"}, "overlap"),
        ({"servers": "nats://x", "stream": "S", "subjects": "s.a,s.a"}, "overlap"),
        ({"servers": "nats://x", "stream": "S", "connectTimeout": "nan"}, "connect_timeout"),
        (
            {
                "servers": "nats://x",
                "stream": "S",
                "startingOffsets": "1",
                "startingTimestamp": "0",
            },
            "not both",
        ),
    ],
)
def test_bad_source_options_are_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(gspark.SourceOptionError, match=message):
        SourceOptions.parse(options)


def test_bad_subject_filter_is_refused() -> None:
    with pytest.raises(InvalidSubject):
        SourceOptions.parse({"servers": "nats://x", "stream": "S", "subjects": "a..b"})


def test_payload_type_by_import_path() -> None:
    assert load_type("tests.spark.helpers:Sale") is Sale


def test_credentials_in_urls_move_to_redacted_fields() -> None:
    settings = ConnectionOptions(servers=("nats://alice:s%40cret@h:4222", "nats://h2:4222"))
    assert settings.servers == ("nats://h:4222", "nats://h2:4222")
    assert (settings.user, settings.password) == ("alice", "s@cret")
    assert "s@cret" not in repr(settings)
    assert "cret" not in settings.to_options()["servers"]
    token = ConnectionOptions(servers="nats://t0ken@h:4222")
    assert (token.token, token.servers) == ("t0ken", ("nats://h:4222",))
    with pytest.raises(gspark.SourceOptionError, match="different credentials"):
        ConnectionOptions(servers=("nats://a:b@h", "nats://a:c@h2"))
    with pytest.raises(gspark.SourceOptionError, match="go together"):
        ConnectionOptions(servers=("nats://h",), user="alone")


def test_sink_options_take_fractional_timeouts_and_check_subjects() -> None:
    sink = SinkOptions(
        connection=ConnectionOptions(servers=("nats://h",)),
        subject="out.x",
        payload_type=Sale,
        timeout=0.5,
    )
    assert SinkOptions.parse(sink.to_options()) == sink
    with pytest.raises(InvalidSubject):
        SinkOptions(connection=sink.connection, subject="out.*")
    with pytest.raises(gspark.SourceOptionError, match="subject or subject_column"):
        SinkOptions(connection=sink.connection, subject="a", subject_column="b")
    with pytest.raises(TypeError, match="JsonCodec or a BytesCodec"):
        gspark.foreach_batch_publisher(servers="nats://h", subject="a", codec=StrCodec())  # type: ignore[arg-type]
    with pytest.raises(gspark.SchemaError):
        gspark.foreach_batch_publisher(servers="nats://h", subject="a", codec=JsonCodec(object))


def test_ranges_split_evenly_and_contiguously() -> None:
    parts = split_range("S", 1, 101, per_partition=30, max_partitions=64)
    assert [(p.start, p.end) for p in parts] == [(1, 26), (26, 51), (51, 76), (76, 101)]
    assert split_range("S", 5, 5, per_partition=10, max_partitions=4) == []
    capped = split_range("S", 1, 1_001, per_partition=1, max_partitions=3)
    assert [(p.start, p.end) for p in capped] == [(1, 334), (334, 667), (667, 1_001)]


def test_stream_writer_takes_rows_where_pyspark_has_no_arrow_writer() -> None:
    rows = [Row(id=f"s-{n}", lines=[Row(sku="k", quantity=n)]) for n in range(2_500)]
    batches = list(_as_batches(iter(rows)))
    assert [batch.num_rows for batch in batches] == [1_000, 1_000, 500]
    assert batches[2].to_pylist()[-1] == {
        "id": "s-2499",
        "lines": [{"sku": "k", "quantity": 2_499}],
    }
    arrow = pa.RecordBatch.from_pylist([{"id": "x"}])
    assert list(_as_batches(iter([arrow]))) == [arrow]


def test_an_unreachable_server_fails_at_once() -> None:
    settings = ConnectionOptions(servers=("nats://127.0.0.1:1",), connect_timeout=1)
    with pytest.raises(
        TransportError, match=re.escape("cannot connect to NATS at nats://127.0.0.1:1")
    ):
        asyncio.run(asyncio.wait_for(settings.connect(), 10))  # it used to retry forever
