"""Counters kept in Python and reported to OpenTelemetry when a reader collects.

A counter ``add`` in the OpenTelemetry SDK costs several microseconds (a measurement
object, an exemplar check, a lock, a hash of the attributes), which is more than
goflux spends on the rest of a message. A :class:`Tally` keeps one running total per
attribute set instead: the hot path adds to a :class:`Count` it looked up once (an
integer increment), and an observable counter reports every total when a metric reader
collects. The totals are cumulative and exact: a reader sees every increment made
before its collection, with cumulative or delta temporality alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.util.types import AttributeValue

__all__ = ("OVERFLOW_ATTRIBUTES", "Count", "Tally")

OVERFLOW_ATTRIBUTES: Final[Mapping[str, AttributeValue]] = {"otel.metric.overflow": True}
"""Where counts go once a tally holds its limit of attribute sets (as the SDK does)."""

_Key = frozenset[tuple[str, AttributeValue]]


class Count:
    """The running total of one attribute set: add to :attr:`value` (never subtract).

    Attributes:
        value: The total so far.
        attributes: The attribute set it is reported with.
    """

    __slots__ = ("attributes", "value")

    def __init__(self, attributes: Mapping[str, AttributeValue]) -> None:
        self.attributes = attributes
        self.value = 0


class Tally:
    """Running totals of one counter by attribute set, reported by an observable counter.

    :meth:`count` returns the :class:`Count` of an attribute set (the same one every
    time, for equal sets); pass :meth:`observe` as the observable counter's callback.
    Increments happen on the caller's thread, and a reader thread may observe at any
    time: it sees each total as it stands.

    Args:
        limit: Attribute sets kept apart; counts of further sets go to one set
            carrying ``otel.metric.overflow=true`` (the SDK's cardinality limit).

    Raises:
        ValueError: ``limit`` < 1.
    """

    __slots__ = ("_counts", "_limit", "_overflow")

    def __init__(self, limit: int = 2000) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self._counts: dict[_Key, Count] = {}
        self._limit = limit
        self._overflow: Count | None = None

    def count(self, attributes: Mapping[str, AttributeValue]) -> Count:
        """The running total of ``attributes`` (a copy is kept; later changes don't apply)."""
        key: _Key = frozenset(attributes.items())
        found = self._counts.get(key)
        if found is not None:
            return found
        if len(self._counts) >= self._limit:
            if self._overflow is None:
                self._overflow = Count(OVERFLOW_ATTRIBUTES)
            return self._overflow
        return self._counts.setdefault(key, Count(dict(attributes)))

    def add(self, attributes: Mapping[str, AttributeValue], amount: int = 1) -> None:
        """Add ``amount`` to the total of ``attributes`` (looked up on every call)."""
        self.count(attributes).value += amount

    def total(self) -> int:
        """The sum of every total (all attribute sets)."""
        return sum(count.value for count in self._snapshot())

    def observe(self, options: CallbackOptions) -> Iterable[Observation]:
        """Every total above zero with its attributes: the observable counter's callback.

        A count looked up but never added to is not reported (nothing happened).
        """
        return [Observation(c.value, c.attributes) for c in self._snapshot() if c.value]

    def _snapshot(self) -> list[Count]:
        counts = list(self._counts.values())  # one C-level copy: safe while others add
        overflow = self._overflow
        if overflow is not None:
            counts.append(overflow)
        return counts
