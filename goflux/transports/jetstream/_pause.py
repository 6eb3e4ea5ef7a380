"""Pausing a consumer: the server delivers nothing from it until a time or a resume.

nats-server 2.11's ``$JS.API.CONSUMER.PAUSE.<stream>.<consumer>`` request takes
``{"pause_until": "<RFC 3339>"}`` to pause, and no time to resume. Clients stay bound
while it is paused (their pull requests wait), and get messages again once it resumes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from nats.js import JetStreamContext
from nats.js.errors import APIError

from goflux.transports.jetstream._api import ApiCall
from goflux.transports.jetstream._provision import _check_name, _provisioning_error
from goflux.transports.jetstream._raw import api_request, from_rfc3339, to_rfc3339

__all__ = ("ConsumerPause", "pause_consumer", "resume_consumer")

_NANOSECONDS: Final = 1_000_000_000


@dataclass(frozen=True, slots=True)
class ConsumerPause:
    """A consumer's pause state, as the server reported it after a pause or resume.

    Attributes:
        paused: Whether the consumer is paused now (False after a resume, and after a
            pause until a time already past).
        until: When the pause ends (timezone-aware, UTC), None without one.
        remaining: Seconds until the pause ends (0.0 when not paused).
    """

    paused: bool
    until: datetime | None
    remaining: float


def _until(until: datetime | timedelta | float) -> datetime:
    """The end of a pause given as a time, a duration or seconds from now."""
    if isinstance(until, datetime):
        if until.tzinfo is None or until.utcoffset() is None:
            raise ValueError(f"until={until!r} has no timezone: give an aware datetime")
        return until
    if isinstance(until, timedelta):
        seconds = until.total_seconds()
    elif isinstance(until, int | float) and not isinstance(until, bool):
        seconds = float(until)
    else:
        raise TypeError(
            f"until must be a datetime, timedelta or seconds, got {type(until).__name__}"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a pause must last zero or more seconds, got {seconds}")
    return datetime.now(UTC) + timedelta(seconds=seconds)


def _pause_state(reply: dict[str, Any]) -> ConsumerPause:
    return ConsumerPause(
        paused=bool(reply.get("paused", False)),
        until=from_rfc3339(reply.get("pause_until")),
        remaining=int(reply.get("pause_remaining") or 0) / _NANOSECONDS,
    )


async def _request(
    js: JetStreamContext, stream: str, name: str, body: dict[str, str] | None
) -> ConsumerPause:
    _check_name("stream", stream)
    _check_name("consumer", name)
    what = f"consumer {name!r} on stream {stream!r}"
    tail = f"CONSUMER.PAUSE.{stream}.{name}"
    with ApiCall(js, what, tail):
        try:
            reply = await api_request(js, tail, body)
        except APIError as exc:
            raise _provisioning_error(exc, what) from exc
    return _pause_state(reply)


async def pause_consumer(
    js: JetStreamContext, stream: str, name: str, *, until: datetime | timedelta | float
) -> ConsumerPause:
    """Pause the durable consumer ``name`` of ``stream`` until ``until`` (nats-server 2.11+).

    While paused the server delivers nothing from the consumer: bound subscribers
    stay bound and get messages again once ``until`` passes or
    :func:`~goflux.transports.jetstream.resume_consumer` is called. Pausing a paused
    consumer moves the end of the pause.

    Args:
        js: The JetStream context.
        stream: The consumer's stream.
        name: The durable consumer.
        until: When the pause ends: an aware ``datetime``, or a ``timedelta`` or
            seconds from now.

    Returns:
        The pause as the server confirmed it.

    Raises:
        ValueError: Invalid names, a naive datetime, or a negative duration.
        TypeError: ``until`` is of another type.
        StreamNotFound: The stream does not exist.
        ConsumerNotFound: The consumer does not exist.
        PermissionDenied: The server refused the request.
        ProvisioningError: Any other refusal by the server.
    """
    body = {"pause_until": to_rfc3339(_until(until))}
    return await _request(js, stream, name, body)


async def resume_consumer(js: JetStreamContext, stream: str, name: str) -> ConsumerPause:
    """End the pause of the consumer ``name`` of ``stream`` now (a no-op if not paused).

    Returns:
        The state the server confirmed (``paused`` False).

    Raises:
        ValueError: Invalid names.
        StreamNotFound: The stream does not exist.
        ConsumerNotFound: The consumer does not exist.
        PermissionDenied: The server refused the request.
        ProvisioningError: Any other refusal by the server.
    """
    return await _request(js, stream, name, None)
