"""Publisher retry: ride out broker restarts and lost acknowledgements without duplicates."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Final, TypeVar

from goflux._backoff import Backoff, BackoffLike, ExponentialBackoff, as_backoff
from goflux._errors import PublishError
from goflux._headers import Headers, HeadersLike
from goflux._interfaces import GenericPublisherMiddleware, Publisher
from goflux._receipt import PublishReceipt
from goflux.middleware._wrapping import WrappingPublisher

__all__ = (
    "DEFAULT_PUBLISH_ATTEMPTS",
    "DEFAULT_PUBLISH_BACKOFF",
    "MAX_RETRY_AFTER",
    "retry_publish",
)

T = TypeVar("T")

logger = logging.getLogger("goflux.middleware")

DEFAULT_PUBLISH_ATTEMPTS: Final = 5
MAX_RETRY_AFTER: Final = 60.0
"""The longest ``Retry-After`` :func:`retry_publish` waits; one longer ends the retries."""
DEFAULT_PUBLISH_BACKOFF: Final = ExponentialBackoff(
    initial=0.1, multiplier=2.0, max=5.0, jitter=0.2
)
"""0.1 s, 0.2 s, 0.4 s, ... up to 5 s, each shortened by up to 20% at random."""


class _Retrying(WrappingPublisher[T]):
    """A publisher that retries transport failures with one message ID."""

    __slots__ = ("_attempts", "_backoff")

    def __init__(self, inner: Publisher[T], attempts: int, backoff: Backoff) -> None:
        super().__init__(inner)
        self._attempts = attempts
        self._backoff = backoff

    async def publish(
        self,
        subject: str,
        value: T,
        /,
        *,
        headers: HeadersLike | None = None,
        message_id: str | None = None,
    ) -> PublishReceipt | None:
        """Publish, retrying transport failures with the same message ID.

        Raises:
            PublishError: Every attempt failed (the last error), or the failure was
                permanent (closed publisher, rejected expectation, payload too large).
            InvalidSubject, InvalidHeader, EncodeError: Bad input; never retried.
        """
        if message_id is None:
            message_id = uuid.uuid4().hex  # one ID for every attempt: the broker de-duplicates
        fixed = Headers(headers) if headers is not None else None  # an iterator is read once
        attempt = 1
        while True:
            try:
                return await self._inner.publish(
                    subject, value, headers=fixed, message_id=message_id
                )
            except PublishError as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # nats-py's wait_for may swallow our cancellation (Python 3.11)
                    # and hand back a failure instead: honour the cancellation.
                    raise asyncio.CancelledError from exc
                if exc.permanent or attempt >= self._attempts:
                    raise
                delay = self._backoff.delay(attempt)
                asked = exc.retry_after
                if asked is not None:
                    if asked > MAX_RETRY_AFTER:
                        raise  # the receiver asks for a longer wait than a publish should
                    delay = max(delay, asked)
                logger.warning(
                    "publish to %r failed (attempt %d of %d), retrying in %.3gs: %s",
                    subject,
                    attempt,
                    self._attempts,
                    delay,
                    exc,
                )
            await asyncio.sleep(delay)
            attempt += 1


def retry_publish(
    attempts: int = DEFAULT_PUBLISH_ATTEMPTS, backoff: BackoffLike | None = None
) -> GenericPublisherMiddleware:
    """Retry publishes that failed in transport, keeping one message ID across attempts.

    Only transport failures are retried (a :class:`~goflux.PublishError` that is not
    ``permanent``: a lost connection, a PubAck that did not arrive, a broker that is
    restarting). Bad input (:class:`~goflux.EncodeError`,
    :class:`~goflux.InvalidSubject`, :class:`~goflux.InvalidHeader`), a rejected
    expectation (:class:`~goflux.ExpectationFailed`) and a closed publisher fail at
    once. Every attempt carries the same message ID, generated when the caller gave
    none, so a retry after a lost acknowledgement is de-duplicated by JetStream instead
    of stored twice (keep the stream's duplicate window longer than the retries take).
    A receiver that asks for a wait (an HTTP endpoint's ``Retry-After``, in
    :attr:`~goflux.PublishError.retry_after`) gets at least that wait before the next
    attempt; one asking for more than :data:`MAX_RETRY_AFTER` seconds ends the
    retries with its error. Cancelling the publishing task stops the retries at once;
    a publish already handed to the client may still be stored (nats-py sends what it
    buffered once it reconnects), which is why the ID stays the same.

    Args:
        attempts: Attempts in all (1 disables retrying).
        backoff: Delays between attempts; default: :data:`DEFAULT_PUBLISH_BACKOFF`.

    Raises:
        ValueError: ``attempts`` is below 1, or the backoff is invalid.
    """
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"attempts must be an int >= 1, got {attempts!r}")
    delays = as_backoff(backoff if backoff is not None else DEFAULT_PUBLISH_BACKOFF)

    def middleware(publisher: Publisher[T]) -> Publisher[T]:
        return _Retrying(publisher, attempts, delays)

    return middleware
