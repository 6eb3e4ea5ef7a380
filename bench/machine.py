"""Machine notes for the report: what ran where, and how loaded the machine was."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import shutil
import subprocess
from pathlib import Path

PACKAGES = (
    "nats-py",
    "pydantic",
    "opentelemetry-sdk",
    "faststream",
    "pyspark",
    "httpx",
    "starlette",
    "uvicorn",
    "fastapi",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB RAM"
    except OSError:
        pass
    return "RAM unknown"


def _versions() -> str:
    found = []
    for name in PACKAGES:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    server = shutil.which("nats-server")
    if server:
        out = subprocess.run([server, "--version"], capture_output=True, text=True, check=False)
        found.append(out.stdout.strip() or "nats-server")
    return ", ".join(found)


def _git(where: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, check=False, cwd=where)
    except OSError:  # no git
        return None
    return out.stdout if out.returncode == 0 else None


def commit(where: Path = Path(__file__).parent) -> str:
    """The commit measured (``git rev-parse HEAD``) and whether the tree differs from it.

    A dirty tree lists the changed paths (``git status --porcelain``, untracked files
    included): the numbers describe that code, not the commit's.
    """
    head = (_git(where, "rev-parse", "HEAD") or "").strip()
    if not head:
        return "commit unknown (not a git checkout)"
    status = _git(where, "status", "--porcelain")
    if status is None:
        return f"commit {head}, working tree state unknown"
    changed = [line[3:] for line in status.splitlines() if line.strip()]
    if not changed:
        return f"commit {head}, working tree clean"
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return f"commit {head}, working tree DIRTY ({len(changed)} changed: {shown})"


def notes(rounds: int, smoke: bool) -> str:
    load = os.getloadavg()
    mode = "smoke run (tiny sizes)" if smoke else "full run"
    return "\n".join(
        [
            "## Machine",
            "",
            f"- {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {mode}, "
            f"{rounds} interleaved round(s) per table",
            f"- measured: {commit()}",
            f"- {os.cpu_count()} cores ({_cpu_model()}), {_memory()}, "
            f"{platform.system()} {platform.release()}",
            f"- load average at start: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
            "(1 / 5 / 15 min)",
            f"- Python {platform.python_version()}; {_versions()}",
            "- client and nats-server share the machine (loopback, file storage)",
        ]
    )


def finish(elapsed: float) -> str:
    load = os.getloadavg()
    return f"- load average at the end: {load[0]:.2f}; the run took {elapsed:.0f} s"
