"""Temporary directories owned by a live process, and sweeping those whose owner died.

A server for tests (nats-server, a Spark JVM) keeps its files in a temporary
directory. Its owner takes the directory with :func:`claim` (an exclusive ``flock`` on
a lock file in it, held for as long as the owner lives; the kernel drops it when the
owner dies, however it dies) and names the processes it started there with
:func:`record`. A killed owner cannot stop its servers: :func:`sweep` (called before
the next start) kills the processes of every directory whose lock can be taken, and
removes it.
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
# Seconds: a lock file younger than this may still be on its way to being locked (made,
# not yet flocked). Its own age, not the directory's: the servers an owner started go
# on writing in the directory after the owner died, which keeps the directory young.
_MIN_AGE = 5.0


def claim(directory: str | os.PathLike[str]) -> int | None:
    """Lock ``directory`` for this process; return the descriptor to close on release.

    None where there is no ``flock`` (Windows): nothing is swept there either.
    """
    return _lock(Path(directory) / LOCK_FILE, wait=True)


def record(directory: str | os.PathLike[str], pids: Iterable[int]) -> None:
    """Name the processes a sweep kills if this directory's owner dies."""
    (Path(directory) / _PIDS_FILE).write_text("".join(f"{pid}\n" for pid in pids))


def sweep(prefix: str, program: bytes) -> None:
    """Kill the processes of abandoned ``prefix*`` temporary directories; remove them.

    A directory is abandoned when nobody holds its lock and its lock file is not brand
    new (it may be on its way to being locked; the directory's own age says nothing,
    as the orphaned servers go on writing there). Its recorded processes and any other
    process naming it are killed, each only if its command line names ``program`` and
    the directory, so that a pid the system has since given to another process is
    spared.
    """
    now = time.time()
    for path in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        lock_path = path / LOCK_FILE
        try:
            if now - lock_path.stat().st_mtime < _MIN_AGE:
                continue
            fd = _lock(lock_path, wait=False)
        except OSError:  # no lock file (not a claimed directory), or gone meanwhile
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


def _lock(path: Path, *, wait: bool) -> int | None:
    """Open and flock ``path``; return the descriptor, or None if another holds it."""
    if sys.platform == "win32":  # pragma: no cover - no flock: no sweeping either
        return None
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
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
