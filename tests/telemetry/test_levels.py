"""Levels: the live sources of an observable gauge, read when a reader collects."""

from __future__ import annotations

from opentelemetry.metrics import CallbackOptions

from goflux._otel.levels import Levels


def observed(levels: Levels) -> dict[str, int]:
    return {
        str((o.attributes or {})["subject"]): int(o.value)
        for o in levels.observe(CallbackOptions())
    }


def broken() -> int:
    raise RuntimeError("a source that fails")


def test_sources_are_read_at_collection_combined_and_unwatched() -> None:
    levels = Levels()
    waiting = [3]
    first = levels.watch({"subject": "a"}, lambda: waiting[0])
    second = levels.watch({"subject": "a"}, lambda: 2)
    levels.watch({"subject": "b"}, lambda: None)  # nothing to report yet
    levels.watch({"subject": "c"}, broken)  # left out, the others still reported
    assert observed(levels) == {"a": 5}  # equal attribute sets add up
    waiting[0] = 0
    assert observed(levels) == {"a": 2}  # read again at each collection
    first()
    second()
    second()  # a second call does nothing
    assert observed(levels) == {}
    assert len(levels) == 2


def test_a_combine_function_replaces_the_sum() -> None:
    levels = Levels(max)
    levels.watch({"subject": "a"}, lambda: 4)
    levels.watch({"subject": "a"}, lambda: 7)
    assert observed(levels) == {"a": 7}
