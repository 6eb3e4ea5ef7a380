"""The ``goflux-jetstream`` Spark data source: its format name, class and registration.

The data source reads with the readers of :mod:`.reader` and writes with the stream
writer of :mod:`.writer`; :func:`register` makes it known to a session.
"""

from __future__ import annotations

import weakref
from typing import Final

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamWriter
from pyspark.sql.types import StructType

from goflux.transports.spark._datasource.reader import JetStreamBatchReader, JetStreamStreamReader
from goflux.transports.spark._datasource.rows import source_schema
from goflux.transports.spark._datasource.writer import JetStreamStreamWriter
from goflux.transports.spark._options import SourceOptions

__all__ = ("FORMAT", "JetStreamDataSource", "register")

FORMAT: Final = "goflux-jetstream"
"""The data source's format name."""

_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()


class JetStreamDataSource(DataSource):
    """The ``goflux-jetstream`` format: a JetStream source and a JetStream sink.

    Register it with :func:`goflux.transports.spark.register`, then use
    ``spark.readStream.format("goflux-jetstream")``, ``spark.read.format(...)`` or
    ``df.writeStream.format(...)`` with the options of :class:`SourceOptions` /
    :class:`SinkOptions`.
    """

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return FORMAT

    def _source(self) -> SourceOptions:
        return SourceOptions.parse(self.options)

    def schema(self) -> StructType:
        """The source's columns (payload fields, metadata, optional headers)."""
        return source_schema(self._source())

    def streamReader(self, schema: StructType) -> JetStreamStreamReader:  # noqa: N802
        """A Structured Streaming reader."""
        return JetStreamStreamReader(self._source())

    def reader(self, schema: StructType) -> JetStreamBatchReader:
        """A batch reader over a bounded range."""
        return JetStreamBatchReader(self._source())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        """A streaming sink publishing each row as a message."""
        return JetStreamStreamWriter(self.options, schema)


def register(spark: SparkSession) -> str:
    """Register the ``goflux-jetstream`` format on ``spark`` (once) and return its name."""
    if spark not in _registered:
        spark.dataSource.register(JetStreamDataSource)
        _registered.add(spark)
    return FORMAT
