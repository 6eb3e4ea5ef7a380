"""Bound how long a handler may run, keeping the broker informed while it does."""

from __future__ import annotations

import asyncio
import math
from typing import Final, TypeVar

from goflux._errors import HandlerTimeout
from goflux._interfaces import GenericMiddleware, Handler
from goflux._message import Message
from goflux.middleware._watchdog import Watchdog

__all__ = ("DEFAULT_HEARTBEAT", "timeout")

T = TypeVar("T")

DEFAULT_HEARTBEAT: Final = 10.0
"""Seconds between ``in_progress`` signals: a third of JetStream's default ack_wait."""


def timeout(seconds: float, *, heartbeat: float | None = DEFAULT_HEARTBEAT) -> GenericMiddleware:
    """Cancel a handler that runs longer than ``seconds`` and fail it as retryable.

    The handler is cancelled when the time is up and :class:`~goflux.HandlerTimeout`
    (a retryable error, also a ``TimeoutError``) is raised in its place, so the
    transport naks the message or :func:`retry_ack` retries it with backoff. While the
    handler runs, ``in_progress`` is sent every ``heartbeat`` seconds so the broker
    does not redeliver a message that is still being worked on (JetStream's
    ``ack_wait``); transports without acknowledgement get no heartbeats.

    The deadline is checked a few times per timeout (every tenth of it, at most every
    second), so a handler is cancelled within that tick after ``seconds``: one watch
    task per event loop serves every handler, which costs far less per message than a
    timer each. A handler that catches the cancellation and returns anyway still
    counts as timed out. A ``TimeoutError`` the handler raises itself passes through unchanged, and
    cancelling the handler from outside (a subscription drain) is not a timeout.

    Args:
        seconds: The most a handler may run.
        heartbeat: Seconds between ``in_progress`` signals, or None for none (the
            JetStream subscriber also keeps long handlers alive by default).

    Raises:
        ValueError: ``seconds`` or ``heartbeat`` is not a positive finite number.
    """
    for name, value in (("seconds", seconds), ("heartbeat", heartbeat)):
        if value is None and name == "heartbeat":
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ValueError(f"timeout {name} must be a positive number of seconds, got {value!r}")
    beats = heartbeat if heartbeat is not None and heartbeat < seconds else None
    watchdog = Watchdog(seconds, beats)

    def middleware(handler: Handler[T]) -> Handler[T]:
        async def handle(message: Message[T]) -> None:
            run = watchdog.start(message)
            try:
                await handler(message)
            except asyncio.CancelledError as exc:
                if run.outcome_of_cancellation():
                    raise HandlerTimeout(
                        f"handler for the message on {message.subject!r} ran longer than "
                        f"{seconds}s and was cancelled",
                        seconds=seconds,
                    ) from exc
                raise
            except BaseException:
                if run.expired:  # it turned our cancellation into another error
                    run.outcome_of_cancellation()  # undo our cancellation request
                raise
            finally:
                watchdog.stop(run)
                if run.sending is not None:  # let a heartbeat on its way arrive
                    await run.finish()
            if run.expired:  # it swallowed the cancellation and returned
                run.outcome_of_cancellation()  # undo our cancellation request
                raise HandlerTimeout(
                    f"handler for the message on {message.subject!r} ran longer than "
                    f"{seconds}s and ignored its cancellation",
                    seconds=seconds,
                )

        return handle

    return middleware
