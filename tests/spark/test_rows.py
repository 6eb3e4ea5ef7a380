"""RowBuilder and source_schema: received messages to Arrow batches (no Spark session)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from nats.aio.msg import Msg
from pydantic import BaseModel

from goflux import DecodeError
from goflux._wire import RepeatedHeaders
from goflux.codecs import Gzip, MsgpackCodec, pipe
from goflux.transports.spark._connection import ConnectionOptions
from goflux.transports.spark._datasource.rows import CORRUPT_COLUMN, RowBuilder, source_schema
from goflux.transports.spark._errors import SchemaError
from goflux.transports.spark._options import SourceOptions
from tests.spark.helpers import Sale, sale

STORED_NS = 1_767_225_600_123_456_789  # 2026-01-01 00:00:00.123456789 UTC


def options(payload_type: Any = Sale, **kwargs: Any) -> SourceOptions:
    return SourceOptions(
        connection=ConnectionOptions(servers=("nats://127.0.0.1:4222",)),
        stream="SALES",
        payload_type=payload_type,
        **kwargs,
    )


def received(seq: int, data: bytes, headers: dict[str, str] | None = None) -> Msg:
    """A message as a pull consumer hands it over: the facts are in the ack subject."""
    reply = f"$JS.ACK.SALES.reader.1.{seq}.{seq}.{STORED_NS}.0"
    return Msg(None, subject=f"sales.{seq}", reply=reply, data=data, headers=headers)  # type: ignore[arg-type]


def test_typed_batches_have_the_payload_columns_then_the_metadata() -> None:
    builder = RowBuilder(options())
    batch = builder.build([received(7, sale(1).model_dump_json().encode())])
    assert batch.schema == builder.schema
    names = batch.schema.names
    assert names[: len(Sale.model_fields)] == list(Sale.model_fields)
    assert names[len(Sale.model_fields) :] == ["subject", "stream", "seq", "timestamp"]
    (row,) = batch.to_pylist()
    assert row["id"] == "s-1"
    assert row["lines"] == [{"sku": "k-1", "quantity": 2, "tags": ["a"]}]
    assert (row["subject"], row["stream"], row["seq"]) == ("sales.7", "SALES", 7)
    assert row["timestamp"] == datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)


def test_raw_mode_keeps_the_bytes_and_headers_keep_every_line() -> None:
    headers = RepeatedHeaders()
    headers["A"] = "1"
    headers.repeated.append(("A", "2"))
    builder = RowBuilder(options(None, include_headers=True, metadata_prefix="_"))
    batch = builder.build([received(1, b"\x00not json", headers), received(2, b"")])
    assert batch.schema.names == ["value", "_subject", "_stream", "_seq", "_timestamp", "_headers"]
    first, second = batch.to_pylist()
    assert first["value"] == b"\x00not json"
    assert first["_headers"] == [{"key": "A", "value": "1"}, {"key": "A", "value": "2"}]
    assert second["_headers"] is None


def test_an_undecodable_payload_fails_the_batch_naming_its_sequence() -> None:
    builder = RowBuilder(options())
    good = sale(1).model_dump_json().encode()
    with pytest.raises(DecodeError, match=r"stream 'SALES' sequence 2 \(subject sales.2\)"):
        builder.build([received(1, good), received(2, b"{broken")])


class Big(BaseModel):
    id: str
    count: int


def test_corrupt_mode_keeps_what_does_not_decode_or_fit() -> None:
    builder = RowBuilder(options(Big, on_decode_error="corrupt"))
    assert builder.schema.names[-1] == CORRUPT_COLUMN
    too_big = b'{"id": "b", "count": 100000000000000000000}'  # valid JSON, over int64
    batch = builder.build(
        [received(1, b'{"id": "a", "count": 1}'), received(2, b"nope"), received(3, too_big)]
    )
    rows = batch.to_pylist()
    assert [(r["id"], r["count"], r[CORRUPT_COLUMN]) for r in rows] == [
        ("a", 1, None),
        (None, None, b"nope"),
        (None, None, too_big),
    ]
    assert batch.schema.field("id").nullable  # loosened: a corrupt row has no id


def test_payload_fields_named_like_metadata_need_a_prefix() -> None:
    class Clash(BaseModel):
        subject: str

    with pytest.raises(SchemaError, match="set metadata_prefix"):
        source_schema(options(Clash))
    assert "_subject" in source_schema(options(Clash, metadata_prefix="_")).names


def test_a_message_without_a_jetstream_reply_is_refused() -> None:
    builder = RowBuilder(options(None))
    msg = Msg(None, subject="s", reply="_INBOX.x", data=b"1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a JetStream ack subject"):
        builder.build([msg])
    assert builder.build([]).num_rows == 0
    assert isinstance(builder.schema, pa.Schema)


def test_payloads_decode_with_the_source_codec_and_its_failures_name_it() -> None:
    codec = pipe(MsgpackCodec(Sale), Gzip())
    builder = RowBuilder(options(codec=codec))
    batch = builder.build([received(1, codec.encode(sale(1)))])
    assert batch.schema == RowBuilder(options()).schema  # the columns: Sale's fields
    assert batch.to_pylist()[0]["lines"] == [{"sku": "k-1", "quantity": 2, "tags": ["a"]}]
    json_sale = sale(2).model_dump_json().encode()
    failure = (
        "stream 'SALES' sequence 2 (subject sales.2), decoded with "
        "pipe(MsgpackCodec(Sale), Gzip()): pipe(MsgpackCodec(Sale), Gzip()): stage 2 of 2"
    )
    with pytest.raises(DecodeError, match=re.escape(failure)):
        builder.build([received(1, codec.encode(sale(1))), received(2, json_sale)])
    kept = RowBuilder(options(codec=codec, on_decode_error="corrupt"))
    rows = kept.build([received(1, json_sale), received(2, codec.encode(sale(2)))]).to_pylist()
    assert [(r["id"], r[CORRUPT_COLUMN]) for r in rows] == [(None, json_sale), ("s-2", None)]


class Loose:
    """A codec that states no payload type: it decodes any JSON value."""

    def encode(self, value: object, /) -> bytes:
        return json.dumps(value).encode()

    def decode(self, data: bytes, /) -> object:
        return json.loads(data)


def test_a_value_that_is_no_payload_is_undecodable() -> None:
    data = b'{"id": "s-1"}'  # a dict, not a Sale
    with pytest.raises(DecodeError, match=r"sequence 1 .*the codec gave a dict, not a Sale"):
        RowBuilder(options(codec=Loose())).build([received(1, data)])
    kept = RowBuilder(options(codec=Loose(), on_decode_error="corrupt"))
    assert kept.build([received(1, data)]).to_pylist()[0][CORRUPT_COLUMN] == data
