"""The child processes of the test servers, and how long their start-up may take.

:class:`LoggedProcess` is what :class:`~goflux.testing.NatsServer` and the Spark
servers (:class:`~goflux.testing.SparkConnectServer`,
:class:`~goflux.testing.SparkStandaloneCluster`) share: the process, the thread that
reads its log (its last lines kept in memory, optionally every line in a file), waiting
for what the log says, and stopping it. Each server adds its own reading of the lines.

:func:`startup_timeout` decides how long a start-up may take: the caller's number; else
an environment variable's; else a default that grows with the machine's load
(:func:`load_factor`), so that an overloaded machine is not mistaken for a broken server.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

__all__ = (
    "NATS_STARTUP_TIMEOUT",
    "SPARK_STARTUP_TIMEOUT",
    "LoggedProcess",
    "load_factor",
    "startup_timeout",
)

#: Seconds a Spark Connect server, or a whole standalone cluster, may take to report
#: readiness, for every SparkConnectServer and SparkStandaloneCluster not given
#: ``startup_timeout``.
SPARK_STARTUP_TIMEOUT = "GOFLUX_SPARK_STARTUP_TIMEOUT"
#: Seconds a nats-server may take to become ready, for every NatsServer not given
#: ``startup_timeout``.
NATS_STARTUP_TIMEOUT = "GOFLUX_NATS_STARTUP_TIMEOUT"

T = TypeVar("T")


def load_factor() -> float:
    """How overloaded this machine is now: ``max(1, load average / usable CPUs)``.

    The load average is the last minute's; 1.0 where there is none (Windows).
    """
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 1.0
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        cpus = os.cpu_count() or 1
    return max(1.0, load / max(cpus, 1))


def startup_timeout(given: float | None, default: float, variable: str) -> float:
    """The seconds a start-up may take.

    ``given`` if not None; else the environment variable ``variable`` (seconds) if
    set; else ``default`` times :func:`load_factor`, so that 60 s on an idle machine
    are 240 s on one running four times as many processes as it has CPUs.

    Raises:
        ValueError: ``given`` or the variable is not a positive number of seconds.
    """
    if given is None:
        setting = os.environ.get(variable, "").strip()
        if not setting:
            return default * load_factor()
        try:
            given = float(setting)
        except ValueError:
            raise ValueError(f"${variable} must be a number of seconds, got {setting!r}") from None
        if not given > 0:
            raise ValueError(f"${variable} must be a positive number of seconds, got {setting!r}")
        return given
    if not given > 0:
        raise ValueError(f"startup_timeout must be a positive number of seconds, got {given!r}")
    return float(given)


class LoggedProcess:
    """A child process and the thread that reads its log.

    The reader keeps the last ``keep_lines`` lines in :attr:`lines` (and every line in
    ``log_path``, if given), calls :meth:`on_line` for each, and notifies
    :attr:`changed` after each line and when the log ends. The child shares our
    process group: Ctrl-C in a terminal or a CI runner's group-wide SIGTERM stops it
    together with its owner.

    Args:
        name: Names the process in errors and its reader thread (``<name>-log``).
        argv: The command line.
        log_stdout: Read stdout and stderr as one log; else only stderr (stdout is
            discarded).
        cwd: The working directory; default: ours.
        env: The whole environment; default: ours.
        log_path: A file every log line is appended to.
        keep_lines: How many of the last lines :attr:`lines` keeps.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_stdout: bool = False,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        keep_lines: int = 200,
    ) -> None:
        self.name = name
        self.lines: collections.deque[str] = collections.deque(maxlen=keep_lines)
        self.log_path = log_path
        self.changed = threading.Condition()
        self._exited = False
        self.popen = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if log_stdout else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if log_stdout else subprocess.PIPE,
            text=True,
            errors="replace",
        )
        self._reader = threading.Thread(target=self._read, name=f"{name}-log", daemon=True)
        self._reader.start()

    @property
    def exited(self) -> bool:
        """True once the log has ended (the process closed it, normally by exiting)."""
        return self._exited

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self.popen.poll() is None

    def on_line(self, line: str) -> None:
        """Note what a log line (without its newline) says; subclasses override this.

        Runs in the reader thread while it holds :attr:`changed`.
        """

    def _read(self) -> None:
        stream = self.popen.stdout if self.popen.stdout is not None else self.popen.stderr
        assert stream is not None
        try:
            with contextlib.ExitStack() as stack:
                log = None
                if self.log_path is not None:
                    log = stack.enter_context(self.log_path.open("a", encoding="utf-8"))
                for raw in stream:
                    if log is not None:
                        log.write(raw)
                        log.flush()
                    line = raw.rstrip("\n")
                    with self.changed:
                        self.lines.append(line)
                        self.on_line(line)
                        self.changed.notify_all()
        finally:
            stream.close()
            with self.changed:
                self._exited = True
                self.changed.notify_all()

    def wait_until(self, predicate: Callable[[], T], timeout: float) -> T:
        """Block until ``predicate()`` is true, the log ends, or ``timeout`` seconds pass.

        ``predicate`` runs while holding :attr:`changed`, after each log line. Returns
        its last value: false if the log ended (see :attr:`exited`) or time ran out.
        """
        deadline = time.monotonic() + timeout
        with self.changed:
            while not (found := predicate()) and not self._exited:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(left)
            return found

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the log."""
        return "\n".join(list(self.lines)[-lines:])

    def terminate(self, *, kill: bool = False, timeout: float = 10.0) -> None:
        """Stop the process and wait for the end of its log.

        Sends SIGTERM (SIGKILL with ``kill``), and SIGKILL if it still runs after
        ``timeout`` seconds.
        """
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._reader.join(timeout)
