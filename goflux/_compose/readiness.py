"""What a :class:`~goflux.Group` reports to health probes: :class:`Readiness`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ("Check", "GroupState", "Readiness")

GroupState = Literal["new", "starting", "running", "stopping", "stopped", "failed"]
"""Where a group is in its life: built, starting its members, running, draining, done."""


@dataclass(frozen=True, slots=True)
class Check:
    """One part of a readiness report: a member or a connection, and whether it is fine.

    Attributes:
        name: What was checked ("subscription to 'orders.>'", "connection nats://h:4222").
        ok: Whether it is ready.
        detail: Why not, or what it is doing ("running", "reconnecting").
    """

    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, object]:
        """The check as JSON-ready data."""
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether a service can do its work now, with the checks behind the answer.

    Ready means: the group is running (every member started, not draining) and every
    check passes (each subscription and stream still running, each NATS connection the
    group knows of is connected, not reconnecting).

    Attributes:
        state: The group's state.
        checks: One per member and per connection.
        failure: The first failure of a member, as ``"Type: message"``, if any.
    """

    state: GroupState
    checks: tuple[Check, ...] = field(default=())
    failure: str | None = None

    @property
    def ready(self) -> bool:
        """True when the group is running and every check passes."""
        return self.state == "running" and all(check.ok for check in self.checks)

    def as_dict(self) -> dict[str, object]:
        """The report as JSON-ready data (what ``/readyz`` answers)."""
        data: dict[str, object] = {
            "ready": self.ready,
            "state": self.state,
            "checks": [check.as_dict() for check in self.checks],
        }
        if self.failure is not None:
            data["failure"] = self.failure
        return data
