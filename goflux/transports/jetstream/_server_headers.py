"""The server's own ``Nats-*`` headers of a JetStream publish: TTL, expectations, others.

User headers travel as ``X-Goflux-<name>`` (see :mod:`goflux._wire`); the server acts
only on its own, unprefixed headers. This module builds those from a publish's
options and checks what a caller passes by hand, so that the ones goflux sets itself
(``Nats-Msg-Id`` from ``message_id``, ``Nats-TTL`` from ``ttl``, the ``Nats-Batch-*``
headers of an atomic batch) cannot be set to something else by accident.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Final, Literal, TypeAlias

from goflux._errors import InvalidHeader
from goflux._headers import Headers

__all__ = ("MAX_TTL", "TTL", "expectations", "server_headers", "ttl_value")

TTL: TypeAlias = float | timedelta | Literal["never"]
"""A per-message TTL: whole seconds (1 to :data:`MAX_TTL`), a ``timedelta``, or ``"never"``."""

MAX_TTL: Final = 100 * 365 * 86_400
"""The longest TTL goflux sends, in seconds (100 years of 365 days: 3,153,600,000).

The server adds a TTL, in nanoseconds, to the store time (nanoseconds since 1970) in a
64-bit integer, which ends in the year 2262: a TTL of ~7.4e9 s or more today wraps
around and the message expires at once; from ~9.2e9 s the TTL itself overflows. 100
years leaves room until the year 2162. Longer: ``"never"``.
"""

_TTL_HEADER: Final = "Nats-TTL"
_SERVER_PREFIX: Final = "nats-"
# The server matches its headers by exact name: a name in another case is ignored
# without a word (an expectation not enforced, a rollup not done). Known names are
# sent in the server's spelling; others must be spelled "Nats-..." as given.
_CANONICAL: Final = {
    name.lower(): name
    for name in (
        "Nats-Expected-Stream",
        "Nats-Expected-Last-Sequence",
        "Nats-Expected-Last-Subject-Sequence",
        "Nats-Expected-Last-Subject-Sequence-Subject",
        "Nats-Expected-Last-Msg-Id",
        "Nats-Rollup",
        "Nats-Marker-Reason",
        "Nats-Schedule",
        "Nats-Schedule-Target",
        "Nats-Schedule-Source",
        "Nats-Schedule-TTL",
        "Nats-Schedule-Time-Zone",
        "Nats-Incr",
        "Nats-Required-Api-Level",
    )
}
# Values the server reads as sequence numbers: anything else fails in a misleading way.
_SEQUENCES: Final = frozenset(
    {"nats-expected-last-sequence", "nats-expected-last-subject-sequence"}
)
# Set by goflux from a publish's own options: by hand they could contradict them.
_OWN: Final = {
    "nats-msg-id": "message_id=",
    "nats-ttl": "ttl=",
    "nats-batch-id": "publish_atomic()",
    "nats-batch-sequence": "publish_atomic()",
    "nats-batch-commit": "publish_atomic()",
}


def ttl_value(ttl: TTL) -> str:
    """The ``Nats-TTL`` value of ``ttl``.

    The server keeps TTLs in whole seconds and refuses less than one; a fraction
    would be cut off without a word, so it is refused here. A TTL beyond
    :data:`MAX_TTL` (100 years) would overflow the server's nanosecond clock and
    expire the message at once: it is refused too (``"never"`` keeps it for good).

    Raises:
        ValueError: ``ttl`` is below one second, above :data:`MAX_TTL`, not whole
            seconds, or not a number.
    """
    if ttl == "never":
        return "never"
    if isinstance(ttl, timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, int | float) and not isinstance(ttl, bool):
        seconds = math.inf if isinstance(ttl, int) and ttl > MAX_TTL else float(ttl)
    else:
        raise ValueError(f'ttl must be seconds, a timedelta or "never", got {ttl!r}')
    if seconds > MAX_TTL:  # infinity too
        raise ValueError(
            f"ttl must be at most {MAX_TTL} seconds (100 years: beyond, the server's "
            f'nanosecond clock overflows and the message expires at once; use "never" to '
            f"keep it), got {ttl!r}"
        )
    if math.isnan(seconds) or seconds < 1 or seconds != int(seconds):
        raise ValueError(
            f"ttl must be whole seconds, at least 1 (the server keeps TTLs in seconds), got {ttl!r}"
        )
    return str(int(seconds))


def expectations(
    stream: str | None,
    last_sequence: int | None,
    last_subject_sequence: int | None,
    last_message_id: str | None,
) -> dict[str, str]:
    """The ``Nats-Expected-*`` headers of a conditional publish (empty if none)."""
    expected: dict[str, str] = {}
    if stream is not None:
        expected["Nats-Expected-Stream"] = stream
    if last_sequence is not None:
        expected["Nats-Expected-Last-Sequence"] = str(last_sequence)
    if last_subject_sequence is not None:
        expected["Nats-Expected-Last-Subject-Sequence"] = str(last_subject_sequence)
    if last_message_id is not None:
        expected["Nats-Expected-Last-Msg-Id"] = last_message_id
    return expected


def server_headers(
    given: Mapping[str, str] | None,
    *,
    ttl: TTL | None = None,
    expected: Mapping[str, str] | None = None,
) -> dict[str, str] | None:
    """The server headers of one publish, or None when it has none.

    Args:
        given: Headers passed by hand (``Nats-Rollup``, ``Nats-Expected-*``,
            ``Nats-Schedule``, ...), sent unprefixed as given.
        ttl: The message's TTL (``Nats-TTL``).
        expected: The ``Nats-Expected-*`` headers of the publish's options.

    Raises:
        InvalidHeader: A name does not start with ``Nats-``, is one goflux sets from
            an option (``Nats-Msg-Id``, ``Nats-TTL``, ``Nats-Batch-*``), repeats an
            expectation given as an option, an expected sequence is not a number, or a
            name or value cannot travel. Names the server knows are sent in its own
            spelling (it ignores others); unknown ones must be spelled ``Nats-...``.
        ValueError: ``ttl`` is out of range.
    """
    if not given and ttl is None and not expected:
        return None
    out: dict[str, str] = dict(expected) if expected else {}
    if given:
        if not isinstance(given, Mapping):
            raise InvalidHeader(f"server_headers must be a mapping, got {type(given).__name__}")
        checked = Headers(given)  # names are tokens, values travel intact
        taken = {name.lower() for name in out}
        for name, value in checked.multi_items():
            lowered = name.lower()
            if not lowered.startswith(_SERVER_PREFIX):
                raise InvalidHeader(
                    f"server header {name!r} is not one of the server's Nats-* headers; "
                    "pass your own headers as headers= (they travel as X-Goflux-*)"
                )
            option = _OWN.get(lowered)
            if option is not None:
                raise InvalidHeader(f"server header {name!r} is set by goflux: use {option}")
            if lowered in taken:
                raise InvalidHeader(
                    f"server header {name!r} is given twice (as an option and by hand)"
                )
            taken.add(lowered)
            canonical = _CANONICAL.get(lowered)
            if canonical is None and not name.startswith("Nats-"):
                raise InvalidHeader(
                    f"server header {name!r}: the server reads its headers by exact name; "
                    "spell it Nats-..."
                )
            if lowered in _SEQUENCES and not (value.isascii() and value.isdigit()):
                raise InvalidHeader(
                    f"server header {name!r} must be a sequence number, got {value!r}"
                )
            out[canonical or name] = value
    if ttl is not None:
        out[_TTL_HEADER] = ttl_value(ttl)
    return out
