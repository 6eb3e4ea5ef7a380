"""JetStream priority groups (nats-server 2.11+, ADR-42): settings, pull fields, pins.

A consumer with ``priority_groups`` and a ``priority_policy`` serves only pull
requests that name one of its groups. With ``"pinned_client"`` one client at a time
gets the group's messages: the server marks its deliveries with a ``Nats-Pin-Id``
header, which the client sends back as ``"id"`` in its later pull requests; a request
with another id is answered with status 423. With ``"overflow"`` a request may set
``min_pending`` / ``min_ack_pending``: it is served only while the consumer's backlog
(or unacknowledged count) is at least that. With ``"prioritized"`` (nats-server
2.12+) a request's ``priority`` (0 first, 9 last) decides who is served first.

:class:`Priority` holds one subscription's side of this (its pull request fields and
its pin); :func:`unpin_consumer` makes the server pick a new pinned client at once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import nats.errors
from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from goflux._errors import SubscribeError
from goflux.transports._natspy import connection
from goflux.transports.jetstream._api import ApiCall, api_request, check_name
from goflux.transports.jetstream._config import consumer_info_raw
from goflux.transports.jetstream._errors import ConsumerNotFound, StreamNotFound
from goflux.transports.jetstream._features import PRIORITY_GROUPS, require
from goflux.transports.jetstream._status import STREAM_NOT_FOUND

__all__ = (
    "PIN_HEADER",
    "PRIORITY_POLICIES",
    "Priority",
    "check_group",
    "check_ungrouped",
    "priority_settings",
    "release_pin",
    "unpin_consumer",
)

logger = logging.getLogger("goflux.transports.jetstream")

PRIORITY_POLICIES: Final = ("overflow", "pinned_client", "prioritized")
PIN_HEADER: Final = "Nats-Pin-Id"

_NS = 1_000_000_000
_GROUP = re.compile(r"[A-Za-z0-9_/=-]{1,16}")  # the server's rule for group names


def check_group(group: object) -> str:
    """Return ``group`` if it is a valid priority group name.

    Raises:
        ValueError: It is not 1 to 16 of ``A-Z a-z 0-9 - _ / =``.
    """
    if not isinstance(group, str) or not _GROUP.fullmatch(group):
        raise ValueError(
            f"invalid priority group {group!r}: use 1 to 16 characters of "
            "A-Z, a-z, 0-9, '-', '_', '/', '='"
        )
    return group


def priority_settings(
    groups: Sequence[str] | None, policy: str | None, timeout: float | None
) -> dict[str, Any]:
    """The raw consumer config fields for these priority settings (empty if none given).

    Args:
        groups: The consumer's priority groups.
        policy: ``"pinned_client"``, ``"overflow"`` or ``"prioritized"``.
        timeout: Seconds a pinned client may go without pulling before the server
            pins another (``pinned_client`` only; the server's default is 120).

    Raises:
        ValueError: A policy the server does not know, groups without a policy or the
            other way round, an invalid or repeated group name, or a timeout that is
            not positive or not for ``pinned_client``.
    """
    if groups is None and policy is None and timeout is None:
        return {}
    if policy not in PRIORITY_POLICIES:
        raise ValueError(
            f"priority_policy must be one of {', '.join(map(repr, PRIORITY_POLICIES))}, "
            f"got {policy!r}"
        )
    if isinstance(groups, str) or not groups:
        raise ValueError("priority_groups must be a non-empty list of group names")
    names = [check_group(group) for group in groups]
    if len(set(names)) != len(names):
        raise ValueError(f"priority_groups has repeated names: {names}")
    settings: dict[str, Any] = {"priority_groups": names, "priority_policy": policy}
    if timeout is not None:
        if policy != "pinned_client":
            raise ValueError("priority_timeout applies to priority_policy='pinned_client' only")
        if not timeout > 0:  # also refuses NaN
            raise ValueError(f"priority_timeout must be > 0 seconds, got {timeout}")
        settings["priority_timeout"] = int(timeout * _NS)
    return settings


def _at_least_one(name: str, value: int | None) -> int | None:
    if value is not None and (isinstance(value, bool) or value < 1):
        raise ValueError(f"{name} must be >= 1, got {value!r}")
    return value


class Priority:
    """One subscription's place in a consumer's priority group.

    It gives the fields each pull request carries (:meth:`fields`) and keeps the pin:
    :meth:`observe` reads the ``Nats-Pin-Id`` of each delivery, :meth:`unpinned`
    forgets it when the server answers 423 (another client is pinned now).

    Args:
        group: The priority group to pull in.
        min_pending: Be served only while the consumer has at least this many
            messages pending (``overflow``).
        min_ack_pending: Be served only while at least this many messages await
            acknowledgement (``overflow``).
        priority: 0 (served first) to 9 (``prioritized``).

    Raises:
        ValueError: An invalid group name, a minimum below 1, or a priority outside 0-9.
    """

    __slots__ = ("group", "min_ack_pending", "min_pending", "pin_id", "priority")

    def __init__(
        self,
        group: str,
        *,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
    ) -> None:
        self.group = check_group(group)
        self.min_pending = _at_least_one("min_pending", min_pending)
        self.min_ack_pending = _at_least_one("min_ack_pending", min_ack_pending)
        if priority is not None and (isinstance(priority, bool) or not 0 <= priority <= 9):
            raise ValueError(f"priority must be between 0 and 9, got {priority!r}")
        self.priority = priority
        self.pin_id: str | None = None

    def fields(self) -> dict[str, Any]:
        """The priority fields of a pull request: group, thresholds, priority, pin id."""
        fields: dict[str, Any] = {"group": self.group}
        if self.min_pending is not None:
            fields["min_pending"] = self.min_pending
        if self.min_ack_pending is not None:
            fields["min_ack_pending"] = self.min_ack_pending
        if self.priority is not None:
            fields["priority"] = self.priority
        if self.pin_id is not None:
            fields["id"] = self.pin_id
        return fields

    def observe(self, headers: Mapping[str, str] | None) -> None:
        """Remember the pin id a delivery carries (the server pinned this client)."""
        if headers:
            pin = headers.get(PIN_HEADER)
            if pin:
                self.pin_id = pin

    def unpinned(self) -> None:
        """Forget the pin: another client is pinned; pull without an id from now on."""
        self.pin_id = None

    def check(self, consumer: str, config: Mapping[str, Any]) -> None:
        """Check that the consumer's raw ``config`` has this group and fits the options.

        Raises:
            SubscribeError: The consumer has no such group, or its policy does not
                take the thresholds or the priority.
        """
        groups = list(config.get("priority_groups") or [])
        policy = config.get("priority_policy") or "none"
        if self.group not in groups:
            having = f"its groups are {groups}" if groups else "it has no priority groups"
            raise SubscribeError(
                f"consumer {consumer!r} has no priority group {self.group!r} ({having})"
            )
        thresholds = self.min_pending is not None or self.min_ack_pending is not None
        if thresholds and policy != "overflow":
            raise SubscribeError(
                f"consumer {consumer!r} has priority_policy {policy!r}: min_pending and "
                "min_ack_pending need 'overflow'"
            )
        if self.priority is not None and policy != "prioritized":
            raise SubscribeError(
                f"consumer {consumer!r} has priority_policy {policy!r}: priority needs "
                "'prioritized'"
            )


def check_ungrouped(consumer: str, config: Mapping[str, Any]) -> None:
    """Check that a consumer pulled without a priority group has none.

    Raises:
        SubscribeError: It has priority groups (the server refuses pulls without one).
    """
    groups = list(config.get("priority_groups") or [])
    if groups:
        raise SubscribeError(
            f"consumer {consumer!r} has priority groups {groups} "
            f"(policy {config.get('priority_policy')!r}): subscribe with priority_group="
        )


async def unpin_consumer(js: JetStreamContext, stream: str, name: str, group: str) -> None:
    """Unpin the client pinned in ``group`` of consumer ``name``: the server pins another.

    For a ``pinned_client`` consumer: the next pull request waiting in the group
    (another client's) is pinned at once, instead of after the consumer's
    ``priority_timeout``. A group with no pinned client is left as it is.

    Raises:
        ValueError: An invalid stream, consumer or group name.
        StreamNotFound: The stream does not exist.
        ConsumerNotFound: The consumer does not exist.
        FeatureUnsupported: The server is older than 2.11 (no priority groups).
        ProvisioningError: Another refusal, such as a group the consumer does not have.
        PermissionDenied: The server refused the request.
        TransportError: No answer in time, or the connection closed.
    """
    check_name("stream", stream)
    check_name("consumer", name)
    check_group(group)
    what = f"unpinning group {group!r} of consumer {name!r} on stream {stream!r}"
    require(connection(js), PRIORITY_GROUPS, what)
    tail = f"CONSUMER.UNPIN.{stream}.{name}"
    with ApiCall(js, what, tail):
        try:
            await _unpin(js, tail, group)
        except NotFoundError as exc:
            if exc.err_code == STREAM_NOT_FOUND:
                raise StreamNotFound(
                    f"{what}: stream not found", code=exc.code, err_code=exc.err_code
                ) from exc
            raise ConsumerNotFound(
                f"{what}: consumer not found", code=exc.code, err_code=exc.err_code
            ) from exc


async def release_pin(js: JetStreamContext, stream: str, name: str, priority: Priority) -> None:
    """Give up the pin of a subscription that has stopped pulling, so another takes over.

    Only if the server still has this subscription pinned (its pin id): otherwise the
    pin is another client's, and unpinning would take it away. Failures are logged:
    the server unpins by itself after the consumer's ``priority_timeout``.
    """
    pin, priority.pin_id = priority.pin_id, None
    if pin is None:
        return
    try:
        raw = await consumer_info_raw(js, stream, name)
        pinned = {
            entry.get("group"): entry.get("pinned_client_id")
            for entry in raw.get("priority_groups") or ()
            if isinstance(entry, dict)
        }
        if pinned.get(priority.group) == pin:
            await _unpin(js, f"CONSUMER.UNPIN.{stream}.{name}", priority.group)
    except (nats.errors.Error, APIError, TimeoutError) as exc:
        logger.warning("could not unpin group %r of %r: %s", priority.group, name, exc)


async def _unpin(js: JetStreamContext, tail: str, group: str) -> None:
    await api_request(js, tail, {"group": group})
