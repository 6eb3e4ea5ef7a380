"""Levels read when a metric reader collects: the live sources of one observable gauge.

An OpenTelemetry observable gauge takes its callbacks when it is created, and the API
has no way to remove one. goflux therefore makes one gauge per meter (beside its
counters, :class:`~goflux._otel.telemetry.Counters`) whose callback reads a registry:
a subscription adds a source when it starts (an attribute set and a function that
reads its level, such as the length of its queue) and removes it when it closes. The
hot path pays nothing: a level is read only when a reader collects.
"""

from __future__ import annotations

import itertools
import logging
import operator
from collections.abc import Callable, Iterable, Mapping

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.util.types import AttributeValue

__all__ = ("Levels",)

logger = logging.getLogger("goflux.telemetry")

_Key = frozenset[tuple[str, AttributeValue]]


class Levels:
    """The live sources of one observable gauge; pass :meth:`observe` as its callback.

    Sources with equal attribute sets are combined: added up by default (two
    subscriptions on one subject report the messages waiting in both), or with
    ``combine`` (``max`` for levels that both sources see whole, such as the backlog
    of one consumer two subscriptions share). A source whose reader returns None is
    left out of that collection (it has nothing to report yet), as is one whose reader
    raises (logged at debug level): the others are reported all the same.

    Args:
        combine: Combines the levels of two sources with equal attribute sets.
    """

    __slots__ = ("_combine", "_ids", "_sources")

    def __init__(self, combine: Callable[[int, int], int] = operator.add) -> None:
        self._combine = combine
        self._sources: dict[int, tuple[Mapping[str, AttributeValue], Callable[[], int | None]]]
        self._sources = {}
        self._ids = itertools.count()

    def watch(
        self, attributes: Mapping[str, AttributeValue], read: Callable[[], int | None]
    ) -> Callable[[], None]:
        """Report ``read()`` under ``attributes`` at every collection, until unwatched.

        Returns:
            The function that removes the source (calling it again does nothing).
        """
        key = next(self._ids)
        self._sources[key] = (dict(attributes), read)

        def unwatch() -> None:
            self._sources.pop(key, None)

        return unwatch

    def __len__(self) -> int:
        """The number of live sources."""
        return len(self._sources)

    def observe(self, options: CallbackOptions) -> Iterable[Observation]:
        """Every live source's level, combined by attribute set: the gauge's callback."""
        levels: dict[_Key, tuple[Mapping[str, AttributeValue], int]] = {}
        for attributes, read in list(self._sources.values()):  # one C-level copy
            try:
                value = read()
            except Exception:  # one source must not hide the others
                logger.debug("a level source failed", exc_info=True)
                continue
            if value is None:
                continue
            key: _Key = frozenset(attributes.items())
            found = levels.get(key)
            if found is not None:
                value = self._combine(found[1], value)
            levels[key] = (attributes, value)
        return [Observation(value, attributes) for attributes, value in levels.values()]
