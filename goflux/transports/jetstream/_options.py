"""Validated options of a JetStream subscriber, shared by its subscriptions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from goflux._deadletter import DeadLetter
from goflux.transports.jetstream._confirm import DEFAULT_CONFIRM_TIMEOUT
from goflux.transports.jetstream._priority import Priority

__all__ = (
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_EXPIRES",
    "DEFAULT_FETCH_EXPIRES",
    "DEFAULT_MAX_IN_FLIGHT",
    "EPHEMERAL_INACTIVE_THRESHOLD",
    "SubscriberOptions",
)

DEFAULT_MAX_IN_FLIGHT = 256
DEFAULT_EXPIRES = 30.0
DEFAULT_FETCH_EXPIRES = 5.0  # seconds a one-shot read (fetch, next) waits by default
DEFAULT_DRAIN_TIMEOUT = 30.0
# The server's default (5 s) is shorter than a server restart can take; an ephemeral
# consumer left by a crashed process is still removed after this long.
EPHEMERAL_INACTIVE_THRESHOLD = 60.0


class SubscriberOptions:
    """Validated options of a JetStream subscriber, shared by its subscriptions.

    Raises:
        ValueError: An option is out of range.
    """

    __slots__ = (
        "batch",
        "concurrency",
        "confirm_acks",
        "confirm_timeout",
        "consumer_config",
        "dead_letter",
        "drain_timeout",
        "expires",
        "heartbeat",
        "keep_alive",
        "manual_ack",
        "max_in_flight",
        "min_ack_pending",
        "min_pending",
        "ordered",
        "priority",
        "priority_group",
    )

    def __init__(
        self,
        *,
        manual_ack: bool,
        max_in_flight: int,
        concurrency: int,
        batch: int | None,
        expires: float,
        idle_heartbeat: float | None,
        keep_alive: bool,
        drain_timeout: float,
        consumer_config: Mapping[str, Any] | None,
        ordered: bool,
        dead_letter: DeadLetter | None = None,
        confirm_acks: bool = False,
        confirm_timeout: float = DEFAULT_CONFIRM_TIMEOUT,
        priority_group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
    ) -> None:
        if priority_group is None and (
            min_pending is not None or min_ack_pending is not None or priority is not None
        ):
            raise ValueError("min_pending, min_ack_pending and priority need a priority_group")
        if priority_group is not None:  # validates the group, the minimums and the priority
            Priority(
                priority_group,
                min_pending=min_pending,
                min_ack_pending=min_ack_pending,
                priority=priority,
            )
        if ordered and (manual_ack or concurrency != 1 or confirm_acks):
            raise ValueError(
                "ordered mode delivers in order without acks: no manual_ack or "
                "confirm_acks, concurrency 1"
            )
        if not confirm_timeout > 0:  # also refuses NaN
            raise ValueError(f"confirm_timeout must be > 0 seconds, got {confirm_timeout}")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if concurrency > max_in_flight:
            raise ValueError(
                f"concurrency ({concurrency}) cannot exceed max_in_flight ({max_in_flight})"
            )
        if batch is not None and batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if expires < 1.0:
            raise ValueError(f"expires must be >= 1 second, got {expires}")
        heartbeat = idle_heartbeat if idle_heartbeat is not None else min(expires / 2, 5.0)
        if not 0.1 <= heartbeat <= expires / 2:
            raise ValueError(
                f"idle_heartbeat must be between 0.1s and half of expires, got {heartbeat}"
            )
        if drain_timeout < 0:
            raise ValueError(f"drain_timeout must be >= 0, got {drain_timeout}")
        self.manual_ack = manual_ack
        self.max_in_flight = max_in_flight
        self.concurrency = concurrency
        self.batch = min(batch or max_in_flight, max_in_flight)
        self.expires = expires
        self.heartbeat = heartbeat
        self.keep_alive = keep_alive
        self.drain_timeout = drain_timeout
        self.consumer_config = dict(consumer_config or {})
        self.ordered = ordered
        self.dead_letter = dead_letter
        self.confirm_acks = confirm_acks
        self.confirm_timeout = confirm_timeout
        self.priority_group = priority_group
        self.min_pending = min_pending
        self.min_ack_pending = min_ack_pending
        self.priority = priority

    def priority_of(self) -> Priority | None:
        """A new subscription's place in its consumer's priority group, if it pulls in one."""
        if self.priority_group is None:
            return None
        return Priority(
            self.priority_group,
            min_pending=self.min_pending,
            min_ack_pending=self.min_ack_pending,
            priority=self.priority,
        )
