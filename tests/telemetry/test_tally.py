"""Running totals behind goflux's counters: one total per attribute set, bounded."""

from __future__ import annotations

import pytest
from opentelemetry.metrics import CallbackOptions

from goflux._otel.tally import OVERFLOW_ATTRIBUTES, Tally


def observed(tally: Tally) -> dict[tuple[tuple[str, object], ...], int | float]:
    return {
        tuple(sorted((o.attributes or {}).items())): o.value
        for o in tally.observe(CallbackOptions())
    }


def test_equal_attribute_sets_share_one_total_and_untouched_ones_are_not_reported() -> None:
    tally = Tally()
    first = tally.count({"a": "1", "b": 2})
    assert tally.count({"b": 2, "a": "1"}) is first
    tally.count({"a": "never"})  # looked up, never added to
    first.value += 2
    tally.add({"a": "1", "b": 2}, 3)
    assert observed(tally) == {(("a", "1"), ("b", 2)): 5}
    assert tally.total() == 5


def test_a_copy_of_the_attributes_is_kept() -> None:
    tally = Tally()
    attributes = {"a": "1"}
    tally.add(attributes)
    attributes["a"] = "changed"
    assert observed(tally) == {(("a", "1"),): 1}


def test_attribute_sets_beyond_the_limit_go_to_the_overflow_set() -> None:
    tally = Tally(limit=2)
    for n in range(5):
        tally.add({"n": n})
    assert observed(tally) == {
        (("n", 0),): 1,
        (("n", 1),): 1,
        tuple(OVERFLOW_ATTRIBUTES.items()): 3,
    }
    with pytest.raises(ValueError, match="limit"):
        Tally(limit=0)
