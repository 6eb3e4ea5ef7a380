from __future__ import annotations

import pytest

from goflux import InvalidSubject
from goflux._subjects import is_wildcard, matches, validate_pattern, validate_subject


@pytest.mark.parametrize(
    "subject", ["orders", "orders.created", "a.b.c-d_e", "ü.ok", "$JS.API.INFO"]
)
def test_valid_subjects(subject: str) -> None:
    assert validate_subject(subject) == subject
    assert validate_pattern(subject) == subject


@pytest.mark.parametrize(
    ("subject", "reason"),
    [
        ("", "must not be empty"),
        ("orders..created", "empty token"),
        (".orders", "empty token"),
        ("orders.", "empty token"),
        ("orders created", "whitespace"),
        ("orders\tcreated", "whitespace"),
        ("orders\r\nPUB x", "whitespace"),
        ("orders.\x01", "control"),
        ("orders.*", "only allowed in subscriptions"),
        ("orders.>", "only allowed in subscriptions"),
        ("orders.a*", "wildcard inside token"),
        (None, "must be a str"),
        (b"orders", "must be a str"),
    ],
)
def test_invalid_publish_subjects(subject: object, reason: str) -> None:
    with pytest.raises(InvalidSubject, match=reason) as info:
        validate_subject(subject)  # type: ignore[arg-type]
    assert info.value.subject == subject


@pytest.mark.parametrize("pattern", ["orders.*", "orders.>", "*.created", ">", "*", "a.*.c.>"])
def test_valid_patterns(pattern: str) -> None:
    assert validate_pattern(pattern) == pattern
    assert is_wildcard(pattern)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("orders.>.x", "must be the last token"),
        ("orders.*x", "wildcard inside token"),
        ("a..b", "empty token"),
        ("", "must not be empty"),
        ("a b", "whitespace"),
    ],
)
def test_invalid_patterns(pattern: str, reason: str) -> None:
    with pytest.raises(InvalidSubject, match=reason):
        validate_pattern(pattern)


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("orders.created", "orders.created", True),
        ("orders.created", "orders.deleted", False),
        ("orders.*", "orders.created", True),
        ("orders.*", "orders.created.eu", False),
        ("orders.*", "orders", False),
        ("orders.>", "orders.created", True),
        ("orders.>", "orders.created.eu", True),
        ("orders.>", "orders", False),
        ("*.created", "orders.created", True),
        (">", "anything.at.all", True),
        ("a.*.c", "a.b.c", True),
        ("a.*.c", "a.b.d", False),
        ("a.b", "a.b.c", False),
    ],
)
def test_matching(pattern: str, subject: str, expected: bool) -> None:
    assert matches(pattern, subject) is expected
