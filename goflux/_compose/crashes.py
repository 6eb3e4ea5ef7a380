"""The crash record: which messages were being handled when a worker process died.

The supervisor of ``goflux run --workers N`` writes it (:func:`write_crash_record`)
each time a worker dies holding messages (see :mod:`.inflight`); every worker reads
it (:class:`CrashRecord`) when a message is redelivered, since the redelivery may
reach a worker other than the one that died. A message is named by its transport's
key (for JetStream: stream, consumer and stream sequence). The file is JSON, replaced
whole (a new file renamed over the old one), so a reader never sees half of it::

    {"quarantine_after": 2,
     "messages": {"ORDERS payments 7": [1, "worker 1 (pid 4242) was killed by SIGKILL"]}}
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ("RECORD_NAME", "CrashEntry", "CrashRecord", "write_crash_record")

logger = logging.getLogger("goflux.run")

RECORD_NAME = "crashes.json"
"""The record's file name in the supervisor's directory."""


@dataclass(frozen=True, slots=True)
class CrashEntry:
    """One message's crashes.

    Attributes:
        crashes: Worker deaths while its handler ran.
        last: How the last of those workers died (``"worker 1 (pid 42) was killed by
            SIGKILL"``).
    """

    crashes: int
    last: str


def write_crash_record(
    path: str, quarantine_after: int, messages: Mapping[str, CrashEntry]
) -> None:
    """Replace the record at ``path`` at once (write a new file, rename it over).

    Raises:
        OSError: The file cannot be written.
    """
    body = {
        "quarantine_after": quarantine_after,
        "messages": {key: [entry.crashes, entry.last] for key, entry in messages.items()},
    }
    temporary = f"{path}.{os.getpid()}.new"
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(body, file, separators=(",", ":"))
    os.replace(temporary, path)


class CrashRecord:
    """A worker's view of the record at ``path``, read again only when the file changed.

    Args:
        path: Where the supervisor writes it (it need not exist yet).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._messages: dict[str, CrashEntry] = {}
        self._quarantine_after = 0

    @property
    def quarantine_after(self) -> int:
        """Crashes after which a message is quarantined (0: never; as last read)."""
        return self._quarantine_after

    def lookup(self, key: str) -> CrashEntry | None:
        """The crashes of the message ``key`` (None: it never was in flight at a crash).

        One ``stat`` call; the file is parsed again when it changed. A record that
        cannot be read counts as empty (logged).
        """
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return None
        seen = (info.st_ino, info.st_mtime_ns, info.st_size)
        if seen != self._seen:
            self._seen = seen
            self._load()
        return self._messages.get(key)

    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as file:
                body = json.load(file)
            messages = {
                str(key): CrashEntry(int(crashes), str(last))
                for key, (crashes, last) in body["messages"].items()
            }
            quarantine_after = int(body["quarantine_after"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.warning("the crash record %s cannot be read (%s): ignored", self.path, exc)
            messages, quarantine_after = {}, 0
        self._messages = messages
        self._quarantine_after = quarantine_after
