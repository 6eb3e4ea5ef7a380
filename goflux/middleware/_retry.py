"""Retry policy for failed handlers: broker-side backoff, attempt limits, dead letters."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

from goflux._backoff import Backoff, BackoffLike, ExponentialBackoff, as_backoff
from goflux._compose.deadletter import (
    DeadLetter,
    DeadLetterReason,
    is_dead_letter,
    refused_for_good,
)
from goflux._errors import DecodeError, SettlementError, find_in_chain
from goflux._errors import is_non_retryable as _marked_non_retryable
from goflux._headers import Headers, escape_header_value
from goflux._interfaces import GenericMiddleware, Handler
from goflux._message import Message, retried_by_sender
from goflux._otel.semconv import error_type

__all__ = ("DEFAULT_MAX_ATTEMPTS", "Decision", "RetryPolicy", "retry_ack")

T = TypeVar("T")

logger = logging.getLogger("goflux.middleware")

DEFAULT_MAX_ATTEMPTS: Final = 5
DEAD_LETTER_RETRY: Final = 1.0  # the least wait before a failed dead letter is tried again
_TERM_REASON_LENGTH: Final = 200
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a message whose handler failed.

    Attributes:
        action: ``"nak"`` (redeliver) or ``"term"`` (dead-letter if configured, then
            terminate: never redeliver).
        delay: Seconds to wait before the redelivery; None redelivers at once.
        reason: Why the message is given up (``"term"`` only).
    """

    action: Literal["nak", "term"]
    delay: float | None = None
    reason: DeadLetterReason | None = None


class RetryPolicy:
    """Decides, per failure, between a delayed nak, an immediate nak and termination.

    - A payload that failed to decode (a :class:`~goflux.DecodeError` raised, or
      chained with ``raise ... from``), a :class:`~goflux.NonRetryable` (see
      :func:`goflux.is_non_retryable`), an instance of one of ``non_retryable``, or an
      error ``is_permanent`` approves is given up at once.
    - Any other error is retried ``max_attempts`` times in all; the last failure gives
      the message up.
    - A retried message waits ``backoff.delay(attempt)`` seconds first (a delay of 0
      redelivers at once). On JetStream the broker carries the delay (``nak`` with a
      delay), so a waiting retry holds no handler slot and survives a restart of the
      consumer.
    - A message given up is published to ``dead_letter`` (if set) and then terminated.

    Set the consumer's ``max_deliver`` above ``max_attempts`` (or leave it unlimited):
    the server stops delivering after ``max_deliver`` and the final attempt, which
    dead-letters, would never come.

    Args:
        backoff: Delays between attempts: a :class:`Backoff` or a list of seconds
            (attempt ``n`` waits the ``n``-th, the last one repeating).
        max_attempts: Attempts in all (the first delivery counts), or None to retry
            retryable errors without limit.
        dead_letter: Where given-up messages go before they are terminated.
        non_retryable: Exception types that are permanent failures.
        is_permanent: Decides whether any other exception is a permanent failure (if
            it raises, the error counts as retryable and the problem is logged).

    Raises:
        ValueError: ``max_attempts`` is below 1, or the backoff is invalid.
        TypeError: ``non_retryable`` holds something that is not an exception type.
    """

    __slots__ = ("_backoff", "_dead_letter", "_is_permanent", "_max_attempts", "_non_retryable")

    def __init__(
        self,
        *,
        backoff: BackoffLike | None = None,
        max_attempts: int | None = DEFAULT_MAX_ATTEMPTS,
        dead_letter: DeadLetter | None = None,
        non_retryable: Iterable[type[BaseException]] = (),
        is_permanent: Callable[[BaseException], bool] | None = None,
    ) -> None:
        if max_attempts is not None and (
            isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
        ):
            raise ValueError(f"max_attempts must be an int >= 1 or None, got {max_attempts!r}")
        kinds = tuple(non_retryable)
        for kind in kinds:
            if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                raise TypeError(f"non_retryable must hold exception types, got {kind!r}")
        self._backoff = as_backoff(backoff if backoff is not None else ExponentialBackoff())
        self._max_attempts = max_attempts
        self._dead_letter = dead_letter
        self._non_retryable = kinds
        self._is_permanent = is_permanent

    @property
    def backoff(self) -> Backoff:
        """The delays between attempts."""
        return self._backoff

    @property
    def max_attempts(self) -> int | None:
        """Attempts in all before a retryable failure is given up (None: no limit)."""
        return self._max_attempts

    @property
    def dead_letter(self) -> DeadLetter | None:
        """Where given-up messages go, if anywhere."""
        return self._dead_letter

    def __repr__(self) -> str:
        return (
            f"RetryPolicy(backoff={self._backoff!r}, max_attempts={self._max_attempts!r}, "
            f"dead_letter={self._dead_letter!r})"
        )

    def classify(self, error: BaseException) -> DeadLetterReason | None:
        """Return why ``error`` is permanent (``"undecodable"``, ``"non_retryable"``), or None."""
        if find_in_chain(error, DecodeError, context=False) is not None:
            return "undecodable"
        if _marked_non_retryable(error):
            return "non_retryable"
        for kind in self._non_retryable:
            if find_in_chain(error, kind, context=False) is not None:
                return "non_retryable"
        if self._is_permanent is not None:
            try:
                permanent = self._is_permanent(error)
            except Exception:  # a broken predicate must not turn into a redelivery storm
                logger.exception(
                    "is_permanent raised for %r; treating the error as retryable", error
                )
                return None
            if permanent:
                return "non_retryable"
        return None

    def decide(self, error: BaseException, attempt: int) -> Decision:
        """Decide what to do after attempt number ``attempt`` (1 for the first) failed.

        Raises:
            ValueError: ``attempt`` is below 1.
        """
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt}")
        reason = self.classify(error)
        if reason is not None:
            return Decision("term", reason=reason)
        if self._max_attempts is not None and attempt >= self._max_attempts:
            return Decision("term", reason="max_attempts")
        delay = self._backoff.delay(attempt)
        return Decision("nak", delay=delay if delay > 0 else None)


def _term_reason(reason: str, error: BaseException) -> str:
    text = _SPACE.sub(" ", f"goflux: {reason}: {error_type(error)}: {error}").strip()
    return escape_header_value(text[:_TERM_REASON_LENGTH])


def _cancelled_from_outside() -> bool:
    """Whether the running task is being cancelled (a drain), not just seeing a stray one."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class _Attempt:
    """One failed processing attempt: the message, its error and what was received."""

    __slots__ = ("error", "headers", "message", "number")

    def __init__(
        self,
        message: Message[object],
        error: BaseException,
        number: int,
        headers: Headers | None,
    ) -> None:
        self.message = message
        self.error = error
        self.number = number
        self.headers = headers  # user headers as received (None: take the message's)


class _Retrier:
    """Carries out a policy's decisions for one wrapped handler."""

    __slots__ = ("_policy",)

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy

    def snapshot(self, message: Message[object]) -> Headers | None:
        """The user headers as received, when a dead letter may need them later."""
        if self._policy.dead_letter is None:
            return None
        headers = message._headers  # not message.headers: that would create empty ones
        return headers.copy() if headers else None

    async def dead_letter(self, attempt: _Attempt, reason: DeadLetterReason) -> bool | None:
        """Send the dead letter, if one is configured.

        Returns True once sent (or when none is due), False if it could not be sent
        now, and None if it never can be (the server refuses it for good).
        """
        destination = self._policy.dead_letter
        if destination is None:
            return True
        message = attempt.message
        if is_dead_letter(message, destination.subject):
            logger.error(
                "the message on %r is itself a dead letter and failed again (%s); not "
                "dead-lettering it to where it came from",
                message.subject,
                attempt.error,
            )
            return True
        try:
            await destination.send(
                message,
                attempt.error,
                reason,
                # The broker counts deliveries; where attempts run in place, we do.
                attempts=None if message.acknowledgeable else attempt.number,
                headers=attempt.headers,
            )
        except Exception as failure:
            logger.error(
                "could not dead-letter the message on %r to %r: %s",
                message.subject,
                destination.subject,
                failure,
                exc_info=failure,
            )
            return None if refused_for_good(failure) else False
        return True

    async def settle_failure(self, attempt: _Attempt) -> None:
        """Nak, or dead-letter and terminate, a message the broker (or sender) redelivers."""
        message = attempt.message
        delivery = message.delivery
        which = "" if delivery is None else f" {delivery.stream_sequence}"
        decision = self._policy.decide(attempt.error, attempt.number)
        try:
            if decision.action == "nak":
                logger.info(
                    "message%s on %r failed on delivery %d (%s: %s); redelivery in %.3gs",
                    which,
                    message.subject,
                    attempt.number,
                    type(attempt.error).__name__,
                    attempt.error,
                    decision.delay or 0.0,
                )
                await message.nak(decision.delay)
                return
            assert decision.reason is not None
            sent = await self.dead_letter(attempt, decision.reason)
            if sent is False:
                # Keep the message: it comes back after a delay and is dead-lettered
                # then (the destination may be down, or misconfigured: see the log).
                retry_in = max(self._policy.backoff.delay(attempt.number), DEAD_LETTER_RETRY)
                logger.error(
                    "message%s on %r is kept and dead-lettered on a later delivery "
                    "(in %.3gs at the earliest)",
                    which,
                    message.subject,
                    retry_in,
                )
                await message.nak(retry_in)
                return
            logger.warning(
                "message%s on %r given up on delivery %d (%s)%s; terminating it",
                which,
                message.subject,
                attempt.number,
                decision.reason,
                self._sent_note(message)
                if sent
                else ", WITHOUT a dead letter: the server refuses it for good (see above)",
            )
            await message.term(_term_reason(decision.reason, attempt.error))
        except SettlementError as failure:
            logger.warning(
                "could not settle the failed message on %r: %s; the server redelivers it "
                "after ack_wait",
                message.subject,
                failure,
            )

    def _sent_note(self, message: Message[object]) -> str:
        destination = self._policy.dead_letter
        if destination is None or is_dead_letter(message, destination.subject):
            return ""
        return f", dead-lettered to {destination.subject!r}"

    async def run_in_process(
        self, handler: Handler[T], message: Message[T], first: _Attempt
    ) -> None:
        """Retry where the broker cannot redeliver: attempts run here, one after another."""
        attempt = first
        while True:
            decision = self._policy.decide(attempt.error, attempt.number)
            if decision.action == "term":
                assert decision.reason is not None
                await self._give_up_in_process(message, attempt, decision.reason)
                raise attempt.error
            if _cancelled_from_outside():
                raise attempt.error  # a drain: no more attempts
            logger.warning(
                "handler failed on %r (attempt %d), retrying in %.3gs: %s: %s",
                message.subject,
                attempt.number,
                decision.delay or 0.0,
                type(attempt.error).__name__,
                attempt.error,
            )
            await asyncio.sleep(decision.delay or 0.0)
            current = Message(
                message.subject,
                message.payload,
                headers=(attempt.headers or message.headers).copy(),
                id=message.id,
                delivery=message.delivery,
                data=message.data,
            )
            try:
                await handler(current)
            except Exception as failure:
                if current.settled is not None:
                    raise
                attempt = _Attempt(current, failure, attempt.number + 1, attempt.headers)
                continue
            if message.acknowledgeable and message.settled is None:
                await message.ack()
            return

    async def _give_up_in_process(
        self, message: Message[object], attempt: _Attempt, reason: DeadLetterReason
    ) -> None:
        if await self.dead_letter(attempt, reason):
            logger.warning(
                "message on %r given up after attempt %d (%s)%s",
                message.subject,
                attempt.number,
                reason,
                self._sent_note(message),
            )
        else:
            logger.error(
                "message on %r given up after attempt %d (%s) and LOST: the transport "
                "cannot redeliver it and the dead letter failed",
                message.subject,
                attempt.number,
                reason,
            )
        if message.acknowledgeable and message.settled is None:
            try:
                await message.term(_term_reason(reason, attempt.error))
            except SettlementError as failure:
                logger.warning("could not terminate %r: %s", message.subject, failure)


def retry_ack(policy: RetryPolicy | None = None) -> GenericMiddleware:
    """Settle by outcome, retrying failures as ``policy`` decides.

    Return acks; a failure is naked with the policy's delay, or, when permanent or out
    of attempts, dead-lettered (if configured) and terminated. The handler's error is
    re-raised either way, so the transport logs it and telemetry records it. A message
    the handler settled itself is left alone. If the dead letter cannot be published
    now, the message is kept (naked with a delay) and dead-lettered on a later
    delivery; one the server refuses for good is logged and the message terminated
    without it (see :func:`~goflux._compose.deadletter.refused_for_good`).

    On JetStream the broker redelivers (``nak`` with a delay) and counts the attempts
    (``msg.delivery.num_delivered``). Over HTTP the sender redelivers: a failure is
    answered 503 with the first delay as ``Retry-After`` (or, given up, 422), and the
    sender's retries count the attempts, not ``max_attempts``. Where messages cannot
    be redelivered (in-process channel, core NATS, JetStream's ordered mode) the
    attempts run in the handler's place, waiting the delays in between; the last
    error is re-raised once the message is given up.

    A cancellation that escapes the handler while its task is not being cancelled (a
    stray ``CancelledError`` from a library) counts as a retryable failure; a real
    cancellation (a drain) passes through untouched.

    Put it outermost (first in :func:`goflux.chain`) so it sees every failure, such
    as a :func:`timeout`.

    Args:
        policy: The retry policy; default: ``RetryPolicy()`` (5 attempts, exponential
            backoff from 1 s, no dead letters).
    """
    retrier = _Retrier(policy if policy is not None else RetryPolicy())

    def middleware(handler: Handler[T]) -> Handler[T]:
        async def handle(message: Message[T]) -> None:
            received = retrier.snapshot(message)
            try:
                await handler(message)
            except (Exception, asyncio.CancelledError) as error:
                if message.settled is not None:
                    raise
                if isinstance(error, asyncio.CancelledError) and _cancelled_from_outside():
                    raise
                delivery = message.delivery
                if message.acknowledgeable and delivery is not None:
                    attempt = _Attempt(message, error, delivery.num_delivered, received)
                    await retrier.settle_failure(attempt)
                    raise
                if message.acknowledgeable and retried_by_sender(message):
                    # The sender sends it again (HTTP: 503, Retry-After); it counts.
                    await retrier.settle_failure(_Attempt(message, error, 1, received))
                    raise
                first = _Attempt(message, error, 1, received)
                await retrier.run_in_process(handler, message, first)
                return
            if message.acknowledgeable and message.settled is None:
                await message.ack()

        return handle

    return middleware
