"""``write_stream``: a streaming DataFrame published to JetStream by the data source's sink."""

from __future__ import annotations

from typing import Any, TypeVar

from pyspark.sql import DataFrame
from pyspark.sql.streaming.readwriter import DataStreamWriter

from goflux._codecs import BytesCodec, JsonCodec
from goflux.transports.spark._datasource import FORMAT, register
from goflux.transports.spark._sink import foreach_batch_publisher

__all__ = ("write_stream",)

T = TypeVar("T")


def write_stream(
    df: DataFrame,
    *,
    servers: str | list[str] | tuple[str, ...],
    subject: str | None = None,
    codec: JsonCodec[T] | BytesCodec,
    key_column: str | None = None,
    subject_column: str | None = None,
    id_prefix: str | None = None,
    window: int = 1_000,
    timeout: float = 10.0,
    **connection: Any,
) -> DataStreamWriter:
    """``df.writeStream`` set up for the ``goflux-jetstream`` sink.

    The same publishing as :func:`foreach_batch_publisher` (arguments alike), as a
    streaming sink; add ``.option("checkpointLocation", ...)`` and ``.start()``.

    Raises:
        SourceOptionError: See :func:`foreach_batch_publisher`.
        SchemaError: The payload type has no Spark schema.
        TypeError: ``codec`` is neither a ``JsonCodec`` nor a ``BytesCodec``.
    """
    publisher = foreach_batch_publisher(
        servers=servers,
        subject=subject,
        codec=codec,
        key_column=key_column,
        subject_column=subject_column,
        id_prefix=id_prefix,
        window=window,
        timeout=timeout,
        **connection,
    )
    publisher.options.check_columns(df.schema)
    register(df.sparkSession)
    return df.writeStream.format(FORMAT).options(**publisher.options.to_options())
