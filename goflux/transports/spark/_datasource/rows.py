"""Turn received JetStream messages into Arrow record batches of the source's schema.

Typed mode: the payload type's fields become columns (see :mod:`.._schema`), followed by
the metadata columns ``subject``, ``stream``, ``seq`` and ``timestamp`` (optionally
prefixed), ``headers`` when asked for, and ``_corrupt`` when undecodable payloads are
kept instead of failing the batch. Raw mode has a ``value`` bytes column instead of
the payload's fields. Payloads are decoded with the source's codec (JSON by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from nats.aio.msg import Msg
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from goflux._codecs import Codec, JsonCodec, as_decode_error
from goflux._errors import DecodeError
from goflux.transports.jetstream._acker import ack_tokens
from goflux.transports.spark._errors import SchemaError
from goflux.transports.spark._options import SourceOptions
from goflux.transports.spark._schema import PayloadColumns, arrow_schema, loosen_nulls

__all__ = ("CORRUPT_COLUMN", "HEADER_TYPE", "RowBuilder", "source_schema")

CORRUPT_COLUMN = "_corrupt"
_ARROW_ERRORS = (pa.ArrowException, OverflowError, TypeError, ValueError)
HEADER_TYPE = ArrayType(
    StructType(
        [
            StructField("key", StringType(), nullable=False),
            StructField("value", StringType(), nullable=False),
        ]
    ),
    containsNull=False,
)


def _metadata_fields(options: SourceOptions) -> list[StructField]:
    prefix = options.metadata_prefix
    fields = [
        StructField(prefix + "subject", StringType(), nullable=False),
        StructField(prefix + "stream", StringType(), nullable=False),
        StructField(prefix + "seq", LongType(), nullable=False),
        StructField(prefix + "timestamp", TimestampType(), nullable=False),
    ]
    if options.include_headers:
        fields.append(StructField(prefix + "headers", HEADER_TYPE, nullable=True))
    return fields


def source_schema(options: SourceOptions) -> StructType:
    """The DataFrame schema the source produces for ``options``.

    Raises:
        SchemaError: The payload type has no Spark schema, or one of its columns has
            the name of a metadata column (set ``metadata_prefix``).
    """
    metadata = _metadata_fields(options)
    if options.payload_type is None:
        payload = [StructField("value", BinaryType(), nullable=False)]
    else:
        columns: PayloadColumns[Any] = PayloadColumns(options.payload_type)
        payload = list(columns.struct.fields)
        if options.on_decode_error == "corrupt":
            payload = [
                StructField(f.name, loosen_nulls(f.dataType), nullable=True) for f in payload
            ]
    names = [f.name for f in payload]
    clashes = sorted({f.name for f in metadata} & set(names))
    if clashes:
        raise SchemaError(
            f"payload column(s) {', '.join(clashes)} clash with the source's metadata "
            "columns; set metadata_prefix (e.g. '_') to rename the metadata columns"
        )
    extra = []
    if options.payload_type is not None and options.on_decode_error == "corrupt":
        if CORRUPT_COLUMN in names:
            raise SchemaError(f"the payload has a field named {CORRUPT_COLUMN}")
        extra.append(StructField(CORRUPT_COLUMN, BinaryType(), nullable=True))
    return StructType(payload + metadata + extra)


class RowBuilder:
    """Builds Arrow record batches of :func:`source_schema` from received messages."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        schema = source_schema(options)
        self._schema = arrow_schema(schema)
        self._raw = options.payload_type is None
        self._corrupt = not self._raw and options.on_decode_error == "corrupt"
        self._headers = options.include_headers
        if self._raw:
            self._payload_schema = pa.schema([self._schema.field("value")])
        else:
            self._columns: PayloadColumns[Any] = PayloadColumns(options.payload_type)
            self._codec: Codec[Any] = (
                JsonCodec(options.payload_type) if options.codec is None else options.codec
            )
            self._type_name = getattr(options.payload_type, "__name__", repr(options.payload_type))
            count = len(self._columns.struct.fields)
            self._payload_schema = pa.schema(list(self._schema)[:count])

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of every batch."""
        return self._schema

    def build(self, messages: Sequence[Msg]) -> pa.RecordBatch:
        """Convert ``messages`` (in sequence order) into one record batch.

        Raises:
            DecodeError: A payload does not decode and ``on_decode_error`` is ``fail``;
                the message names the stream sequence, the subject and the codec.
        """
        subjects: list[str] = []
        seqs: list[int] = []
        times: list[int] = []
        for msg in messages:
            tokens, offset = ack_tokens(msg.reply)
            subjects.append(msg.subject)
            seqs.append(int(tokens[offset + 3]))
            times.append(int(tokens[offset + 5]) // 1000)
        if self._raw:
            payload = pa.RecordBatch.from_arrays(
                [pa.array([m.data for m in messages], pa.binary())], schema=self._payload_schema
            )
            corrupt = None
        else:
            payload, corrupt = self._decode(messages, seqs)
        count = len(messages)
        arrays = [
            *payload.columns,
            pa.array(subjects, pa.string()),
            pa.array([self._options.stream] * count, pa.string()),
            pa.array(seqs, pa.int64()),
            pa.array(times, pa.timestamp("us", tz="UTC")),
        ]
        if self._headers:
            arrays.append(
                pa.array([_header_rows(m) for m in messages], self._schema.field(len(arrays)).type)
            )
        if self._corrupt:
            arrays.append(pa.array(corrupt, pa.binary()))
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def _decode(
        self, messages: Sequence[Msg], seqs: list[int]
    ) -> tuple[pa.RecordBatch, list[bytes | None] | None]:
        decode = self._codec.decode
        to_row = self._columns.to_row
        rows: list[dict[str, object]] = []
        corrupt: list[bytes | None] | None = [] if self._corrupt else None
        for index, msg in enumerate(messages):
            try:
                try:
                    value = decode(msg.data)
                except Exception as caught:  # noqa: BLE001 - any codec failure: undecodable
                    error = as_decode_error(caught, self._codec, msg.data)
                    raise error  # noqa: B904 - its cause is set: caught, or its own
                try:
                    rows.append(to_row(value))
                except (AttributeError, KeyError, TypeError) as exc:  # a codec stating no type
                    raise self._not_a_payload(value, len(msg.data), exc) from exc
            except DecodeError as exc:
                if corrupt is None:
                    raise DecodeError(
                        f"stream {self._options.stream!r} sequence {seqs[index]} "
                        f"(subject {msg.subject}), decoded with {self._codec!r}: {exc}",
                        type_name=exc.type_name,
                        size=exc.size,
                    ) from exc
                rows.append({})
                corrupt.append(msg.data)
                continue
            if corrupt is not None:
                corrupt.append(None)
        try:
            return pa.RecordBatch.from_pylist(rows, schema=self._payload_schema), corrupt
        except _ARROW_ERRORS:
            pass  # a valid payload that does not fit its column (an int over 64 bits, ...)
        for index, row in enumerate(rows):
            try:
                pa.RecordBatch.from_pylist([row], schema=self._payload_schema)
            except _ARROW_ERRORS as exc:
                msg = messages[index]
                if corrupt is None:
                    raise DecodeError(
                        f"stream {self._options.stream!r} sequence {seqs[index]} "
                        f"(subject {msg.subject}): the payload does not fit its Spark "
                        f"columns: {exc}",
                        type_name=self._type_name,
                        size=len(msg.data),
                    ) from exc
                rows[index] = {}
                corrupt[index] = msg.data
        return pa.RecordBatch.from_pylist(rows, schema=self._payload_schema), corrupt

    def _not_a_payload(self, value: object, size: int, exc: Exception) -> DecodeError:
        """The error for a decoded value that has not the payload type's columns."""
        return DecodeError(
            f"the codec gave a {type(value).__name__}, not a {self._type_name}: "
            f"{type(exc).__name__}: {exc}",
            type_name=self._type_name,
            size=size,
        )


def _header_rows(msg: Msg) -> list[dict[str, str]] | None:
    headers = msg.headers
    if not headers:
        return None
    lines = getattr(headers, "lines", None)
    pairs = lines if lines is not None else headers.items()
    return [{"key": key, "value": value} for key, value in pairs]
