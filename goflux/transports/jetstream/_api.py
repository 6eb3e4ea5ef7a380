"""The JetStream API: raw requests, and calls that end in a GofluxError, never a nats-py one.

nats-py's typed calls cover the common requests; :func:`api_request` sends the ones it
lacks (consumer pause, message get, the stream config JSON with every field the
server knows), :func:`message_get` reads a stored message back, and the API's times
are read and written here. Errors of these helpers stay nats-py's (``APIError`` and
its subclasses).

A call to the JetStream API (stream and consumer info, create, update) can fail in
ways nats-py reports as raw errors: a refused request (no reply: a timeout), JetStream
not enabled (no responders, or error 10039), the account out of resources (10047), a
closed connection. :class:`ApiCall` wraps a block of such calls: a refusal fails it
at once with :class:`~goflux.PermissionDenied`, and every raw error leaving it becomes
the goflux error that says what happened, naming the stream or consumer.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final

import nats.errors
from nats.js import JetStreamContext
from nats.js.errors import APIError, ServiceUnavailableError

from goflux._errors import GofluxError, TransportError
from goflux.transports._natspy import HeaderLines, api_prefix, api_timeout, connection
from goflux.transports._refusals import Accept, Guard, Refusal, closed_reason, refusals
from goflux.transports.jetstream._errors import (
    ConsumerNotFound,
    IncompatibleConfig,
    JetStreamUnavailable,
    ProvisioningError,
    ResourceLimit,
    StreamNotFound,
)
from goflux.transports.jetstream._status import (
    CONSUMER_NOT_FOUND,
    JETSTREAM_NOT_ENABLED,
    JETSTREAM_NOT_ENABLED_FOR_ACCOUNT,
    NO_MESSAGE_FOUND,
    RESOURCE_LIMITS,
    STREAM_NAME_IN_USE,
    STREAM_NOT_FOUND,
    is_server_error,
)

__all__ = (
    "ApiCall",
    "Stored",
    "api_error",
    "api_guard",
    "api_request",
    "api_subjects",
    "check_name",
    "from_rfc3339",
    "known_refusal",
    "message_get",
    "provisioning_error",
    "refusal_of",
    "to_rfc3339",
)

_SERVER_API: Final = "$JS.API"
_GO_ZERO_YEAR: Final = 1  # Go's zero time.Time, "0001-01-01T00:00:00Z": no time
_NAME: Final = re.compile(r"[^.*>\s\x00-\x1f\x7f/\\]+")


def check_name(kind: str, name: object) -> str:
    """Return ``name`` if it can name a stream or consumer (``kind`` says which).

    Raises:
        ValueError: Empty, or with dots, wildcards, slashes or whitespace.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"invalid {kind} name {name!r}: use a non-empty name without dots, "
            "wildcards, slashes or whitespace"
        )
    return name


def known_refusal(exc: APIError, what: str) -> GofluxError | None:
    """The specific error for a refusal every API call may get, or None.

    JetStream not enabled (10039, 10076) and the account or server out of room
    (10047, 10023, ...).
    """
    description = exc.description or str(exc)
    if exc.err_code in (JETSTREAM_NOT_ENABLED_FOR_ACCOUNT, JETSTREAM_NOT_ENABLED):
        return JetStreamUnavailable(
            f"{what}: JetStream is not enabled for this account or server ({description})",
            err_code=exc.err_code,
        )
    if exc.err_code in RESOURCE_LIMITS:
        return ResourceLimit(
            f"{what}: the server has no room for it: {description}",
            code=exc.code,
            err_code=exc.err_code,
        )
    return None


def provisioning_error(exc: APIError, what: str) -> GofluxError:
    """The goflux error for a refusal of a stream or consumer request about ``what``."""
    known = known_refusal(exc, what)
    if known is not None:
        return known
    description = exc.description or str(exc)
    if exc.err_code == STREAM_NOT_FOUND:
        return StreamNotFound(f"{what}: stream not found", code=exc.code, err_code=exc.err_code)
    if exc.err_code == CONSUMER_NOT_FOUND:
        return ConsumerNotFound(f"{what}: consumer not found", code=exc.code, err_code=exc.err_code)
    if is_server_error(exc.code) or exc.err_code == STREAM_NAME_IN_USE:
        return IncompatibleConfig(
            f"{what}: the server refuses the change: {description}",
            code=exc.code,
            err_code=exc.err_code,
        )
    return ProvisioningError(f"{what}: {description}", code=exc.code, err_code=exc.err_code)


def api_error(exc: BaseException, what: str, js: JetStreamContext) -> GofluxError:
    """The goflux error for a raw error of a JetStream API call about ``what``."""
    nc = connection(js)
    if isinstance(exc, nats.errors.NoRespondersError):
        return JetStreamUnavailable(
            f"{what}: nothing answers on the JetStream API: JetStream is not enabled for "
            "this account or server"
        )
    if isinstance(exc, APIError):
        known = known_refusal(exc, what)
        if known is not None:
            return known
        description = exc.description or str(exc)
        return ProvisioningError(f"{what}: {description}", code=exc.code, err_code=exc.err_code)
    if isinstance(exc, nats.errors.ConnectionClosedError) or nc.is_closed:
        return TransportError(f"{what}: the connection is closed{closed_reason(nc)}")
    if isinstance(exc, TimeoutError):  # nats.errors.TimeoutError is one too
        return TransportError(
            f"{what}: JetStream did not answer within {api_timeout(js)}s "
            "(is the JetStream domain or API prefix right?)"
        )
    return TransportError(f"{what}: {exc}")


def api_subjects(js: JetStreamContext, *tails: str) -> tuple[str, ...]:
    """The subjects of the JetStream API requests ``tails`` (e.g. ``"STREAM.INFO.S"``).

    Under the context's prefix, and, for a domain's prefix (``$JS.<domain>.API``), also
    under ``$JS.API``: the server maps a domain's requests there and reports a refusal
    under the subject it checked.
    """
    prefixes = [api_prefix(js)]
    if prefixes[0] != _SERVER_API:
        prefixes.append(_SERVER_API)
    return tuple(f"{prefix}.{tail}" for prefix in prefixes for tail in tails)


def refusal_of(subjects: tuple[str, ...]) -> Accept:
    """Accepts a refusal of one of ``subjects`` (or of a subject under one)."""

    def accept(refusal: Refusal) -> bool:
        return any(refusal.about(subject) for subject in subjects)

    return accept


def api_guard(js: JetStreamContext, what: str, *tails: str) -> Guard:
    """Fails its block with PermissionDenied when an API request ``tails`` is refused."""
    accept = refusal_of(api_subjects(js, *tails))
    return refusals(connection(js)).guard("publish", "", what, accept=accept)


class ApiCall:
    """A ``with`` block of JetStream API calls about ``what`` (a stream or consumer).

    ``tails`` are the requests it makes (``"STREAM.INFO.ORDERS"``, ...): a refusal of
    one of them fails the block at once; a refusal of another request on the same
    connection does not.

    Raises (on the way out):
        PermissionDenied: The server refused one of the requests.
        JetStreamUnavailable: JetStream is not enabled for the account or server.
        ResourceLimit: The account or server has no room (err_code 10047, ...).
        ProvisioningError: Another refusal by the JetStream API.
        TransportError: No answer in time, or the connection closed.
    """

    __slots__ = ("_guard", "_js", "_what")

    def __init__(self, js: JetStreamContext, what: str, *tails: str) -> None:
        self._js = js
        self._what = what
        self._guard = api_guard(js, f"{what}: a JetStream API request", *tails)

    def __enter__(self) -> ApiCall:
        self._guard.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._guard.__exit__(exc_type, exc, tb)  # raises PermissionDenied on a refusal
        if exc is None or isinstance(exc, GofluxError):
            return
        if isinstance(exc, nats.errors.Error | APIError | TimeoutError):
            raise api_error(exc, self._what, self._js) from exc


# ---------------------------------------------------------------- raw requests


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

    The year has four digits always (``0999-...``), as RFC 3339 wants.

    Raises:
        ValueError: ``moment`` is naive (its timezone would be a guess), or it is
            outside the years 1 to 9999 in UTC (``datetime.max`` west of UTC).
    """
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{moment!r} has no timezone: give an aware datetime (e.g. UTC)")
    try:
        utc = moment.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError(f"{moment!r} is outside the years 1 to 9999 in UTC") from exc
    return f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S.%f}Z"  # strftime's %Y: "999", not "0999"


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
        if exc.err_code == NO_MESSAGE_FOUND:
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
