"""A child process whose output lines are collected as they come: :class:`ProcessLines`.

``wait_for`` blocks until a line matches (the process's own signal that it got
somewhere), so no test sleeps for readiness.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from goflux.testing._process import load_factor

ROOT = Path(__file__).resolve().parents[1]


def scaled(seconds: float) -> float:
    """``seconds`` times the machine's load factor: a child's time limit under load.

    A test marked spark gets its pytest timeout scaled the same way (tests/conftest.py),
    so a child's limit and its test's stay in step: the test still fails, with the
    child's output, when the child hangs.
    """
    return seconds * load_factor()


class ProcessLines:
    """``argv`` in its own process; its stdout and stderr lines (or stderr's only) collected.

    Args:
        argv: The command.
        env: Added to this process's environment.
        cwd: Where it runs (default: the repository).
        stderr_only: Collect stderr and drop stdout (an access log, say).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
        stderr_only: bool = False,
    ) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL if stderr_only else subprocess.PIPE,
            stderr=subprocess.PIPE if stderr_only else subprocess.STDOUT,
            text=True,
        )
        self._stream = self.process.stderr if stderr_only else self.process.stdout
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._stream is not None
        for line in self._stream:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(
        self, pattern: str | re.Pattern[str], *, after: int = 0, timeout: float = 30
    ) -> re.Match[str]:
        """The first line (from index ``after``) matching ``pattern``.

        Fails after ``timeout``, or as soon as the process ended without such a line.
        """
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines[after:]:
                    if match := regex.search(line):
                        return match
                left = deadline - time.monotonic()
                if left <= 0 or (not self._reader.is_alive() and self.process.poll() is not None):
                    raise AssertionError(
                        f"no line matching {regex.pattern!r} within {timeout}s; output:\n"
                        + self.output
                    )
                self._changed.wait(left)

    def count(self, pattern: str) -> int:
        """How many lines so far match ``pattern``."""
        regex = re.compile(pattern)
        with self._changed:
            return sum(1 for line in self.lines if regex.search(line))

    @property
    def output(self) -> str:
        """Every line so far."""
        with self._changed:
            return "\n".join(self.lines)

    def signal(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Send ``sig`` to the process."""
        self.process.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        """The exit status (waits for the output to be read too)."""
        code = self.process.wait(timeout)
        self._reader.join(timeout)
        return code

    def stop(self) -> None:
        """Kill it if still running (test clean-up)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._reader.join(10)
        # A process it forked may still hold the pipe: then the reader is blocked in
        # read(), and closing under it would block too.
        if self._stream is not None and not self._reader.is_alive():
            self._stream.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
