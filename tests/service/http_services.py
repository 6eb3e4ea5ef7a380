"""Services with HTTP routes for the ``goflux run --http-port`` tests, steered by environment.

- ``HTTP_GATE``: a FIFO the group's start-up function reads before any member starts
  (the test writes to it to let the group start).
- ``HTTP_HOLD``: a FIFO the handler of ``work.slow`` reads before it answers.
- ``HTTP_BLOCK_MS``: ``whoami`` holds its worker's event loop this long (a handler
  that computes), so that a worker busy with one request takes no other connection.
- ``HTTP_SPAWN``: a directory; at start-up the service starts a process that inherits
  what it may (as ``os.system("... &")`` does) and writes its pid there.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from goflux import Group, Message, StrCodec
from goflux.transports import http as ghttp

logger = logging.getLogger("tests.http_services")


async def routes(group: Group) -> None:
    """``whoami`` answers ``<worker> <pid>``; ``work.slow`` answers once released; a hook."""
    router = ghttp.Router()
    responder = ghttp.Responder(StrCodec(), StrCodec(), router=router)
    hooks = ghttp.Subscriber(StrCodec(), base_path="/hooks")  # a router of its own
    block = float(os.environ.get("HTTP_BLOCK_MS", "0")) / 1000

    async def whoami(_: str) -> str:
        if block:
            time.sleep(block)  # noqa: ASYNC251 - on purpose: the worker is busy
        return f"{os.environ.get('GOFLUX_WORKER_ID')} {os.getpid()}"

    async def slow(text: str) -> str:
        logger.info("handling work.slow %s", text)
        hold = os.environ.get("HTTP_HOLD")
        if hold:
            released = await asyncio.to_thread(Path(hold).read_text)
            return f"{text} done after {released.strip()}"
        return f"{text} done"

    async def hook(msg: Message[str]) -> None:
        logger.info("hook %s", msg.payload)

    spawn = os.environ.get("HTTP_SPAWN")
    if spawn:
        child = subprocess.Popen(  # noqa: ASYNC220 - started once, returns at once
            [sys.executable, "-c", "import time; time.sleep(60)"],
            close_fds=False,  # what it may inherit, it does (the output is the test's)
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        (Path(spawn) / f"{child.pid}.pid").write_text(str(child.pid))

    gate = os.environ.get("HTTP_GATE")
    if gate:

        async def wait_for_gate() -> None:
            logger.info("waiting for the gate")
            await asyncio.to_thread(Path(gate).read_text)

        group.on_start(wait_for_gate)
    group.respond(responder, "whoami", whoami)
    group.respond(responder, "work.slow", slow)
    group.subscribe(hooks, "orders.created", hook)
