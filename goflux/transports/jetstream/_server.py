"""The server behind a connection: its version and JetStream API level, read from its INFO.

Every server sends an INFO on connect: ``version`` always, ``api_lvl`` (the JetStream
API level of ADR-44) from nats-server 2.12 on. Older servers report their level only
in ``$JS.API.INFO``; ADR-44 fixes it by version (0 before 2.11, 1 for 2.11.x, 2 for
2.12.x), so it is taken from there without a round trip.

:func:`connected_server` answers from the INFO of the connection's latest
(re)connect, and reads it again only when that INFO changes: a reconnect to another
server (another version) is seen on the next call, and each call in between costs a
dictionary lookup and an identity check.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from nats.aio.client import Client

from goflux.transports._natspy import server_info

__all__ = (
    "UNKNOWN",
    "ConnectedServer",
    "Version",
    "connected_server",
    "parse_version",
    "version_text",
)

Version: TypeAlias = tuple[int, int, int]
"""A nats-server version as ``(major, minor, patch)``."""

_VERSION: Final = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
# ADR-44's table, for servers that do not report their API level in INFO.
_LEVELS: Final[tuple[tuple[Version, int], ...]] = (((2, 12, 0), 2), ((2, 11, 0), 1))


def version_text(version: Version) -> str:
    """``(2, 12, 0)`` as ``"2.12.0"``."""
    return ".".join(map(str, version))


def parse_version(text: object) -> Version | None:
    """The version ``text`` names (``"2.11.11"``, ``"2.12.0-RC.1"``), or None.

    A pre-release counts as its release: a 2.12.0 release candidate has 2.12's
    features.
    """
    if not isinstance(text, str):
        return None
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    major, minor, patch = (int(part) for part in match.groups())
    return (major, minor, patch)


@dataclass(frozen=True, slots=True)
class ConnectedServer:
    """What the server a connection is on told about itself.

    Attributes:
        version: Its version, None if it sent none that reads as one.
        version_text: Its version as it sent it (``"unknown"`` without one).
        api_level: Its JetStream API level (ADR-44), None where unknown.
        name: Its ``server_name``.
        jetstream: Whether it runs JetStream (for some account).
    """

    version: Version | None
    version_text: str
    api_level: int | None
    name: str
    jetstream: bool

    def has(self, since: Version) -> bool:
        """Whether it is version ``since`` or later (True when its version is unknown)."""
        return self.version is None or self.version >= since

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> ConnectedServer:
        """The facts of a server INFO."""
        text = info.get("version")
        version = parse_version(text)
        level = info.get("api_lvl")
        if not isinstance(level, int) or isinstance(level, bool):
            level = _level_of(version)
        return cls(
            version=version,
            version_text=text if isinstance(text, str) and text else "unknown",
            api_level=level,
            name=str(info.get("server_name") or info.get("server_id") or ""),
            jetstream=bool(info.get("jetstream")),
        )


UNKNOWN: Final = ConnectedServer(None, "unknown", None, "", False)
"""A server that sent no INFO yet."""


def _level_of(version: Version | None) -> int | None:
    if version is None:
        return None
    for since, level in _LEVELS:
        if version >= since:
            return level if version[:2] == since[:2] else None
    return 0


_SEEN: weakref.WeakKeyDictionary[Client, tuple[Mapping[str, Any], ConnectedServer]] = (
    weakref.WeakKeyDictionary()
)


def connected_server(nc: Client) -> ConnectedServer:
    """What the server ``nc`` is connected to (or was last) told about itself."""
    info = server_info(nc)
    seen = _SEEN.get(nc)
    if seen is not None and seen[0] is info:
        return seen[1]
    if not info:
        return UNKNOWN
    server = ConnectedServer.of(info)
    _SEEN[nc] = (info, server)
    return server
