"""Raw JetStream API requests: JSON in, JSON out, and the API's time values.

nats-py's typed calls cover the common requests; these helpers send the ones it lacks
(consumer pause, message get) and the stream config JSON with every field the server
knows. Errors stay nats-py's (``APIError`` and its subclasses), for
:class:`~goflux.transports.jetstream._api.ApiCall` to turn into goflux errors.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import nats.errors
from nats.js import JetStreamContext
from nats.js.errors import APIError, ServiceUnavailableError

from goflux.transports._natspy import HeaderLines, api_prefix, api_timeout, connection

__all__ = ("Stored", "api_request", "from_rfc3339", "message_get", "to_rfc3339")

_NO_MESSAGE: Final = 10037  # "no message found"
_GO_ZERO_YEAR: Final = 1  # Go's zero time.Time, "0001-01-01T00:00:00Z": no time


async def api_request(
    js: JetStreamContext, tail: str, body: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Send the JetStream API request ``tail`` (``"STREAM.INFO.ORDERS"``) with ``body``.

    Returns:
        The reply's JSON object.

    Raises:
        APIError: The server replied with an error (nats-py's subclass for its code).
        ServiceUnavailableError: Nothing answers on the API subject.
        nats.errors.Error: The request failed (timeout, closed connection).
    """
    data = b"" if body is None else json.dumps(body).encode()
    try:
        msg = await connection(js).request(
            f"{api_prefix(js)}.{tail}", data, timeout=api_timeout(js)
        )
    except nats.errors.NoRespondersError as exc:
        raise ServiceUnavailableError(description="no responders") from exc
    reply: dict[str, Any] = json.loads(msg.data)
    error = reply.get("error")
    if error is not None:
        APIError.from_error(error)  # raises
    return reply


def to_rfc3339(moment: datetime) -> str:
    """``moment`` (timezone-aware) as the API writes times: RFC 3339 in UTC.

    Raises:
        ValueError: ``moment`` is naive (its timezone would be a guess).
    """
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{moment!r} has no timezone: give an aware datetime (e.g. UTC)")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def from_rfc3339(text: str | None) -> datetime | None:
    """The aware datetime of an API time (nanoseconds cut to microseconds), or None.

    None for a missing time and for Go's zero time (``0001-01-01T00:00:00Z``).
    """
    if not text:
        return None
    head, dot, rest = text.partition(".")
    if dot:  # up to nine fraction digits, then the zone: keep six
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[: min(digits, 6)].ljust(6, '0')}{rest[digits:]}"
    moment = datetime.fromisoformat(text)
    if moment.year == _GO_ZERO_YEAR:
        return None
    return moment.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Stored:
    """A message as the stream stores it, read back with ``STREAM.MSG.GET``.

    Attributes:
        subject: Its subject.
        sequence: Its sequence in the stream.
        time: When the stream stored it (UTC), if the server said.
        data: Its body.
        headers: Its headers (:class:`HeaderLines` where read from a stored block:
            repeated names kept), or None without headers.
    """

    subject: str
    sequence: int
    time: datetime | None
    data: bytes
    headers: Mapping[str, str] | None


async def message_get(
    js: JetStreamContext, stream: str, request: Mapping[str, Any]
) -> Stored | None:
    """The stored message ``request`` names, or None if ``stream`` has no such message.

    ``request`` is ``{"seq": n}`` or ``{"last_by_subj": subject}``.

    Raises:
        NotFoundError: The stream does not exist (``err_code`` 10059).
        APIError: Another refusal.
        nats.errors.Error: The request failed (timeout, closed connection).
    """
    try:
        reply = await api_request(js, f"STREAM.MSG.GET.{stream}", request)
    except APIError as exc:
        if exc.err_code == _NO_MESSAGE:
            return None
        raise
    stored = reply["message"]
    block = base64.b64decode(stored.get("hdrs") or "")
    return Stored(
        subject=stored["subject"],
        sequence=int(stored["seq"]),
        time=from_rfc3339(stored.get("time")),
        data=base64.b64decode(stored.get("data") or ""),
        headers=HeaderLines.parsed(block) if block else None,
    )
