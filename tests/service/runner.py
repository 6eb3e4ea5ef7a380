"""Run ``goflux run`` as a user would, in its own process, and read its log lines."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.processes import ROOT, ProcessLines

__all__ = ["ROOT", "GofluxRun"]


class GofluxRun(ProcessLines):
    """A ``goflux run ARGS`` process whose output lines are collected as they come."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> None:
        self.args = args
        super().__init__([sys.executable, "-m", "goflux", "run", *args], env=env, cwd=cwd)

    def health_url(self) -> str:
        """The health probes' URL, from the line that announces them."""
        match = self.wait_for(r"health probes on (http://[\d.]+:\d+)")
        return match.group(1)
