"""What ``goflux kv`` and ``goflux obj`` share: running an action on one connection."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeAlias

__all__ = ("Action", "Connect", "interruptible", "runner")

Connect: TypeAlias = Callable[[str], Awaitable[Any]]
"""Connects to a NATS server by URL (the command line's own, with its clear errors)."""

Action: TypeAlias = Callable[[Any, argparse.Namespace], Awaitable[int]]
"""One subcommand: given a connected client and the arguments, its exit status."""


def runner(
    actions: Mapping[str, Action], *, connect: Connect, default_url: str
) -> Callable[[argparse.Namespace], int]:
    """The ``run`` of a command: connect, run ``args.action``, close the connection.

    The server is ``--url``, else ``$NATS_URL``, else ``default_url``; the connection
    is closed whatever happens. SIGINT or SIGTERM stops the action (exit status
    ``128 + signal``: 130 for Ctrl-C), see :func:`interruptible`.
    """

    def run(args: argparse.Namespace) -> int:
        url = args.url or os.environ.get("NATS_URL") or default_url

        async def go() -> int:
            nc = await connect(url)
            try:
                return await interruptible(actions[args.action](nc, args))
            finally:
                await nc.close()

        return asyncio.run(go())

    return run


_RECANCEL = 0.5  # seconds before an interrupted action that has not ended is cancelled again


async def interruptible(action: Awaitable[int]) -> int:
    """Run ``action`` to its end, or until SIGINT or SIGTERM; then ``128 + signal``.

    The action is cancelled on the signal, and again while it has not ended: a
    cancellation can be lost on its way (Python 3.11's ``asyncio.wait_for``, which
    nats-py uses, swallows one that arrives as its future completes), and a watch
    that lost it would wait for the next change for ever. Outside the main thread
    (``main()`` called from a thread) no signal reaches it: the action just runs.
    """
    if threading.current_thread() is not threading.main_thread():
        return await action  # signals reach the main thread only (main() run in a thread)
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(action)
    received: list[int] = []
    signalled = asyncio.Event()

    def on_signal(signum: int) -> None:
        received.append(signum)
        signalled.set()

    handled = (signal.SIGINT, signal.SIGTERM)
    for signum in handled:
        loop.add_signal_handler(signum, on_signal, signum)
    waiting = asyncio.ensure_future(signalled.wait())
    try:
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if task.done() and not received:
            return task.result()
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=_RECANCEL)
        if not task.cancelled():
            task.exception()  # retrieved: what it raised while being stopped is moot
        return 128 + received[0]
    finally:
        waiting.cancel()
        for signum in handled:
            loop.remove_signal_handler(signum)
