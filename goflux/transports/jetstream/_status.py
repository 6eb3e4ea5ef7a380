"""The codes nats-server answers JetStream clients with, in one table.

Two kinds:

- **Status codes** of status messages: a message with no payload whose ``Status``
  header is a three-digit code (with a ``Description``), sent on a pull request's or
  direct get's inbox. nats-py hands them over as strings, so they are strings here.
- **API error codes**: the ``err_code`` of an error reply of the JetStream API or of a
  refused publish (nats-server's ``errors.json``); nats-py's ``APIError`` carries it,
  with the HTTP-like ``code`` beside it.

Every module of the JetStream transport takes its codes from here; none writes one as
a literal.
"""

from __future__ import annotations

from typing import Final

__all__ = (
    "ATOMIC_DISABLED",
    "ATOMIC_DUPLICATE_ID",
    "BAD_REQUEST",
    "CONFLICT",
    "CONSUMER_INVALID_RESET",
    "CONSUMER_NOT_FOUND",
    "END_OF_BATCH",
    "EXPECTED_LAST_MESSAGE_ID",
    "EXPECTED_LAST_SEQUENCE",
    "EXPECTED_STREAM",
    "FAST_BATCH_DISABLED",
    "FAST_BATCH_UNKNOWN",
    "HEARTBEAT",
    "JETSTREAM_NOT_ENABLED",
    "JETSTREAM_NOT_ENABLED_FOR_ACCOUNT",
    "MESSAGE_HEADERS_TOO_LARGE",
    "MESSAGE_TOO_LARGE",
    "MIRROR_NOT_UPDATABLE",
    "MSG_COUNTER_BROKEN",
    "MSG_COUNTER_DISABLED",
    "MSG_COUNTER_HAS_PAYLOAD",
    "MSG_COUNTER_INCR_INVALID",
    "MSG_COUNTER_INCR_MISSING",
    "MSG_DELETE_FAILED",
    "MSG_SCHEDULES_DISABLED",
    "MSG_TTL_DISABLED",
    "NO_MESSAGES",
    "NO_MESSAGE_FOUND",
    "NO_RESPONDERS",
    "PIN_MISMATCH",
    "REPLICAS_NOT_UPDATABLE",
    "REQUEST_TIMEOUT",
    "RESOURCE_LIMITS",
    "ROLLUP_DISABLED",
    "SCHEDULE_REFUSALS",
    "SEQUENCE_NOT_FOUND",
    "STREAM_NAME_IN_USE",
    "STREAM_NOT_FOUND",
    "SUBJECTS_OVERLAP",
    "TOO_MANY_RESULTS",
    "is_client_error",
    "is_server_error",
)

# ------------------------------------------------ status codes (the Status header)

HEARTBEAT: Final = "100"
"""An idle heartbeat (or flow control): the pull request or consumer is alive."""
END_OF_BATCH: Final = "204"
"""A batched direct get delivered everything it asked for."""
BAD_REQUEST: Final = "400"
"""The pull request was malformed or refused (a priority group it may not use, ...)."""
NO_MESSAGES: Final = "404"
"""Nothing to deliver: a ``no_wait`` pull found none, a direct get found no message."""
REQUEST_TIMEOUT: Final = "408"
"""The pull request expired."""
CONFLICT: Final = "409"
"""The pull request ended early: consumer deleted, limits exceeded, leadership change."""
TOO_MANY_RESULTS: Final = "413"
"""A batched direct get (``multi_last``) matches more subjects than it answers (1,024)."""
PIN_MISMATCH: Final = "423"
"""Another client is pinned in the consumer's priority group (``Nats-Pin-Id`` mismatch)."""
NO_RESPONDERS: Final = "503"
"""Nobody answers: no stream takes the subject, or no consumer takes the acks."""

# ------------------------------------------------ API error codes (err_code)

CONSUMER_NOT_FOUND: Final = 10014
CONSUMER_INVALID_RESET: Final = 10204  # a reset the consumer's deliver policy forbids
NO_MESSAGE_FOUND: Final = 10037
SEQUENCE_NOT_FOUND: Final = 10043  # a message delete found no message at the sequence
JETSTREAM_NOT_ENABLED_FOR_ACCOUNT: Final = 10039
MESSAGE_TOO_LARGE: Final = 10054
MSG_DELETE_FAILED: Final = 10057  # the store's error: "no message found", ...
MIRROR_NOT_UPDATABLE: Final = 10055
STREAM_NAME_IN_USE: Final = 10058
STREAM_NOT_FOUND: Final = 10059
EXPECTED_STREAM: Final = 10060
REPLICAS_NOT_UPDATABLE: Final = 10061
SUBJECTS_OVERLAP: Final = 10065
EXPECTED_LAST_MESSAGE_ID: Final = 10070
EXPECTED_LAST_SEQUENCE: Final = 10071
JETSTREAM_NOT_ENABLED: Final = 10076
MESSAGE_HEADERS_TOO_LARGE: Final = 10097
ROLLUP_DISABLED: Final = 10111
MSG_TTL_DISABLED: Final = 10166
MSG_COUNTER_DISABLED: Final = 10168
MSG_COUNTER_INCR_MISSING: Final = 10169  # a publish to a counter stream without Nats-Incr
MSG_COUNTER_HAS_PAYLOAD: Final = 10170  # an increment with a body
MSG_COUNTER_INCR_INVALID: Final = 10171  # Nats-Incr unreadable, or with rollup/expectations
MSG_COUNTER_BROKEN: Final = 10172  # the subject's last message is not a counter value
ATOMIC_DISABLED: Final = 10174
MSG_SCHEDULES_DISABLED: Final = 10188
# A message schedule the server refuses, and what of it (ADR-51).
SCHEDULE_REFUSALS: Final = {
    10189: "pattern",
    10190: "target",
    10191: "ttl",
    10192: "rollup",
    10203: "source",
    10212: "scheduler",  # Nats-Scheduler / Nats-Schedule-Next set by hand, wrongly
    10223: "time_zone",
}
ATOMIC_DUPLICATE_ID: Final = 10201
FAST_BATCH_DISABLED: Final = 10205  # a fast batch to a stream without allow_batched
FAST_BATCH_UNKNOWN: Final = 10208  # a fast batch the stream does not know (ended, timed out)
FAST_BATCH_TOO_MANY: Final = 10211  # the stream has as many batches open as the server allows

RESOURCE_LIMITS: Final = frozenset(
    {
        10023,  # insufficient resources
        10026,  # maximum consumers limit reached
        10027,  # maximum streams limit reached
        10028,  # memory resources exceeded
        10047,  # storage resources exceeded
    }
)
"""The account or server has no room for what was asked."""

_CLIENT_ERRORS: Final = range(400, 500)
_SERVER_ERRORS: Final = range(500, 600)


def is_client_error(code: int | None) -> bool:
    """Whether an error reply's HTTP-like ``code`` is a 4xx: asking again cannot succeed."""
    return code is not None and code in _CLIENT_ERRORS


def is_server_error(code: int | None) -> bool:
    """Whether an error reply's HTTP-like ``code`` is a 5xx: the server could not do it."""
    return code is not None and code in _SERVER_ERRORS
