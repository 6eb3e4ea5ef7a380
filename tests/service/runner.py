"""Run ``goflux run`` as a user would, in its own process, and read its log lines."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class GofluxRun:
    """A ``goflux run`` process whose stderr lines are collected as they come.

    ``wait_for`` blocks until a line matches (the process's own signal that it got
    somewhere), so no test sleeps for readiness.
    """

    def __init__(self, *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> None:
        self.args = args
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "goflux", "run", *args],
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, pattern: str, *, after: int = 0, timeout: float = 30) -> re.Match[str]:
        """The first line (from index ``after``) matching ``pattern``; fail after ``timeout``."""
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
                        f"no line matching {pattern!r} within {timeout}s; output:\n" + self.output
                    )
                self._changed.wait(left)

    def count(self, pattern: str) -> int:
        """How many lines so far match ``pattern``."""
        regex = re.compile(pattern)
        with self._changed:
            return sum(1 for line in self.lines if regex.search(line))

    @property
    def output(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def signal(self, sig: signal.Signals = signal.SIGTERM) -> None:
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
        # A process the service forked may still hold the pipe: then the reader is
        # blocked in read(), and closing under it would block too.
        if self.process.stdout is not None and not self._reader.is_alive():
            self.process.stdout.close()

    def __enter__(self) -> GofluxRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def health_url(self) -> str:
        match = self.wait_for(r"health probes on (http://[\d.]+:\d+)")
        return match.group(1)
