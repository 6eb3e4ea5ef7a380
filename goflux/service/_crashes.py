"""The supervisor's book of crashes: what each dead worker was handling, counted per message.

The supervisor makes a private directory; each worker keeps its in-flight file there
(:func:`in_flight_path`, found through the environment variable
:data:`CRASH_DIR_ENV`), and the supervisor writes the crash record beside them.
When a worker dies on its own, :meth:`CrashBook.died` reads what its slots held, adds
one crash to each of those messages and writes the record before the worker is
restarted, so that every worker recognises them on redelivery
(:mod:`goflux._compose.poison`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile

from goflux._compose.crashes import RECORD_NAME, CrashEntry, CrashRecord, write_crash_record
from goflux._compose.inflight import InFlight, read_in_flight
from goflux._compose.poison import PoisonGuard

__all__ = ("CRASH_DIR_ENV", "MAX_MESSAGES", "CrashBook", "in_flight_path", "worker_guard")

logger = logging.getLogger("goflux.run")

CRASH_DIR_ENV = "GOFLUX_CRASH_DIR"
"""The environment variable that tells a worker where its in-flight file goes."""
MAX_MESSAGES = 10_000
"""Messages the record keeps; the one whose last crash is oldest goes first."""


def in_flight_path(directory: str, worker: int) -> str:
    """Where worker ``worker`` keeps its in-flight slots."""
    return os.path.join(directory, f"worker-{worker}.inflight")


def worker_guard(worker: int) -> PoisonGuard | None:
    """The guard of worker ``worker``, when its supervisor keeps a crash record.

    None without one (not under a supervisor, or quarantine is off), or when its
    in-flight file cannot be made (logged: the worker runs, unguarded). The file stays
    mapped until the process exits.
    """
    directory = os.environ.get(CRASH_DIR_ENV)
    if not directory:
        return None
    try:
        in_flight = InFlight(in_flight_path(directory, worker))
    except OSError as exc:
        logger.warning("poison messages are not tracked in this worker: %s", exc)
        return None
    return PoisonGuard(in_flight, CrashRecord(os.path.join(directory, RECORD_NAME)))


class CrashBook:
    """The crash record of one supervisor, in a directory of its own (made here).

    Args:
        quarantine_after: Crashes after which a message is quarantined (written into
            the record for the workers).

    Raises:
        OSError: The directory cannot be made.
    """

    def __init__(self, quarantine_after: int) -> None:
        self.directory = tempfile.mkdtemp(prefix="goflux-run-")
        self.quarantine_after = quarantine_after
        self._messages: dict[str, CrashEntry] = {}

    def died(self, worker: int, how: str) -> list[str]:
        """Count a crash for each message worker ``worker`` was handling when it died.

        ``how`` says how it died (``"worker 1 (pid 42) was killed by SIGKILL"``).
        Returns one phrase per message, naming it and its crashes so far (empty when
        it was handling none); the record is written before this returns (a failure
        to write it is logged).
        """
        path = in_flight_path(self.directory, worker)
        held = read_in_flight(path)
        # Read once: the worker's next process makes a file of its own when it starts,
        # and one that dies before that must not be blamed for what this one held.
        with contextlib.suppress(OSError):
            os.unlink(path)
        if not held:
            return []
        # Only JetStream messages are tracked (the only ones redelivered): its parser
        # names them, and nats-py is installed since a worker used it.
        from goflux.transports.jetstream._poison import crash_key  # noqa: PLC0415

        phrases = []
        for text in held:
            name = crash_key(text)
            if name is None:
                phrases.append(repr(text))
                continue
            before = self._messages.pop(name.key, None)
            entry = CrashEntry((before.crashes if before else 0) + 1, how)
            self._messages[name.key] = entry  # (re)inserted last: the newest crash
            if entry.crashes >= self.quarantine_after:
                outlook = "it is quarantined on redelivery"
            else:
                outlook = f"quarantined at {self.quarantine_after}"
            phrases.append(f"{name.description} (crash {entry.crashes}: {outlook})")
        while len(self._messages) > MAX_MESSAGES:
            del self._messages[next(iter(self._messages))]
        try:
            write_crash_record(
                os.path.join(self.directory, RECORD_NAME), self.quarantine_after, self._messages
            )
        except OSError as exc:
            logger.error("cannot write the crash record in %s: %s", self.directory, exc)
        return phrases

    def close(self) -> None:
        """Remove the directory and what it holds."""
        shutil.rmtree(self.directory, ignore_errors=True)
