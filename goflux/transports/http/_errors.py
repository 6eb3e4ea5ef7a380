"""The errors of the HTTP transport."""

from __future__ import annotations

from goflux._errors import PublishError

__all__ = ("StatusError",)

# 4xx answers worth another attempt: a timeout, "too early", "too many requests".
_RETRYABLE_CLIENT_ERRORS = frozenset({408, 425, 429})


class StatusError(PublishError):
    """The endpoint answered a publish with a status other than 2xx.

    A 4xx answer is ``permanent`` (the same message would be refused again: it does
    not decode, the subscriber terminated it, nobody serves the subject), except 408,
    425 and 429, and so is a redirect the client did not follow (the publisher's own
    client follows them, as Go's does); a 5xx answer is worth another attempt (the
    handler failed, or asked for a retry: goflux answers a ``nak`` with 503 and
    ``Retry-After``).

    Attributes:
        url: The URL posted to (credentials masked).
        status: The HTTP status code.
        detail: The first line of the answer's body (at most 200 characters).

    ``retry_after`` (of :class:`~goflux.PublishError`) holds the answer's
    ``Retry-After`` in seconds, or None.
    """

    def __init__(
        self,
        message: str,
        *,
        subject: str,
        url: str,
        status: int,
        detail: str,
        retry_after: float | None,
    ) -> None:
        # A redirect not followed comes again; a 4xx other than these is refused again.
        permanent = 300 <= status < 500 and status not in _RETRYABLE_CLIENT_ERRORS
        super().__init__(message, subject=subject, permanent=permanent, retry_after=retry_after)
        self.url = url
        self.status = status
        self.detail = detail
