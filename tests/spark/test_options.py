"""Source, sink and connection options: parsing, validation, secrets (no Spark session).

Also what read, read_stream and run_micro_batches check before they touch Spark.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import threading
from datetime import UTC, datetime
from typing import Any, cast

import pyarrow as pa
import pytest
from pydantic import BaseModel
from pyspark.sql import DataFrame, Row, SparkSession

from goflux import BytesCodec, InvalidSubject, JsonCodec, StrCodec, TransportError
from goflux.codecs import Gzip, MsgpackCodec, YamlCodec, Zstd, pipe
from goflux.transports import channel
from goflux.transports import spark as gspark
from goflux.transports.spark._connection import ConnectionOptions
from goflux.transports.spark._datasource.reader import split_range
from goflux.transports.spark._datasource.writer import _as_batches
from goflux.transports.spark._options import SinkOptions, SourceOptions, load_type
from tests.spark.helpers import Line, Sale, sale


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
        (
            {"servers": "nats://x", "stream": "S", "payloadCodec": "pickle:bm9wZQ=="},
            "cannot unpickle option 'payloadCodec'",
        ),
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
    with pytest.raises(TypeError, match="codec must state its payload type"):
        gspark.foreach_batch_publisher(servers="nats://h", subject="a", codec=StrCodec())  # type: ignore[arg-type]
    with pytest.raises(gspark.SchemaError):
        gspark.foreach_batch_publisher(servers="nats://h", subject="a", codec=JsonCodec(object))


class Locked:
    """A codec of sales that holds a lock, which no pickle carries to an executor."""

    type = Sale

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def encode(self, value: Sale, /) -> bytes:
        return JsonCodec(Sale).encode(value)

    def decode(self, data: bytes, /) -> Sale:
        return JsonCodec(Sale).decode(data)


def test_sinks_take_any_codec_that_states_its_payload_type() -> None:
    zstd = pipe(MsgpackCodec(Sale), Zstd())
    publisher = gspark.foreach_batch_publisher(servers="nats://h", subject="o", codec=zstd)
    assert (publisher.options.payload_type, publisher.options.codec) == (Sale, zstd)
    shipped = SinkOptions.parse(publisher.options.to_options())  # what executors get
    assert (shipped.payload_type, repr(shipped.codec)) == (Sale, repr(zstd))
    assert shipped.codec.decode(zstd.encode(sale(1))) == sale(1)
    # A JsonCodec is made again from its type; raw bytes take no codec.
    json = gspark.foreach_batch_publisher(
        servers="nats://h", subject="o", codec=JsonCodec(Sale, strict=True)
    )
    assert (json.options.payload_type, json.options.codec) == (Sale, None)
    raw = gspark.foreach_batch_publisher(servers="nats://h", subject="o", codec=BytesCodec())
    assert (raw.options.payload_type, raw.options.codec) == (None, None)


def test_sinks_refuse_a_codec_without_a_payload_type_or_a_pickle() -> None:
    accepted = (
        r"codec must state its payload type, as JsonCodec\(T\), MsgpackCodec\(T\), "
        r"YamlCodec\(T\) or pipe\(MsgpackCodec\(T\), Gzip\(\)\) do \(their \.type\), or "
        r"be BytesCodec\(\) for a binary 'value' column; got pipe\(StrCodec\(\), Gzip\(\)\)"
    )
    with pytest.raises(TypeError, match=accepted):
        gspark.foreach_batch_publisher(
            servers="nats://h", subject="o", codec=pipe(StrCodec(), Gzip())
        )
    unpicklable = r"cannot pickle codec <tests.spark.test_options.Locked object at .*>"
    with pytest.raises(gspark.SourceOptionError, match=unpicklable):
        gspark.foreach_batch_publisher(servers="nats://h", subject="o", codec=Locked())
    df = cast(DataFrame, None)  # never reached: the call fails first
    with pytest.raises(gspark.SourceOptionError, match=unpicklable):
        gspark.write_stream(df, servers="nats://h", subject="o", codec=Locked())
    connection = ConnectionOptions(servers=("nats://h",))
    with pytest.raises(gspark.SourceOptionError, match="must state the payload type"):
        SinkOptions(connection=connection, subject="o", payload_type=Sale, codec=YamlCodec(Line))


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


@pytest.mark.slow
def test_an_unreachable_server_fails_at_once() -> None:
    settings = ConnectionOptions(servers=("nats://127.0.0.1:1",), connect_timeout=1)
    with pytest.raises(
        TransportError, match=re.escape("cannot connect to NATS at nats://127.0.0.1:1")
    ):
        asyncio.run(asyncio.wait_for(settings.connect(), 10))  # it used to retry forever


class FakeSession:
    """Just enough of a SparkSession to see what read / read_stream hand to Spark."""

    def __init__(self) -> None:
        self.registered: list[type] = []
        self.loads: list[tuple[str, str, dict[str, str]]] = []
        self.dataSource = self
        self.read = self._Reader(self, "batch")
        self.readStream = self._Reader(self, "stream")

    def register(self, source: type) -> None:
        self.registered.append(source)

    class _Reader:
        def __init__(self, session: FakeSession, kind: str) -> None:
            self._session, self._kind, self._format = session, kind, ""

        def format(self, name: str) -> FakeSession._Reader:
            self._format = name
            return self

        def options(self, **options: str) -> FakeSession._Reader:
            self._session.loads.append((self._kind, self._format, options))
            return self

        def load(self) -> str:
            return f"{self._kind} frame"


def test_read_and_read_stream_hand_spark_the_parsed_options() -> None:
    session = FakeSession()
    spark = cast(SparkSession, session)
    frame: object = gspark.read_stream(
        spark, Sale, servers="nats://a:4222", stream="SALES", subjects="sales.eu", fetch_size=10
    )
    assert frame == "stream frame"
    batch: object = gspark.read(spark, None, servers=["nats://a:4222"], stream="SALES", ending=9)
    assert batch == "batch frame"
    assert len(session.registered) == 1  # the format is registered once per session
    (stream_kind, fmt, streamed), (batch_kind, _, batched) = session.loads
    assert (stream_kind, batch_kind, fmt) == ("stream", "batch", gspark.register(spark))
    parsed = SourceOptions.parse(streamed)
    assert (parsed.stream, parsed.subjects, parsed.fetch_size) == ("SALES", ("sales.eu",), 10)
    assert parsed.payload_type is Sale
    parsed = SourceOptions.parse(batched)
    assert (parsed.payload_type, parsed.ending) == (None, 9)


def test_read_and_read_stream_hand_spark_their_codec_pickled() -> None:
    session = FakeSession()
    spark = cast(SparkSession, session)
    codec = pipe(MsgpackCodec(Sale), Gzip())
    gspark.read(spark, Sale, servers="nats://x", stream="S", codec=codec)
    gspark.read_stream(spark, Sale, servers="nats://x", stream="S", codec=YamlCodec(Sale))
    gspark.read(spark, Sale, servers="nats://x", stream="S")
    (_, _, batched), (_, _, streamed), (_, _, plain) = session.loads
    parsed = SourceOptions.parse(batched)  # as executors do
    assert (parsed.payload_type, repr(parsed.codec)) == (Sale, repr(codec))
    assert parsed.codec.decode(codec.encode(sale(1))) == sale(1)
    assert repr(SourceOptions.parse(streamed).codec) == "YamlCodec(Sale)"
    assert "payloadCodec" not in plain  # JSON, as before: made from the payload type
    assert SourceOptions.parse(plain).codec is None


@pytest.mark.parametrize("reader", [gspark.read, gspark.read_stream])
@pytest.mark.parametrize(
    ("payload_type", "codec", "error", "message"),
    [
        (
            Sale,
            Locked(),
            gspark.SourceOptionError,
            r"cannot pickle codec <tests.spark.test_options.Locked object at .*> for "
            r"Spark's executors: cannot pickle '_thread.lock' object",
        ),
        (
            Sale,
            MsgpackCodec(Line),
            gspark.SourceOptionError,
            r"codec MsgpackCodec\(Line\) decodes Line, but the payload type is Sale",
        ),
        (
            Sale,
            pipe(YamlCodec(Line), Gzip()),
            gspark.SourceOptionError,
            r"codec pipe\(YamlCodec\(Line\), Gzip\(\)\) decodes Line, but the payload type",
        ),
        (
            None,
            MsgpackCodec(Sale),
            gspark.SourceOptionError,
            r"given with payload_type=None: raw mode reads each payload's bytes as they are",
        ),
        (Sale, "json", TypeError, "codec must be a goflux Codec"),
    ],
    ids=["unpicklable", "other-type", "pipe-of-other-type", "raw-mode", "no-codec"],
)
def test_read_refuses_a_codec_that_does_not_fit_before_spark_runs(
    reader: Any, payload_type: Any, codec: Any, error: type[Exception], message: str
) -> None:
    session = FakeSession()
    with pytest.raises(error, match=message):
        reader(
            cast(SparkSession, session), payload_type, servers="nats://x", stream="S", codec=codec
        )
    assert (session.registered, session.loads) == ([], [])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"starting": datetime(2026, 1, 1)}, "timezone-aware"),  # naive, on purpose
        ({"starting": 0}, "starting must be"),
        ({"ending": 0}, "ending must be 'latest' or a sequence >= 1"),
        ({"fetch_size": 0}, "fetch_size must be >= 1"),
        ({"max_partitions": True}, "max_partitions must be >= 1"),
    ],
)
def test_read_refuses_bad_options_before_spark_runs(
    kwargs: dict[str, object], message: str
) -> None:
    session = FakeSession()
    with pytest.raises(gspark.SourceOptionError, match=message):
        gspark.read(cast(SparkSession, session), Sale, servers="nats://x", stream="S", **kwargs)  # type: ignore[arg-type]
    assert session.loads == []


def test_reads_and_sinks_refuse_missing_or_unknown_keywords() -> None:
    session = cast(SparkSession, FakeSession())
    typo: dict[str, Any] = {"fetch_sise": 10}
    with pytest.raises(
        TypeError, match=r"read_stream\(\) got unexpected keyword argument\(s\) fetch_sise"
    ):
        gspark.read_stream(session, Sale, servers="nats://x", stream="S", **typo)
    with pytest.raises(TypeError, match=r"read\(\) missing required keyword argument 'stream'"):
        gspark.read(session, Sale, servers="nats://x")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"read\(\) missing required keyword argument 'servers'"):
        gspark.read(session, Sale, stream="S")  # type: ignore[call-arg]
    codec = JsonCodec(Sale)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) windw"):
        gspark.foreach_batch_publisher(codec=codec, servers="nats://x", subject="o", windw=3)
    publisher = gspark.foreach_batch_publisher(
        codec=codec, servers=["nats://a", "nats://b"], subject="o"
    )
    assert (publisher.options.window, publisher.options.timeout) == (1_000, 10.0)
    assert publisher.options.connection.servers == ("nats://a", "nats://b")
    df = cast(DataFrame, None)  # never reached: the call fails first
    with pytest.raises(
        TypeError, match=r"write_stream\(\) missing required keyword argument 'servers'"
    ):
        gspark.write_stream(df, codec=codec, subject="o")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"read\(\) missing required keyword argument 'servers'"):
        gspark.read(session, Sale)  # type: ignore[call-arg]


async def test_micro_batches_refuse_bad_arguments_before_spark_runs() -> None:
    class Clash(BaseModel):
        seq: int

    no_spark = cast(SparkSession, None)  # never reached: every call fails first
    bus: channel.Bus[Sale] = channel.Bus()
    subscriber = channel.Subscriber(bus)
    with pytest.raises(ValueError, match="max_batches must be >= 1"):
        await gspark.run_micro_batches(no_spark, subscriber, "s", print, max_batches=0)
    with pytest.raises(TypeError, match="pass payload_type="):
        await gspark.run_micro_batches(no_spark, subscriber, "s", print)
    with pytest.raises(gspark.SchemaError, match="clash with the metadata columns"):
        await gspark.run_micro_batches(no_spark, subscriber, "s", print, payload_type=Clash)
    assert gspark.MicroBatchStats() == gspark.MicroBatchStats(batches=0, messages=0)


def test_session_helpers_refuse_the_other_kind_of_url() -> None:
    with pytest.raises(gspark.SourceOptionError, match=r"use connect_session\('sc://h:1'\)"):
        gspark.local_session("sc://h:1")
    with pytest.raises(gspark.SourceOptionError, match="starts with sc://"):
        gspark.connect_session("local[2]")


def test_connect_session_fails_fast_when_no_server_listens() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(
        gspark.SparkError, match=f"no Spark Connect server answers at 127.0.0.1:{port}"
    ):
        gspark.connect_session(f"sc://127.0.0.1:{port}/;user_id=a")
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ  # this process stays classic
    with pytest.raises(gspark.SourceOptionError, match="not a Spark Connect URL"):
        gspark.connect_session("sc://127.0.0.1:99999")
    with pytest.raises(gspark.SourceOptionError, match="retry_seconds must be > 0"):
        gspark.connect_session(f"sc://127.0.0.1:{port}", retry_seconds=0)
