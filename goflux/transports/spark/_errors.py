"""The errors of the Spark adapter, all under :class:`SparkError` (a ``GofluxError``)."""

from __future__ import annotations

from goflux._errors import GofluxError

__all__ = ("DataLossError", "SchemaError", "SourceOptionError", "SparkError")


class SparkError(GofluxError):
    """A failure in the Spark adapter (:mod:`goflux.transports.spark`)."""


class SchemaError(SparkError, TypeError):
    """A payload type cannot be represented as Spark columns (or rows as the type).

    Raised for unions of unrelated types, ``Any``, dicts with non-string keys and
    other shapes Spark SQL has no type for; the message names the offending field.
    """


class SourceOptionError(SparkError, ValueError):
    """A source or sink option is missing, unknown or malformed."""


class DataLossError(SparkError):
    """Messages a query still had to read were deleted from the stream.

    Raised (failing the query) when ``fail_on_data_loss`` is true and the stream's
    first sequence has moved past the start of the range being read.

    Attributes:
        stream: The stream name.
        expected: The first sequence the query needed.
        first: The stream's first sequence now.
    """

    def __init__(self, message: str, *, stream: str, expected: int, first: int) -> None:
        super().__init__(message)
        self.stream = stream
        self.expected = expected
        self.first = first

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_data_loss, (str(self), self.stream, self.expected, self.first))


def _rebuild_data_loss(message: str, stream: str, expected: int, first: int) -> DataLossError:
    return DataLossError(message, stream=stream, expected=expected, first=first)
