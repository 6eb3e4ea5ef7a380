from __future__ import annotations

import pytest

import goflux._errors as errors
from goflux import GofluxError, NonRetryable, is_non_retryable
from goflux._errors import find_in_chain


def test_every_error_derives_from_the_root() -> None:
    for name in errors.__all__:
        obj = getattr(errors, name)
        if isinstance(obj, type):
            assert issubclass(obj, GofluxError), name


def test_builtin_families_are_kept() -> None:
    assert issubclass(errors.DecodeError, ValueError)
    assert issubclass(errors.InvalidSubject, ValueError)
    assert issubclass(errors.RequestTimeout, TimeoutError)
    assert issubclass(errors.AlreadySettled, errors.SettlementError)


def wrap_suppressing_context() -> None:
    try:
        try:
            raise KeyError("sku")
        except KeyError as exc:
            raise NonRetryable("unknown sku") from exc
    except NonRetryable:
        raise RuntimeError("handler wrapper") from None


def wrap_keeping_context() -> None:
    try:
        raise NonRetryable("permanent")
    except NonRetryable:
        raise RuntimeError("while handling")  # noqa: B904 - the implicit context is the point


def test_non_retryable_is_found_through_the_chain() -> None:
    with pytest.raises(RuntimeError) as info:
        wrap_suppressing_context()
    assert not is_non_retryable(info.value)

    with pytest.raises(RuntimeError) as info:
        wrap_keeping_context()
    assert not is_non_retryable(info.value)  # raised while handling it: a new failure
    assert find_in_chain(info.value, NonRetryable) is not None  # but still in the chain

    explicit = RuntimeError("wrapper")
    explicit.__cause__ = NonRetryable("bad")
    assert is_non_retryable(explicit)
    assert find_in_chain(explicit, NonRetryable) is explicit.__cause__


def test_non_retryable_inside_exception_groups() -> None:
    group = ExceptionGroup("tasks", [ValueError("x"), ExceptionGroup("inner", [NonRetryable("y")])])
    assert is_non_retryable(group)
    assert not is_non_retryable(ExceptionGroup("tasks", [ValueError("x")]))


def test_cycles_terminate() -> None:
    a, b = ValueError("a"), ValueError("b")
    a.__cause__, b.__cause__ = b, a
    assert not is_non_retryable(a)


def test_no_publish_error_is_both_permanent_and_may_be_stored() -> None:
    """A message that may be stored is worth a retry with its ID: may_be_stored wins."""
    for error in (
        errors.PublishError("x", subject="s", may_be_stored=True, permanent=True),
        errors.PermissionDenied(
            "x", operation="publish", subject="s", reason="r", may_be_stored=True
        ),
        errors.MaxPayloadLowered("x", subject="s", limit=1, announced=2, may_be_stored=True),
    ):
        assert error.may_be_stored
        assert not error.permanent, type(error).__name__
    assert errors.PermissionDenied("x", operation="publish", subject="s", reason="r").permanent
    assert errors.PublishError("x", subject="s", permanent=True).permanent
