"""A JetStream subscriber's settings (:class:`SubscriberSettings`), checked, with defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

from typing_extensions import TypedDict

from goflux._backoff import REDELIVERY_BACKOFF, Backoff, BackoffLike, as_backoff
from goflux._compose.deadletter import DeadLetter
from goflux.transports.jetstream._confirm import DEFAULT_CONFIRM_TIMEOUT
from goflux.transports.jetstream._priority import Priority

__all__ = (
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_EXPIRES",
    "DEFAULT_FETCH_EXPIRES",
    "DEFAULT_MAX_IN_FLIGHT",
    "EPHEMERAL_INACTIVE_THRESHOLD",
    "SubscriberOptions",
    "SubscriberSettings",
)

DEFAULT_MAX_IN_FLIGHT = 1 << 9  # 512 (written so: a literal in 400-599 reads as a status code)
DEFAULT_EXPIRES = 30.0
DEFAULT_FETCH_EXPIRES = 5.0  # seconds a one-shot read (fetch, next) waits by default
DEFAULT_DRAIN_TIMEOUT = 30.0
# The server's default (5 s) is shorter than a server restart can take; an ephemeral
# consumer left by a crashed process is still removed after this long.
EPHEMERAL_INACTIVE_THRESHOLD = 60.0


class SubscriberSettings(TypedDict, total=False):
    """The settings of a JetStream :class:`Subscriber`, all optional.

    What each does, and its default, is in :class:`Subscriber`'s arguments.
    """

    manual_ack: bool
    max_in_flight: int
    concurrency: int
    batch: int | None
    expires: float
    idle_heartbeat: float | None
    keep_alive: bool
    drain_timeout: float
    consumer_config: Mapping[str, Any] | None
    ordered: bool
    dead_letter: DeadLetter | None
    confirm_acks: bool
    confirm_timeout: float
    priority_group: str | None
    min_pending: int | None
    min_ack_pending: int | None
    priority: int | None
    redelivery_backoff: BackoffLike | None


_SETTINGS = frozenset(SubscriberSettings.__annotations__)


class SubscriberOptions:
    """A subscriber's settings, checked and with their defaults, shared by its subscriptions.

    Raises:
        ValueError: A setting is out of range.
        TypeError: An unknown setting.
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
        "redelivery_backoff",
    )

    def __init__(self, **settings: Unpack[SubscriberSettings]) -> None:
        unknown = sorted(set(settings) - _SETTINGS)
        if unknown:
            raise TypeError(f"unknown subscriber setting(s): {', '.join(unknown)}")
        self.manual_ack = settings.get("manual_ack", False)
        self.max_in_flight = settings.get("max_in_flight", DEFAULT_MAX_IN_FLIGHT)
        self.concurrency = settings.get("concurrency", 1)
        self.batch = settings.get("batch") or self.max_in_flight
        self.expires = settings.get("expires", DEFAULT_EXPIRES)
        heartbeat = settings.get("idle_heartbeat")
        self.heartbeat = heartbeat if heartbeat is not None else min(self.expires / 2, 5.0)
        self.keep_alive = settings.get("keep_alive", True)
        self.drain_timeout = settings.get("drain_timeout", DEFAULT_DRAIN_TIMEOUT)
        self.consumer_config = dict(settings.get("consumer_config") or {})
        self.ordered = settings.get("ordered", False)
        self.dead_letter = settings.get("dead_letter")
        self.confirm_acks = settings.get("confirm_acks", False)
        self.confirm_timeout = settings.get("confirm_timeout", DEFAULT_CONFIRM_TIMEOUT)
        self.priority_group = settings.get("priority_group")
        self.min_pending = settings.get("min_pending")
        self.min_ack_pending = settings.get("min_ack_pending")
        self.priority = settings.get("priority")
        backoff = settings.get("redelivery_backoff", REDELIVERY_BACKOFF)
        self.redelivery_backoff: Backoff | None = None if backoff is None else as_backoff(backoff)
        if "redelivery_backoff" in settings and (self.manual_ack or self.ordered):
            raise ValueError(
                "redelivery_backoff sets the delay of the subscriber's own naks: "
                "with manual_ack the handler settles (see auto_ack(redelivery_backoff=)), "
                "and ordered mode has no acks"
            )
        self._check(settings.get("batch"))
        self.batch = min(self.batch, self.max_in_flight)

    def _check(self, batch: int | None) -> None:
        if self.priority_group is None and (
            self.min_pending is not None
            or self.min_ack_pending is not None
            or self.priority is not None
        ):
            raise ValueError("min_pending, min_ack_pending and priority need a priority_group")
        self.priority_of()  # validates the group, the minimums and the priority
        if self.ordered and (self.manual_ack or self.concurrency != 1 or self.confirm_acks):
            raise ValueError(
                "ordered mode delivers in order without acks: no manual_ack or "
                "confirm_acks, concurrency 1"
            )
        if not self.confirm_timeout > 0:  # also refuses NaN
            raise ValueError(f"confirm_timeout must be > 0 seconds, got {self.confirm_timeout}")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {self.max_in_flight}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.concurrency > self.max_in_flight:
            raise ValueError(
                f"concurrency ({self.concurrency}) cannot exceed max_in_flight "
                f"({self.max_in_flight})"
            )
        if batch is not None and batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if self.expires < 1.0:
            raise ValueError(f"expires must be >= 1 second, got {self.expires}")
        if not 0.1 <= self.heartbeat <= self.expires / 2:
            raise ValueError(
                f"idle_heartbeat must be between 0.1s and half of expires, got {self.heartbeat}"
            )
        if self.drain_timeout < 0:
            raise ValueError(f"drain_timeout must be >= 0, got {self.drain_timeout}")

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
