"""How long to wait before the next attempt: exponential or a fixed list of delays."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, TypeAlias

__all__ = (
    "MAX_DELAY",
    "REDELIVERY_BACKOFF",
    "Backoff",
    "BackoffLike",
    "ExponentialBackoff",
    "FixedBackoff",
    "as_backoff",
    "failure_logged",
    "redelivery_delay",
)

logger = logging.getLogger("goflux")


class Backoff(Protocol):
    """Computes the delay before the next attempt from the number of attempts so far."""

    def delay(self, attempt: int, /) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1 for the first)."""
        ...


BackoffLike: TypeAlias = Backoff | Sequence[float]
"""A :class:`Backoff`, or a list of delays in seconds (see :class:`FixedBackoff`)."""


MAX_DELAY: Final = 365 * 24 * 3600.0
"""The longest delay accepted, one year (JetStream keeps delays in int64 nanoseconds)."""


def _check_delay(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if not 0 <= value <= MAX_DELAY:  # also refuses NaN
        raise ValueError(f"{name} must be between 0 and {MAX_DELAY:.0f} seconds, got {value!r}")
    return float(value)


def _check_attempt(attempt: int) -> None:
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"attempt must be an int >= 1, got {attempt!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ExponentialBackoff:
    """Delays growing by ``multiplier`` per attempt, capped at ``max``, with jitter.

    After attempt ``n`` the delay is ``min(max, initial * multiplier ** (n - 1))``,
    reduced by a random fraction of up to ``jitter`` (``0.2`` waits between 80% and
    100% of it) so that many failing consumers do not retry in lockstep. The delay
    never exceeds ``max``.

    Raises:
        ValueError: A delay is negative or above :data:`MAX_DELAY`, ``multiplier`` is
            below 1, ``max`` is below ``initial``, or ``jitter`` is outside ``[0, 1]``.
    """

    initial: float = 1.0
    multiplier: float = 2.0
    max: float = 60.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        _check_delay("initial", self.initial)
        _check_delay("max", self.max)
        if not math.isfinite(self.multiplier) or self.multiplier < 1:
            raise ValueError(f"multiplier must be a finite number >= 1, got {self.multiplier!r}")
        if self.max < self.initial:
            raise ValueError(f"max ({self.max}) must be >= initial ({self.initial})")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be between 0 and 1, got {self.jitter!r}")

    def delay(self, attempt: int, /) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1 for the first).

        Raises:
            ValueError: ``attempt`` is not an int >= 1.
        """
        _check_attempt(attempt)
        try:
            base = min(self.max, self.initial * self.multiplier ** (attempt - 1))
        except OverflowError:  # a huge attempt count: the cap applies
            base = self.max
        if self.jitter:
            base *= 1 - self.jitter * random.random()
        return base


class FixedBackoff:
    """A fixed list of delays, like a JetStream consumer's ``backoff``.

    Attempt ``n`` waits ``delays[n - 1]``; attempts past the end of the list repeat
    its last delay.

    Raises:
        ValueError: The list is empty, or a delay is negative or above :data:`MAX_DELAY`.
        TypeError: A delay is not a number.
    """

    __slots__ = ("_delays",)

    def __init__(self, delays: Iterable[float], /) -> None:
        checked = tuple(_check_delay(f"delay {i}", d) for i, d in enumerate(delays))
        if not checked:
            raise ValueError("a fixed backoff needs at least one delay")
        self._delays = checked

    @property
    def delays(self) -> tuple[float, ...]:
        """The delays in seconds, in order."""
        return self._delays

    def __repr__(self) -> str:
        return f"FixedBackoff({list(self._delays)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FixedBackoff) and other._delays == self._delays

    def __hash__(self) -> int:
        return hash(self._delays)

    def delay(self, attempt: int, /) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1 for the first).

        Raises:
            ValueError: ``attempt`` is not an int >= 1.
        """
        _check_attempt(attempt)
        delays = self._delays
        return delays[min(attempt, len(delays)) - 1]


def as_backoff(backoff: BackoffLike) -> Backoff:
    """Return ``backoff`` as a :class:`Backoff`: a list of delays becomes a :class:`FixedBackoff`.

    Raises:
        TypeError: ``backoff`` is neither a Backoff nor a sequence of delays.
        ValueError: The sequence is empty or holds a negative or non-finite delay.
    """
    if isinstance(backoff, str | bytes):
        raise TypeError(f"backoff must be a Backoff or a list of delays, got {backoff!r}")
    if isinstance(backoff, Sequence):
        return FixedBackoff(backoff)
    if not callable(getattr(backoff, "delay", None)):
        raise TypeError(f"backoff must be a Backoff or a list of delays, got {backoff!r}")
    return backoff


REDELIVERY_BACKOFF: Final = ExponentialBackoff(initial=0.5, multiplier=2.0, max=60.0, jitter=0.1)
"""How long a transport waits before redelivering a message whose handler failed.

Delivery ``n`` that fails is redelivered after about ``0.5 * 2 ** (n - 1)`` seconds,
at most a minute: a handler that always fails sees its message about 6 times in its
first 10 s, not thousands of times, and the messages beside it flow at full speed.
"""


def redelivery_delay(backoff: Backoff | None, num_delivered: int) -> float | None:
    """Seconds before delivery ``num_delivered`` (after it failed) comes back.

    ``None`` (the nak's "redeliver at once") when ``backoff`` is None; a delivery count
    below 1 (a transport that does not count) counts as the first delivery. What a
    user's :class:`Backoff` returns is made safe: above :data:`MAX_DELAY` (an uncapped
    doubling reaches it by delivery 25) it is capped, below 0 it is 0, and what is not
    a number (or NaN) is logged and replaced by :data:`REDELIVERY_BACKOFF`'s delay, so
    a failing message never stops its subscription nor comes back in a hot loop.
    """
    if backoff is None:
        return None
    attempt = max(num_delivered, 1)
    try:
        delay = float(backoff.delay(attempt))
    except (TypeError, ValueError, OverflowError) as exc:
        delay = math.nan
        problem = f"raised {type(exc).__name__}: {exc}"
    else:
        problem = "returned NaN"
    if math.isnan(delay):
        logger.warning(
            "redelivery backoff %r %s for delivery %d; using the default back-off",
            backoff,
            problem,
            attempt,
        )
        return REDELIVERY_BACKOFF.delay(attempt)
    return min(max(delay, 0.0), MAX_DELAY)


def failure_logged(num_delivered: int, delay: float | None) -> bool:
    """Whether the failure of delivery ``num_delivered``, naked with ``delay``, is logged.

    Every failure whose message comes back after 0.1 s or more is (one line per
    back-off step); a message redelivered at once (``delay`` None or below 0.1 s, or
    not known) is logged for deliveries 1, 2, 4, 8, ... only, so that one message
    failing over and over cannot flood the log.
    """
    if delay is not None and delay >= 0.1:
        return True
    return num_delivered & (num_delivered - 1) == 0
