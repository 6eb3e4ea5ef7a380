"""Backoff delays: exponential with cap and jitter, fixed lists like JetStream's."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goflux._backoff import as_backoff
from goflux.middleware import ExponentialBackoff, FixedBackoff


def test_exponential_delays_grow_by_the_multiplier_up_to_the_cap() -> None:
    backoff = ExponentialBackoff(initial=0.5, multiplier=3.0, max=10.0, jitter=0.0)
    assert [backoff.delay(n) for n in range(1, 6)] == [0.5, 1.5, 4.5, 10.0, 10.0]


def test_a_huge_attempt_count_stays_at_the_cap() -> None:
    backoff = ExponentialBackoff(initial=1.0, multiplier=10.0, max=30.0, jitter=0.0)
    assert backoff.delay(10_000) == 30.0


@given(
    attempt=st.integers(min_value=1, max_value=10_000),
    jitter=st.floats(min_value=0.0, max_value=1.0),
)
def test_jitter_only_shortens_and_never_exceeds_the_cap(attempt: int, jitter: float) -> None:
    plain = ExponentialBackoff(initial=0.1, multiplier=2.0, max=5.0, jitter=0.0)
    jittered = ExponentialBackoff(initial=0.1, multiplier=2.0, max=5.0, jitter=jitter)
    base = plain.delay(attempt)
    delay = jittered.delay(attempt)
    assert base * (1 - jitter) <= delay <= base <= 5.0


def test_jitter_spreads_the_delays() -> None:
    backoff = ExponentialBackoff(initial=1.0, multiplier=1.0, max=1.0, jitter=0.5)
    delays = {backoff.delay(1) for _ in range(50)}
    assert len(delays) > 1
    assert all(0.5 <= d <= 1.0 for d in delays)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial": -1.0},
        {"initial": math.inf},
        {"multiplier": 0.5},
        {"multiplier": math.nan},
        {"initial": 5.0, "max": 1.0},
        {"jitter": 1.5},
        {"jitter": -0.1},
    ],
)
def test_exponential_rejects_bad_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        ExponentialBackoff(**kwargs)


def test_exponential_rejects_non_numbers() -> None:
    with pytest.raises(TypeError):
        ExponentialBackoff(initial="1")  # type: ignore[arg-type]


@pytest.mark.parametrize("attempt", [0, -1, True, 1.5])
def test_attempts_count_from_one(attempt: int) -> None:
    with pytest.raises(ValueError, match="attempt"):
        ExponentialBackoff().delay(attempt)
    with pytest.raises(ValueError, match="attempt"):
        FixedBackoff([1.0]).delay(attempt)


def test_fixed_backoff_repeats_its_last_delay() -> None:
    backoff = FixedBackoff([1, 5, 30])
    assert [backoff.delay(n) for n in range(1, 6)] == [1.0, 5.0, 30.0, 30.0, 30.0]
    assert backoff.delays == (1.0, 5.0, 30.0)
    assert backoff == FixedBackoff((1.0, 5.0, 30.0))
    assert repr(backoff) == "FixedBackoff([1.0, 5.0, 30.0])"


@pytest.mark.parametrize("delays", [[], [-1.0], [math.nan], [1.0, math.inf]])
def test_fixed_backoff_rejects_bad_delays(delays: list[float]) -> None:
    with pytest.raises(ValueError, match="delay"):
        FixedBackoff(delays)


def test_as_backoff_accepts_lists_and_backoffs_only() -> None:
    exponential = ExponentialBackoff()
    assert as_backoff(exponential) is exponential
    assert as_backoff([0.5, 2]) == FixedBackoff([0.5, 2.0])
    with pytest.raises(TypeError):
        as_backoff("1,2")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        as_backoff(3.0)  # type: ignore[arg-type]


def test_delays_longer_than_a_year_are_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and"):
        ExponentialBackoff(initial=1.0, max=1e300)
    with pytest.raises(ValueError, match="between 0 and"):
        FixedBackoff([1e10])
