"""The ``goflux-jetstream`` Spark data source: what Spark itself calls.

``source`` (the data source class and its registration), ``reader`` (micro-batch and
batch readers over sequence ranges), ``ranges`` (reading one range in a task),
``rows`` (messages to Arrow record batches) and ``writer`` (the stream sink's writer).
The public API over it is :mod:`goflux.transports.spark`.
"""

__all__ = ()
