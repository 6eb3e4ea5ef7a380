"""The supervisor's book of crashes: what each dead worker was handling, counted per message.

The supervisor makes a private directory; each worker keeps its in-flight file there
(:func:`in_flight_path`, found through the environment variable
:data:`CRASH_DIR_ENV`), and the supervisor writes the crash record beside them.
When a worker dies on its own, :meth:`CrashBook.died` reads what its slots held, adds
one crash to each of those messages and writes the record before the worker is
restarted, so that every worker recognises them on redelivery
(:mod:`goflux._compose.poison`).

A supervisor killed outright (SIGKILL, out of memory) cannot remove its directory.
The supervisor and each worker hold a shared lock on the directory's lock file while
they run; the next supervisor to start removes every directory of a previous one that
nobody holds any more (the kernel lets go of a dead process's locks).
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import stat
import sys
import tempfile
import time

from goflux._compose.crashes import RECORD_NAME, CrashEntry, CrashRecord, write_crash_record
from goflux._compose.inflight import InFlight, read_in_flight
from goflux._compose.poison import PoisonGuard

if sys.platform != "win32":
    import fcntl

__all__ = (
    "CRASH_DIR_ENV",
    "MAX_MESSAGES",
    "CrashBook",
    "in_flight_path",
    "remove_abandoned",
    "worker_guard",
)

logger = logging.getLogger("goflux.run")

_PREFIX = "goflux-run-"  # a supervisor's directory, made by tempfile.mkdtemp
_LOCK_NAME = "supervisor.lock"  # held (shared) while its supervisor or a worker runs
_MAKING_AGE = 60.0  # seconds after which a lock file without its name is abandoned

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
        _hold_open(os.path.join(directory, _LOCK_NAME))  # (for as long as this process runs)
        in_flight = InFlight(in_flight_path(directory, worker))
    except OSError as exc:
        logger.warning("poison messages are not tracked in this worker: %s", exc)
        return None
    return PoisonGuard(in_flight, CrashRecord(os.path.join(directory, RECORD_NAME)))


class CrashBook:
    """The crash record of one supervisor, in a directory of its own (made here).

    Before it makes its own, it removes the directories that supervisors killed
    outright left behind (see the module).

    Args:
        quarantine_after: Crashes after which a message is quarantined (written into
            the record for the workers).
        parent: Where the directory goes (default: the system's temporary directory).

    Raises:
        OSError: The directory cannot be made.
    """

    def __init__(self, quarantine_after: int, *, parent: str | None = None) -> None:
        parent = tempfile.gettempdir() if parent is None else parent
        remove_abandoned(parent)
        self.directory = directory = tempfile.mkdtemp(prefix=_PREFIX, dir=parent)
        # Locked before it has its name: a directory whose lock file is named is never
        # taken for abandoned while it is being made.
        making = os.path.join(directory, _LOCK_NAME + ".new")
        try:
            self._lock = _hold_open(making, create=True)
        except OSError:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        try:
            os.rename(making, os.path.join(directory, _LOCK_NAME))
        except OSError:
            if self._lock is not None:
                os.close(self._lock)
            shutil.rmtree(directory, ignore_errors=True)
            raise
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
        """Remove the directory and what it holds; calling it again does nothing."""
        shutil.rmtree(self.directory, ignore_errors=True)
        lock, self._lock = self._lock, None
        if lock is not None:
            os.close(lock)


def remove_abandoned(parent: str) -> list[str]:
    """Remove the directories in ``parent`` of supervisors and workers no longer running.

    Only this user's directories whose lock file no process holds are removed (one
    whose lock file has no name yet, only when it is older than a minute: its
    supervisor was killed while making it); a failure is logged, never raised.
    Returns the directories removed.
    """
    removed: list[str] = []
    if sys.platform == "win32":  # pragma: no cover - no flock: nothing is swept
        return removed
    for directory in glob.glob(os.path.join(glob.escape(parent), _PREFIX + "*")):
        fd = _lock_of_abandoned(directory)
        if fd is None:
            continue
        try:
            if os.fstat(fd).st_nlink == 0:
                continue  # another supervisor removed it while this one waited for it
            shutil.rmtree(directory)
        except FileNotFoundError:
            continue  # (the same, found by the path)
        except OSError as exc:
            logger.warning("cannot remove %s, left by a supervisor killed: %s", directory, exc)
        else:
            removed.append(directory)
            logger.info("removed %s, left by a supervisor that was killed", directory)
        finally:
            os.close(fd)
    return removed


def _lock_of_abandoned(directory: str) -> int | None:
    """A descriptor of ``directory``'s lock file, held exclusively; or None.

    None unless ``directory`` is a supervisor's of this user that no process holds.
    """
    try:
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return None
        path = os.path.join(directory, _LOCK_NAME)
        if not os.path.lexists(path):  # (its supervisor died making it, or is making it)
            path += ".new"
            if time.time() - os.lstat(path).st_mtime < _MAKING_AGE:
                return None
        # (Without waiting: a FIFO of that name must not block.)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None  # not a supervisor's, or not this user's
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
    except OSError:
        pass  # its supervisor or a worker of it still runs
    os.close(fd)
    return None


def _hold_open(path: str, *, create: bool = False) -> int | None:
    """Open (or with ``create``, make) ``path`` and hold a shared lock on it.

    Returns the descriptor, which the caller closes (or keeps until it exits); None
    where there is no ``flock`` (Windows).

    Raises:
        OSError: It cannot be opened, or it is being removed (held exclusively).
    """
    if sys.platform == "win32":  # pragma: no cover - no flock: nothing is swept
        return None
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    flags |= os.O_CREAT if create else 0
    fd = os.open(path, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd
