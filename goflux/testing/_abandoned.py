"""Temporary directories owned by a live process, and sweeping those whose owner died.

A server for tests (nats-server, a Spark JVM) keeps its files in a temporary
directory. Its owner takes the directory with :func:`claim` (an exclusive ``flock`` on
a lock file in it, held for as long as the owner lives; the kernel drops it when the
owner dies, however it dies) and names the processes it started there with
:func:`record`. A killed owner cannot stop its servers: :func:`sweep` (called before
the next start) kills the processes of every directory whose lock can be taken, and
removes it.

The lock file appears already locked: it is made and locked under a name of the
owner's own (``LOCK_FILE.<pid>.<n>``), then linked (or, where the file system has no
hard links, renamed) to :data:`LOCK_FILE`. So a lock file nobody holds is always one
whose owner has died, never one on its way to being locked, however long the owner
takes between making and locking it. An owner killed before its lock file appeared
leaves only the staging file, which names its pid: the directory is swept once that
process is gone (no server was started there yet).
"""

from __future__ import annotations

import contextlib
import errno
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
    docstring). None where there is no ``flock`` (Windows): nothing is swept there
    either.

    Raises:
        FileExistsError: ``directory`` was claimed before (a fresh one is expected).
        OSError: The lock file could not be made or locked.
    """
    if sys.platform == "win32":  # pragma: no cover - no flock: no sweeping either
        return None
    lock = Path(directory) / LOCK_FILE
    staging = lock.with_name(f"{LOCK_FILE}.{os.getpid()}.{time.monotonic_ns()}")
    fd = _lock(staging, wait=True)  # a name nobody else uses: taken at once
    assert fd is not None  # (None only where there is no flock, or where not waiting)
    try:
        try:
            os.link(staging, lock)  # the lock file appears, locked
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, "claimed already", str(lock)) from None
        except OSError:  # no hard links here: a rename keeps the file, and its lock
            if lock.exists():
                raise FileExistsError(errno.EEXIST, "claimed already", str(lock)) from None
            os.rename(staging, lock)
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
            if _died_claiming(path):
                shutil.rmtree(path, ignore_errors=True)
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


def _died_claiming(path: Path) -> bool:
    """Whether ``path``'s owner died making its lock file: only its staging file is left.

    (The owner started nothing there yet: servers start once the claim is made.)
    """
    if (path / LOCK_FILE).exists():
        return False  # made meanwhile: the owner lives on, or the next sweep sees it
    for staging in path.glob(f"{LOCK_FILE}.*"):
        pid = staging.name.removeprefix(f"{LOCK_FILE}.").partition(".")[0]
        if pid.isdigit() and not _alive(int(pid)):
            return True
    return False


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (another's, or a zombie, counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    return True


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
