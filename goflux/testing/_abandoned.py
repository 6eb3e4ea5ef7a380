"""Temporary directories owned by a live process, and sweeping those whose owner died.

A server for tests (nats-server, a Spark JVM) keeps its files in a temporary
directory. Its owner takes the directory with :func:`claim` (an exclusive ``flock`` on
a lock file in it, held for as long as the owner lives; the kernel drops it when the
owner dies, however it dies) and names the processes it started there with
:func:`record`. A killed owner cannot stop its servers: :func:`sweep` (called before
the next start) kills the processes of every directory whose lock can be taken, and
removes it.

The lock file appears already locked: it is made and locked under a name of the
owner's own, then linked to :data:`LOCK_FILE`. So a lock file nobody holds is always
one whose owner has died, never one on its way to being locked, however long the
owner takes between making and locking it.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

if sys.platform != "win32":
    import fcntl

__all__ = ("LOCK_FILE", "claim", "record", "sweep")

LOCK_FILE = ".goflux-lock"  # the file whose flock marks a live owner
_PIDS_FILE = ".goflux-server"  # the processes, one pid a line


def claim(directory: str | os.PathLike[str]) -> int | None:
    """Lock ``directory`` for this process; return the descriptor to close on release.

    The lock file is locked before it appears under its name (see the module's
    docstring). Where ``directory`` already has one, this waits until its holder has
    let go. None where there is no ``flock`` (Windows): nothing is swept there either.

    Raises:
        OSError: The lock file could not be made or locked.
    """
    if sys.platform == "win32":  # pragma: no cover - no flock: no sweeping either
        return None
    lock = Path(directory) / LOCK_FILE
    staging = lock.with_name(f"{LOCK_FILE}.{os.getpid()}.{time.monotonic_ns()}")
    fd = _lock(staging, wait=True)  # a name nobody else uses: taken at once
    assert fd is not None  # (None only where there is no flock, or where not waiting)
    try:
        os.link(staging, lock)  # the lock file appears, locked
    except OSError:
        # Claimed before (wait for its holder), or no hard links here: lock in place.
        os.close(fd)
        return _lock(lock, wait=True)
    except BaseException:
        os.close(fd)
        raise
    finally:
        staging.unlink(missing_ok=True)
    return fd


def record(directory: str | os.PathLike[str], pids: Iterable[int]) -> None:
    """Name the processes a sweep kills if this directory's owner dies."""
    (Path(directory) / _PIDS_FILE).write_text("".join(f"{pid}\n" for pid in pids))


def sweep(prefix: str, program: bytes) -> None:
    """Kill the processes of abandoned ``prefix*`` temporary directories; remove them.

    A directory is abandoned when its lock file exists and nobody holds its lock (a
    lock file appears already locked: see :func:`claim`). Its recorded processes and
    any other process naming it are killed, each only if its command line names
    ``program`` and the directory, so that a pid the system has since given to another
    process is spared.
    """
    for path in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        try:
            fd = _lock(path / LOCK_FILE, wait=False, create=False)
        except OSError:  # no lock file (not claimed, or not yet), or gone meanwhile
            continue
        if fd is None:
            continue  # a live owner holds it
        try:
            # The recorded pids, and any other process naming the directory: one the
            # owner started but was killed before recording (a Spark worker, say).
            named = str(path).encode()
            for pid in {*_recorded(path), *_naming(named)}:
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if program in cmdline and named in cmdline:
                    _kill_and_wait(pid)
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)


def _recorded(path: Path) -> list[int]:
    try:
        text = (path / _PIDS_FILE).read_text()
    except OSError:
        return []
    return [int(word) for word in text.split() if word.isdigit()]


def _naming(directory: bytes) -> list[int]:
    """The processes whose command line names ``directory`` (none without ``/proc``)."""
    found = []
    own = os.getpid()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if directory in (entry / "cmdline").read_bytes() and int(entry.name) != own:
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def _lock(path: Path, *, wait: bool, create: bool = True) -> int | None:
    """Open (or make) and flock ``path``; return the descriptor, or None if another holds it.

    Raises:
        OSError: ``path`` cannot be opened (or, not to be made, does not exist).
    """
    if sys.platform == "win32":  # pragma: no cover - no flock: no sweeping either
        return None
    fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _kill_and_wait(pid: int, timeout: float = 5.0) -> None:
    """SIGKILL ``pid`` (not our child) and wait until it has exited, up to ``timeout``.

    The kill is asynchronous; a directory is only removed once its processes are gone.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # no pidfd support: kill without waiting
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return
    try:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        select.select([pidfd], [], [], timeout)  # readable once the process has exited
    finally:
        os.close(pidfd)
