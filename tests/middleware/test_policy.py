"""RetryPolicy decisions: classification, attempt limits, backoff."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from goflux import DecodeError, JsonCodec, NonRetryable
from goflux.middleware import Decision, RetryPolicy
from tests.models import Order


def decode_error() -> DecodeError:
    try:
        JsonCodec(Order).decode(b"{")
    except DecodeError as exc:
        return exc
    raise AssertionError("decoding must fail")


def test_retryable_errors_are_naked_with_the_backoff_delay() -> None:
    policy = RetryPolicy(backoff=[1.0, 2.0], max_attempts=4)
    assert policy.decide(ConnectionError(), 1) == Decision("nak", delay=1.0)
    assert policy.decide(ConnectionError(), 2) == Decision("nak", delay=2.0)
    assert policy.decide(ConnectionError(), 3) == Decision("nak", delay=2.0)


def test_the_last_attempt_gives_up() -> None:
    policy = RetryPolicy(backoff=[1.0], max_attempts=3)
    assert policy.decide(ConnectionError(), 3) == Decision("term", reason="max_attempts")
    assert policy.decide(ConnectionError(), 7) == Decision("term", reason="max_attempts")


def test_unlimited_attempts_never_give_up_a_retryable_error() -> None:
    policy = RetryPolicy(backoff=[1.0], max_attempts=None)
    assert policy.decide(ConnectionError(), 1_000_000).action == "nak"


def test_a_zero_delay_naks_at_once() -> None:
    assert RetryPolicy(backoff=[0]).decide(ValueError(), 1) == Decision("nak", delay=None)


def test_non_retryable_is_given_up_at_once_even_when_wrapped() -> None:
    policy = RetryPolicy()
    assert policy.decide(NonRetryable("no"), 1) == Decision("term", reason="non_retryable")
    wrapper = RuntimeError("wrapper")
    wrapper.__cause__ = NonRetryable("inner")
    assert policy.decide(wrapper, 1).reason == "non_retryable"
    group = ExceptionGroup("many", [ValueError(), NonRetryable("one of them")])
    assert policy.decide(group, 1).reason == "non_retryable"


def test_decode_errors_are_never_retried() -> None:
    policy = RetryPolicy()
    error = decode_error()
    assert policy.decide(error, 1) == Decision("term", reason="undecodable")
    wrapped = RuntimeError("nested payload")
    wrapped.__cause__ = error
    assert policy.decide(wrapped, 1).reason == "undecodable"


def test_an_error_merely_raised_while_handling_a_decode_error_is_retried() -> None:
    """Implicit context is not a cause: a transient failure in a fallback path retries."""
    policy = RetryPolicy()
    transient = ConnectionError("fallback lookup failed")
    transient.__context__ = decode_error()  # what ``raise`` inside ``except`` records
    assert policy.decide(transient, 1).action == "nak"


def test_configured_types_and_predicate_are_permanent() -> None:
    policy = RetryPolicy(
        non_retryable=(ValidationError, KeyError),
        is_permanent=lambda exc: "forbidden" in str(exc),
    )
    assert policy.decide(KeyError("sku"), 1).reason == "non_retryable"
    with pytest.raises(ValidationError) as invalid:
        Order.model_validate({})
    assert policy.decide(invalid.value, 1).reason == "non_retryable"
    assert policy.decide(PermissionError("forbidden"), 1).reason == "non_retryable"
    assert policy.decide(PermissionError("try later"), 1).action == "nak"


@pytest.mark.parametrize("max_attempts", [0, -1, True, 2.5])
def test_max_attempts_must_be_a_positive_int(max_attempts: int) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=max_attempts)


def test_non_retryable_must_hold_exception_types() -> None:
    with pytest.raises(TypeError, match="exception types"):
        RetryPolicy(non_retryable=("ValueError",))  # type: ignore[arg-type]


def test_decide_rejects_attempt_zero() -> None:
    with pytest.raises(ValueError, match="attempt"):
        RetryPolicy().decide(ValueError(), 0)


def test_default_policy_retries_five_times_with_exponential_backoff() -> None:
    policy = RetryPolicy()
    assert policy.max_attempts == 5
    first = policy.decide(ConnectionError(), 1)
    assert first.action == "nak"
    assert first.delay is not None
    assert 0.9 <= first.delay <= 1.0
    assert "max_attempts=5" in repr(policy)


def test_a_broken_predicate_counts_as_retryable() -> None:
    def broken(exc: BaseException) -> bool:
        raise RuntimeError("bug in the predicate")

    policy = RetryPolicy(backoff=[1.0], max_attempts=2, is_permanent=broken)
    assert policy.decide(ValueError(), 1) == Decision("nak", delay=1.0)
    assert policy.decide(ValueError(), 2) == Decision("term", reason="max_attempts")


def test_an_error_raised_while_handling_non_retryable_is_a_new_failure() -> None:
    transient = ConnectionError("cleanup failed")
    transient.__context__ = NonRetryable("bad order")  # raised inside ``except``
    assert RetryPolicy().decide(transient, 1).action == "nak"
