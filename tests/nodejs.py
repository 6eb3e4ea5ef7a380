"""Peers of another language: the Node.js scripts in tests/node (nats.js v2, built-ins).

``scripts/node-clients.sh`` (run by ``./scripts/check.sh``) installs their packages
into tests/node/node_modules from the lock file; the HTTP peers use Node's built-in
modules only (``packages=False``) and need no install.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import json
import select
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

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


class NodeService:
    """A one-shot script started once and kept for the requests of every test here.

    Node and a script's npm packages take a few tenths of a second to load (the AsyncAPI
    parser about 2 s), which :func:`run_node` pays on every call. This starts ``node
    SCRIPT --serve`` on the first :meth:`ask` and keeps it until the test process ends;
    one that died or stopped answering is replaced on the next ask. Each request is
    answered on its own, as a one-shot run of the script would answer it.

    The script reads one JSON request a line on stdin, ``{"id": N, "args": [...]}``
    (the arguments of a one-shot run), and writes one JSON line for each,
    ``{"id": N, "result": ...}`` or ``{"id": N, "error": "..."}``; it exits when stdin
    closes.
    """

    def __init__(self, script: str, packages: bool = True) -> None:
        self.script = script
        self.packages = packages
        self.process: subprocess.Popen[str] | None = None
        self.stderr: IO[str] | None = None
        self.ids = itertools.count(1)
        atexit.register(self.stop)

    def ask(self, *args: str) -> Any:
        """The script's result for ``args``; fails the test on its error or silence."""
        process = self.running()
        assert process.stdin is not None
        assert process.stdout is not None
        request = next(self.ids)
        try:
            process.stdin.write(json.dumps({"id": request, "args": args}) + "\n")
            process.stdin.flush()
            while True:
                ready, _, _ = select.select([process.stdout], [], [], TIMEOUT)
                line = process.stdout.readline() if ready else ""
                if not line:
                    break
                try:
                    answer = json.loads(line)
                except ValueError:  # the rest of a line an interrupted test began to read
                    continue
                if answer.get("id") != request:  # asked by an interrupted test (a timeout)
                    continue
                assert "error" not in answer, f"node {self.script} failed: {answer['error']}"
                return answer["result"]
        except BrokenPipeError:
            pass
        error = self.stop()
        pytest.fail(f"node {self.script} --serve gave no answer to {list(args)}: {error}")

    def running(self) -> subprocess.Popen[str]:
        if self.process is None or self.process.poll() is not None:
            self.stop()
            self.stderr = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
            self.process = subprocess.Popen(
                _command(self.script, "--serve", packages=self.packages),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                text=True,
                encoding="utf-8",
                cwd=NODE_DIR,
            )
        return self.process

    def stop(self) -> str:
        """Stop the script (its stdin closed); return what it wrote to stderr."""
        process, self.process = self.process, None
        stderr, self.stderr = self.stderr, None
        if process is not None:
            assert process.stdin is not None
            assert process.stdout is not None
            with contextlib.suppress(BrokenPipeError):  # it died: nothing to tell it
                process.stdin.close()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            process.stdout.close()
        if stderr is None:
            return ""
        stderr.seek(0)
        text = stderr.read()
        stderr.close()
        return text
