"""JetStream API calls that end in a GofluxError, never in a raw nats-py one.

A call to the JetStream API (stream and consumer info, create, update) can fail in
ways nats-py reports as raw errors: a refused request (no reply: a timeout), JetStream
not enabled (no responders, or error 10039), the account out of resources (10047), a
closed connection. :class:`ApiCall` wraps a block of such calls: a refusal fails it
at once with :class:`~goflux.PermissionDenied`, and every raw error leaving it becomes
the goflux error that says what happened, naming the stream or consumer.
"""

from __future__ import annotations

from types import TracebackType
from typing import Final

import nats.errors
from nats.js import JetStreamContext
from nats.js.errors import APIError

from goflux._errors import (
    GofluxError,
    JetStreamUnavailable,
    ProvisioningError,
    ResourceLimit,
    TransportError,
)
from goflux.transports._natspy import api_prefix, api_timeout, connection
from goflux.transports._refusals import Accept, Guard, Refusal, closed_reason, refusals

__all__ = ("ApiCall", "api_error", "api_guard", "api_subjects", "known_refusal", "refusal_of")

_SERVER_API: Final = "$JS.API"

JETSTREAM_NOT_ENABLED_FOR_ACCOUNT: Final = 10039
JETSTREAM_NOT_ENABLED: Final = 10076
RESOURCE_LIMITS: Final = frozenset(
    {
        10023,  # insufficient resources
        10026,  # maximum consumers limit reached
        10027,  # maximum streams limit reached
        10028,  # memory resources exceeded
        10047,  # storage resources exceeded
    }
)


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
