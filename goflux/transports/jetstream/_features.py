"""Which nats-server version each JetStream feature needs, and the checks made before sending.

An older server does not refuse what it does not know: it stores a message with
``Nats-TTL`` that never expires, stores each message of an atomic batch on its own,
drops ``allow_atomic`` from a stream config, and leaves a consumer pause request
unanswered. So every feature goflux can ask for is listed here with the first
version that has it, and a call that asks for one on an older server raises
:class:`~goflux.transports.jetstream.FeatureUnsupported` before anything is sent.

The table is the place to extend: a new feature is one :class:`Feature`, plus its
stream or consumer config field, its header, or a :func:`require` where the call
that uses it starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from nats.aio.client import Client

from goflux.transports.jetstream._config import is_omitted_default
from goflux.transports.jetstream._errors import ConfigNotApplied, FeatureUnsupported
from goflux.transports.jetstream._server import (
    ConnectedServer,
    Version,
    connected_server,
    parse_version,
    version_text,
)

__all__ = (
    "ATOMIC_BATCH",
    "BATCH_DIRECT_GET",
    "CONSUMER_FIELDS",
    "CONSUMER_PAUSE",
    "CONSUMER_RESET",
    "HEADERS",
    "MSG_TTL",
    "PRIORITIZED",
    "PRIORITY_GROUPS",
    "STREAM_FIELDS",
    "Feature",
    "check_fields",
    "check_headers",
    "header_feature",
    "hosted_by",
    "not_applied",
    "require",
    "unsupported",
)


@dataclass(frozen=True, slots=True)
class Feature:
    """A server feature and the first nats-server version that has it."""

    name: str
    since: Version

    @property
    def since_text(self) -> str:
        """The first version, as ``"2.12.0"``."""
        return version_text(self.since)


# ------------------------------------------------------------------- the features

MSG_TTL: Final = Feature("per-message TTL (Nats-TTL)", (2, 11, 0))
DELETE_MARKERS: Final = Feature("subject delete markers (subject_delete_marker_ttl)", (2, 11, 0))
EXPECTED_OTHER_SUBJECT: Final = Feature(
    "an expected last sequence of another subject (Nats-Expected-Last-Subject-Sequence-Subject)",
    (2, 11, 0),
)
CONSUMER_PAUSE: Final = Feature("consumer pause", (2, 11, 0))
PRIORITY_GROUPS: Final = Feature("consumer priority groups", (2, 11, 0))
BATCH_DIRECT_GET: Final = Feature("batched direct get (reading Object store objects)", (2, 11, 0))
ATOMIC_BATCH: Final = Feature("atomic batch publish", (2, 12, 0))
COUNTERS: Final = Feature("message counters (allow_msg_counter, Nats-Incr)", (2, 12, 0))
SCHEDULES: Final = Feature("message schedules (allow_msg_schedules, Nats-Schedule)", (2, 12, 0))
PRIORITIZED: Final = Feature("the 'prioritized' priority policy", (2, 12, 0))
PERSIST_MODE: Final = Feature("stream persist modes (persist_mode)", (2, 12, 0))
FAST_BATCH: Final = Feature("fast batch publish (allow_batched)", (2, 14, 0))
RECURRING_SCHEDULES: Final = Feature(
    "recurring message schedules (Nats-Schedule other than '@at ...')", (2, 14, 0)
)
SCHEDULE_SAMPLING: Final = Feature("scheduled subject sampling (Nats-Schedule-Source)", (2, 14, 0))
SCHEDULE_ROLLUP: Final = Feature(
    "a rollup on a schedule's produced messages (Nats-Schedule-Rollup)", (2, 14, 0)
)
CONSUMER_RESET: Final = Feature("consumer reset", (2, 14, 0))

STREAM_FIELDS: Final[Mapping[str, Feature]] = {
    "allow_msg_ttl": MSG_TTL,
    "subject_delete_marker_ttl": DELETE_MARKERS,
    "allow_atomic": ATOMIC_BATCH,
    "allow_msg_counter": COUNTERS,
    "allow_msg_schedules": SCHEDULES,
    "persist_mode": PERSIST_MODE,
    "allow_batched": FAST_BATCH,
}
"""Stream config fields that need a server feature (older servers drop them)."""

CONSUMER_FIELDS: Final[Mapping[str, Feature]] = {
    "pause_until": CONSUMER_PAUSE,
    "priority_groups": PRIORITY_GROUPS,
    "priority_policy": PRIORITY_GROUPS,
    "priority_timeout": PRIORITY_GROUPS,
}
"""Consumer config fields that need a server feature (older servers drop them)."""

HEADERS: Final[Mapping[str, Feature]] = {
    "nats-ttl": MSG_TTL,
    "nats-expected-last-subject-sequence-subject": EXPECTED_OTHER_SUBJECT,
    "nats-incr": COUNTERS,
    "nats-schedule": SCHEDULES,
    "nats-schedule-target": SCHEDULES,
    "nats-schedule-ttl": SCHEDULES,
    "nats-schedule-rollup": SCHEDULE_ROLLUP,  # ADR-51 revision 4, not in 2.12
    "nats-schedule-source": SCHEDULE_SAMPLING,
    "nats-schedule-time-zone": RECURRING_SCHEDULES,
}
"""Server headers (lower case) of a publish that need a feature (older servers ignore them)."""

_ONE_SHOT_SCHEDULE: Final = "@at "
_METADATA_SINCE: Final[Version] = (2, 11, 0)  # servers note their version in metadata


def header_feature(name: str, value: str) -> Feature | None:
    """The feature a server header needs; some values need a later one than the name."""
    lowered = name.lower()
    if lowered == "nats-schedule" and not value.startswith(_ONE_SHOT_SCHEDULE):
        return RECURRING_SCHEDULES
    return HEADERS.get(lowered)


def _field_feature(table: Mapping[str, Feature], name: str, value: Any) -> Feature | None:
    """The feature a config field set to ``value`` needs (None when not set)."""
    if value in (None, False, 0, "", [], {}) or is_omitted_default(name, value):
        return None  # not set, or set to what every server does anyway
    if name == "priority_policy" and value == "prioritized":
        return PRIORITIZED
    return table.get(name)


# ------------------------------------------------------------------- the checks


def unsupported(
    feature: Feature,
    what: str,
    server: ConnectedServer | str | None,
    *,
    subject: str = "",
    may_be_stored: bool = False,
    after: str = "nothing was sent",
) -> FeatureUnsupported:
    """The error for ``what`` asking for ``feature`` of a server that lacks it."""
    version = server.version_text if isinstance(server, ConnectedServer) else server
    have = f"the server is nats-server {version}" if version else "an older server took it"
    return FeatureUnsupported(
        f"{what}: {feature.name} needs nats-server {feature.since_text} or later, and "
        f"{have}; {after}",
        feature=feature.name,
        server_version=version,
        since=feature.since_text,
        subject=subject,
        may_be_stored=may_be_stored,
    )


def require(nc: Client, feature: Feature, what: str, *, subject: str = "") -> None:
    """Raise unless the server ``nc`` is connected to has ``feature``.

    Raises:
        FeatureUnsupported: Its version is older than the feature's (an unknown
            version passes).
    """
    server = connected_server(nc)
    if not server.has(feature.since):
        raise unsupported(feature, what, server, subject=subject)


def check_headers(nc: Client, headers: Mapping[str, str], what: str, subject: str) -> None:
    """Raise if a server header of a publish needs a feature the server lacks.

    Raises:
        FeatureUnsupported: The first such header's feature.
    """
    server = connected_server(nc)
    for name, value in headers.items():
        feature = header_feature(name, value)
        if feature is not None and not server.has(feature.since):
            raise unsupported(feature, f"{what} (header {name})", server, subject=subject)


def check_fields(
    nc: Client, table: Mapping[str, Feature], config: Mapping[str, Any], what: str
) -> None:
    """Raise if a field set in ``config`` (not empty) needs a feature the server lacks.

    Raises:
        FeatureUnsupported: The first such field's feature.
    """
    server = connected_server(nc)
    for name, value in config.items():
        feature = _field_feature(table, name, value)
        if feature is not None and not server.has(feature.since):
            raise unsupported(feature, f"{what} ({name})", server, after="nothing was created")


def hosted_by(nc: Client, config: Mapping[str, Any]) -> str | None:
    """The version of the server hosting a stream or consumer of this config, if known.

    nats-server 2.11+ notes it in the config's ``_nats.ver`` metadata. Without it, the
    host is older than 2.11: the connected server if that is so old too (None, for
    unknown, if not: an older server behind a newer one, such as a leaf node's hub).
    """
    metadata = config.get("metadata")
    if isinstance(metadata, Mapping):
        version = metadata.get("_nats.ver")
        if isinstance(version, str) and version:
            return version
    server = connected_server(nc)
    if server.version is not None and not server.has(_METADATA_SINCE):
        return server.version_text
    return None


_DURATIONS: Final = frozenset(
    {
        "ack_wait",
        "backoff",
        "duplicate_window",
        "idle_heartbeat",
        "inactive_threshold",
        "max_age",
        "max_expires",
        "subject_delete_marker_ttl",
    }
)
"""Config fields the server keeps in nanoseconds (a list of them for ``backoff``)."""


def _shown(name: str, value: Any) -> str:
    """A config value for an error message: durations in seconds, as they were given."""
    if name in _DURATIONS:
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{value / 1e9:g}s"
        if isinstance(value, list) and all(isinstance(v, int) for v in value):
            return "[" + ", ".join(f"{v / 1e9:g}s" for v in value) + "]"
    return repr(value)


def not_applied(
    what: str,
    table: Mapping[str, Feature],
    wanted: Mapping[str, Any],
    current: Mapping[str, Any],
    fields: Iterable[str],
    version: str | None,
) -> ConfigNotApplied | FeatureUnsupported:
    """The error for a stream or consumer whose server holds ``fields`` of ``wanted`` otherwise.

    ``current`` is the config the server answered with, hosted by nats-server
    ``version`` (None: unknown, older than 2.11). A field whose feature that version
    lacks makes it :class:`FeatureUnsupported`, any other :class:`ConfigNotApplied`.
    """
    changed = tuple(fields)
    parsed = parse_version(version)
    values = "; ".join(
        f"{name}: asked {_shown(name, wanted.get(name))}, "
        f"the server has {_shown(name, current.get(name))}"
        for name in changed
    )
    for name in changed:
        feature = _field_feature(table, name, wanted.get(name))
        if feature is not None and (parsed is None or parsed < feature.since):
            return unsupported(
                feature,
                f"{what} ({name})",
                version,
                after=f"the server took the config without it ({values})",
            )
    server = f"nats-server {version}" if version else "a server older than 2.11"
    hint = ""
    if "ack_wait" in changed and wanted.get("backoff"):
        hint = " (with a backoff, the server takes its first delay as ack_wait: leave ack_wait out)"
    return ConfigNotApplied(
        f"{what}: the server ({server}) took the config but holds other values than "
        f"asked: {values}{hint}",
        fields=changed,
        server_version=version,
    )
