"""The NATS micro protocol's answers as typed values, and the rules its names follow.

The JSON shapes are those of ADR-32 as nats.go's ``micro`` package writes them, the
reference implementation: the service's ``metadata`` is an object (``{}`` when none
was given), an endpoint's is ``null`` when none was given, ``description`` and
``last_error`` are strings (``""`` when there is none), times are nanoseconds,
``started`` is RFC 3339 in UTC, and an endpoint's ``data`` is left out (goflux has no
stats handler).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

__all__ = (
    "DEFAULT_QUEUE_GROUP",
    "EndpointInfo",
    "EndpointStats",
    "ServiceInfo",
    "ServicePing",
    "ServiceStats",
    "check_metadata",
    "check_name",
    "check_version",
    "rfc3339",
)

DEFAULT_QUEUE_GROUP = "q"
"""The queue group of an endpoint whose responder has none (ADR-32)."""

_NAME = re.compile(r"[A-Za-z0-9\-_]+")
# The regular expression semver.org suggests (ADR-32 asks for it).
_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)


def check_name(what: str, name: object) -> str:
    """Return ``name`` if it is a valid service or endpoint name.

    Raises:
        ValueError: It is not a non-empty string of letters, digits, ``-`` and ``_``.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"invalid {what} name {name!r}: use letters, digits, '-' and '_' only")
    return name


def check_version(version: object) -> str:
    """Return ``version`` if it is a semantic version (``1.0.0``, ``2.1.3-rc.1+build.5``).

    Raises:
        ValueError: It is not.
    """
    if not isinstance(version, str) or not _SEMVER.fullmatch(version):
        raise ValueError(f"invalid service version {version!r}: use a semantic version (1.0.0)")
    return version


def check_metadata(what: str, metadata: object) -> dict[str, str]:
    """Return a copy of ``metadata`` if it maps strings to strings.

    Raises:
        ValueError: It is not a mapping, or a key or value is not a string.
    """
    if not isinstance(metadata, Mapping):
        raise ValueError(f"{what} metadata must map str to str, got {metadata!r}")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(
                f"{what} metadata must map str to str, got {key!r}: {value!r} in {metadata!r}"
            )
    return dict(metadata)


def rfc3339(moment: datetime) -> str:
    """``moment`` in UTC as RFC 3339 with microseconds: ``2024-05-01T10:00:00.250000Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _identity(answer: ServicePing | ServiceInfo | ServiceStats) -> dict[str, Any]:
    """The fields every answer starts with: who answers, and the answer's type."""
    return {
        "name": answer.name,
        "id": answer.id,
        "version": answer.version,
        "metadata": dict(answer.metadata),
        "type": answer.TYPE,
    }


@dataclass(frozen=True)
class ServicePing:
    """A service instance's answer to ``$SRV.PING``: who it is.

    Attributes:
        name: The service's name (shared by its instances).
        id: This instance's unique ID.
        version: The service's semantic version.
        metadata: The service's metadata.
    """

    TYPE: ClassVar[str] = "io.nats.micro.v1.ping_response"

    name: str
    id: str
    version: str
    metadata: Mapping[str, str]

    def as_dict(self) -> dict[str, Any]:
        """The answer's JSON object, as sent."""
        return _identity(self)


@dataclass(frozen=True)
class EndpointInfo:
    """One endpoint in a :class:`ServiceInfo`.

    Attributes:
        name: The endpoint's name, unique in its service.
        subject: The subject (or pattern) it serves.
        queue_group: The queue group its instances share.
        metadata: The endpoint's metadata; None when none was given (JSON ``null``).
    """

    name: str
    subject: str
    queue_group: str
    metadata: Mapping[str, str] | None

    def as_dict(self) -> dict[str, Any]:
        """The endpoint's JSON object, as sent."""
        return {
            "name": self.name,
            "subject": self.subject,
            "queue_group": self.queue_group,
            "metadata": None if self.metadata is None else dict(self.metadata),
        }


@dataclass(frozen=True)
class ServiceInfo:
    """A service instance's answer to ``$SRV.INFO``: what it serves.

    Attributes:
        name: The service's name.
        id: This instance's unique ID.
        version: The service's semantic version.
        metadata: The service's metadata.
        description: What the service does (``""`` when none was given).
        endpoints: Its running endpoints, in the order they started.
    """

    TYPE: ClassVar[str] = "io.nats.micro.v1.info_response"

    name: str
    id: str
    version: str
    metadata: Mapping[str, str]
    description: str
    endpoints: tuple[EndpointInfo, ...]

    def as_dict(self) -> dict[str, Any]:
        """The answer's JSON object, as sent."""
        return {
            **_identity(self),
            "description": self.description,
            "endpoints": [endpoint.as_dict() for endpoint in self.endpoints],
        }


@dataclass(frozen=True)
class EndpointStats:
    """One endpoint's counters in a :class:`ServiceStats`.

    Attributes:
        name: The endpoint's name.
        subject: The subject (or pattern) it serves.
        queue_group: The queue group its instances share.
        num_requests: Requests received (each answered, or counted as an error).
        num_errors: Requests answered with an error reply, or that could not be
            answered.
        last_error: The last error as ``code:description`` (``""`` when none).
        processing_time: Nanoseconds spent on all requests, error replies included.
        average_processing_time: ``processing_time // num_requests`` (0 without
            requests), in nanoseconds.
    """

    name: str
    subject: str
    queue_group: str
    num_requests: int
    num_errors: int
    last_error: str
    processing_time: int
    average_processing_time: int

    def as_dict(self) -> dict[str, Any]:
        """The endpoint's JSON object, as sent."""
        return {
            "name": self.name,
            "subject": self.subject,
            "queue_group": self.queue_group,
            "num_requests": self.num_requests,
            "num_errors": self.num_errors,
            "last_error": self.last_error,
            "processing_time": self.processing_time,
            "average_processing_time": self.average_processing_time,
        }


@dataclass(frozen=True)
class ServiceStats:
    """A service instance's answer to ``$SRV.STATS``: how its endpoints are doing.

    Attributes:
        name: The service's name.
        id: This instance's unique ID.
        version: The service's semantic version.
        metadata: The service's metadata.
        started: When the instance started (or its stats were last reset), in UTC.
        endpoints: Its running endpoints' counters, in the order they started.
    """

    TYPE: ClassVar[str] = "io.nats.micro.v1.stats_response"

    name: str
    id: str
    version: str
    metadata: Mapping[str, str]
    started: datetime
    endpoints: tuple[EndpointStats, ...]

    def as_dict(self) -> dict[str, Any]:
        """The answer's JSON object, as sent."""
        return {
            **_identity(self),
            "started": rfc3339(self.started),
            "endpoints": [endpoint.as_dict() for endpoint in self.endpoints],
        }
