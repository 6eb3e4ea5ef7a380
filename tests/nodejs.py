"""Peers of another language: the Node.js scripts in tests/node (nats.js v2, built-ins).

``scripts/node-clients.sh`` (run by ``./scripts/check.sh``) installs their packages
into tests/node/node_modules from the lock file; the HTTP peers use Node's built-in
modules only (``packages=False``) and need no install.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

NODE_DIR = Path(__file__).resolve().parent / "node"
TIMEOUT = 30.0  # seconds for a script to start (or to run, for a one-shot)


def _command(script: str, *args: str, packages: bool) -> list[str]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("Node.js (18+) is not installed: the tests need it (tests/node)")
    if packages and not (NODE_DIR / "node_modules" / "nats").is_dir():
        pytest.fail("the Node.js peers are not installed: run scripts/node-clients.sh")
    return [node, str(NODE_DIR / script), *args]


async def run_node(script: str, *args: str, packages: bool = True) -> Any:
    """Run a one-shot script; return the JSON it printed (its last line).

    ``packages``: the script imports npm packages (tests/node/node_modules). Fails the
    test if it exits with an error.
    """
    process = await asyncio.create_subprocess_exec(
        *_command(script, *args, packages=packages),
        cwd=NODE_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(TIMEOUT):
        out, err = await process.communicate()
    assert process.returncode == 0, f"node {script} failed ({process.returncode}): {err.decode()}"
    # Lines end at "\n" only: JSON text may hold U+2028, which str.splitlines splits at.
    return json.loads(out.decode().rstrip("\n").rsplit("\n", 1)[-1])


@dataclass
class NodePeer:
    """A running script and the readiness line it printed (as JSON)."""

    process: asyncio.subprocess.Process
    ready: dict[str, Any]

    async def next_line(self) -> Any:
        """The next line the script printed after its readiness line, as JSON."""
        assert self.process.stdout is not None
        async with asyncio.timeout(TIMEOUT):
            line = await self.process.stdout.readline()
        assert line, f"the Node.js peer ended (exit status {self.process.returncode})"
        return json.loads(line)


@asynccontextmanager
async def node_peer(script: str, *args: str, packages: bool = True) -> AsyncIterator[NodePeer]:
    """Start a long-running script; enter once it printed its readiness line.

    ``packages`` as for :func:`run_node`. On exit its stdin is closed, which makes it
    stop, and it is waited for.
    """
    process = await asyncio.create_subprocess_exec(
        *_command(script, *args, packages=packages),
        cwd=NODE_DIR,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        async with asyncio.timeout(TIMEOUT):
            line = await process.stdout.readline()
        if not line:
            assert process.stderr is not None
            err = await process.stderr.read()
            pytest.fail(f"node {script} ended before it was ready: {err.decode()}")
        yield NodePeer(process, json.loads(line))
    finally:
        process.stdin.close()
        try:
            async with asyncio.timeout(TIMEOUT):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
