"""NATS subject rules: validation of publish subjects and subscription patterns, matching.

A subject is a dot-separated list of non-empty tokens without whitespace or control
characters. Subscriptions may use wildcards as whole tokens: ``*`` matches exactly one
token and ``>`` (last token only) matches one or more. A wildcard character inside a
token (``orders.*-created``) is refused: NATS would treat it as a literal, which is
almost never what was meant. A subject is at most :data:`MAX_SUBJECT_BYTES` long in
UTF-8: nats-server closes the connection of a client whose protocol line exceeds its
``max_control_line`` (4 KiB by default), which would take every other message on that
connection with it.
"""

from __future__ import annotations

import re
from functools import lru_cache

from goflux._errors import InvalidSubject, SubjectError

__all__ = (
    "MAX_SUBJECT_BYTES",
    "TOKEN",
    "check_length",
    "check_token",
    "covers",
    "is_wildcard",
    "matches",
    "tokens_match",
    "too_long",
    "validate_pattern",
    "validate_subject",
)

_LITERAL = r"[^.*>\s\x00-\x1f\x7f]+"
_SUBJECT = re.compile(rf"{_LITERAL}(?:\.{_LITERAL})*")
_PATTERN = re.compile(rf"(?:{_LITERAL}|\*)(?:\.(?:{_LITERAL}|\*))*(?:\.>)?|>")
_BAD_CHAR = re.compile(r"[\s\x00-\x1f\x7f]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SPACE = re.compile(r"\s")

TOKEN = _LITERAL
"""A regular expression of one literal token: no dot, wildcard, whitespace or control."""

MAX_SUBJECT_BYTES = 3_072
"""The longest subject or pattern accepted, in UTF-8 bytes.

It leaves room within nats-server's default 4 KiB protocol line for the reply inbox
and the sizes that share the line with the subject.
"""


def too_long(subject: str) -> bool:
    """Report whether ``subject`` is longer than :data:`MAX_SUBJECT_BYTES` in UTF-8."""
    return _too_long(subject)


def _too_long(subject: str) -> bool:
    return len(subject) > MAX_SUBJECT_BYTES or (
        len(subject) * 4 > MAX_SUBJECT_BYTES and len(subject.encode()) > MAX_SUBJECT_BYTES
    )


def _diagnose(subject: object, *, pattern: bool) -> InvalidSubject:  # noqa: PLR0911
    what = "subscription pattern" if pattern else "subject"
    if not isinstance(subject, str):
        return InvalidSubject(
            f"{what} must be a str, got {type(subject).__name__}", subject=subject
        )
    if not subject:
        return InvalidSubject(f"{what} must not be empty", subject=subject)
    if _too_long(subject):
        size = len(subject.encode())
        return InvalidSubject(
            f"invalid {what} {subject[:40]!r}... ({size} bytes): longer than "
            f"{MAX_SUBJECT_BYTES} bytes, which nats-server would answer by closing the "
            "connection",
            subject=subject,
        )
    bad = _BAD_CHAR.search(subject)
    if bad:
        return InvalidSubject(
            f"invalid {what} {subject!r}: contains whitespace or a control character "
            f"({bad.group()!r})",
            subject=subject,
        )
    tokens = subject.split(".")
    for index, token in enumerate(tokens):
        if not token:
            return InvalidSubject(
                f"invalid {what} {subject!r}: empty token (leading, trailing or double dot)",
                subject=subject,
            )
        if token in ("*", ">") and not pattern:
            return InvalidSubject(
                f"invalid subject {subject!r}: wildcards ('*', '>') are only allowed in "
                "subscriptions, not when publishing",
                subject=subject,
            )
        if token == ">" and index != len(tokens) - 1:
            return InvalidSubject(
                f"invalid {what} {subject!r}: '>' must be the last token", subject=subject
            )
        if ("*" in token or ">" in token) and token not in ("*", ">"):
            return InvalidSubject(
                f"invalid {what} {subject!r}: wildcard inside token {token!r}; "
                "wildcards must be whole tokens",
                subject=subject,
            )
    return InvalidSubject(f"invalid {what} {subject!r}", subject=subject)  # pragma: no cover


def check_token(segment: object, *, part: str, subject: str) -> str:
    """Return ``segment`` if it can be one token of a subject, else raise.

    The rules of Go goflux's subject builder (not empty; no ``.``, ``*``, ``>`` or
    whitespace) and goflux's own: no control character, any Unicode whitespace, a str.

    Args:
        segment: The candidate token.
        part: What it is, for the error (``"domain"``, ``"parameter 'region'"``).
        subject: The subject built so far (or the template), for the error.

    Raises:
        SubjectError: ``segment`` breaks a rule; the error names ``part`` and the rule.
    """
    if isinstance(segment, str) and _SEGMENT.fullmatch(segment) is not None:
        # a str subclass (a StrEnum member) as its characters, not its str()
        return segment if type(segment) is str else str.__str__(segment)
    rule = _broken_rule(segment) or "is not a token"
    where = f" of {subject!r}" if subject else ""
    raise SubjectError(
        f"invalid {part} {segment!r}{where}: {rule}",
        subject=subject,
        segment=segment,
        part=part,
        rule=rule,
    )


_SEGMENT = re.compile(_LITERAL)


def _broken_rule(segment: object) -> str | None:  # noqa: PLR0911
    if not isinstance(segment, str):
        return f"must be a str, not {type(segment).__name__}"
    if not segment:
        return "must not be empty"
    if "." in segment:
        return "must not contain '.' (a segment is one token)"
    if "*" in segment or ">" in segment:
        return "must not contain a wildcard ('*' or '>')"
    space = _SPACE.search(segment)
    if space is not None:
        return f"must not contain whitespace ({space.group()!r})"
    control = _CONTROL.search(segment)
    if control is not None:
        return f"must not contain a control character ({control.group()!r})"
    return None


def check_length(subject: str, *, part: str, segment: object) -> str:
    """Return ``subject`` if it is at most :data:`MAX_SUBJECT_BYTES` long, else raise.

    Raises:
        SubjectError: ``subject`` is longer (naming ``part``, which made it so).
    """
    if _too_long(subject):
        size = len(subject.encode())
        rule = f"makes the subject longer than {MAX_SUBJECT_BYTES} bytes ({size})"
        raise SubjectError(
            f"invalid {part} {segment!r}: it {rule}: {subject[:40]!r}...",
            subject=subject,
            segment=segment,
            part=part,
            rule=rule,
        )
    return subject


@lru_cache(maxsize=4096)
def _valid_subject(subject: str) -> str:
    if _too_long(subject) or _SUBJECT.fullmatch(subject) is None:
        raise _diagnose(subject, pattern=False)
    return subject


@lru_cache(maxsize=1024)
def _valid_pattern(pattern: str) -> str:
    if _too_long(pattern) or _PATTERN.fullmatch(pattern) is None:
        raise _diagnose(pattern, pattern=True)
    return pattern


def validate_subject(subject: str) -> str:
    """Return ``subject`` if it is a valid publish subject (no wildcards).

    Raises:
        InvalidSubject: Empty, not a str, empty tokens, whitespace/control characters,
            wildcards, or longer than :data:`MAX_SUBJECT_BYTES`.
    """
    if not isinstance(subject, str):
        raise _diagnose(subject, pattern=False)
    _valid_subject(subject)
    return subject  # as given: a str subclass (a template's pattern) stays itself


def validate_pattern(pattern: str) -> str:
    """Return ``pattern`` if it is a valid subscription subject (wildcards allowed).

    Raises:
        InvalidSubject: Empty, not a str, empty tokens, whitespace/control characters,
            ``>`` not last, a wildcard inside a token, or longer than
            :data:`MAX_SUBJECT_BYTES`.
    """
    if not isinstance(pattern, str):
        raise _diagnose(pattern, pattern=True)
    _valid_pattern(pattern)
    return pattern  # as given: a str subclass (a template's pattern) stays itself


def is_wildcard(pattern: str) -> bool:
    """Report whether a (valid) pattern contains a wildcard token."""
    return any(token in ("*", ">") for token in pattern.split("."))


def matches(pattern: str, subject: str) -> bool:
    """Report whether the valid publish ``subject`` matches the subscription ``pattern``."""
    return tokens_match(tuple(pattern.split(".")), subject.split("."))


def tokens_match(pattern: tuple[str, ...], subject: list[str]) -> bool:
    """Match pre-split tokens (the hot-path form of :func:`matches`)."""
    last = len(pattern) - 1
    for index, token in enumerate(pattern):
        if token == ">":
            return len(subject) > index
        if index >= len(subject) or (token != "*" and token != subject[index]):
            return False
    return len(subject) == last + 1


def covers(pattern: str, other: str) -> bool:
    """Report whether every subject matching the pattern ``other`` also matches ``pattern``."""
    ours = pattern.split(".")
    theirs = other.split(".")
    for index, token in enumerate(ours):
        if token == ">":
            return len(theirs) > index
        if index >= len(theirs) or theirs[index] == ">":
            return False
        if token != "*" and token != theirs[index]:
            return False
    return len(theirs) == len(ours)
