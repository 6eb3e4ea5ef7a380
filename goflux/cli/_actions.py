"""What ``goflux kv`` and ``goflux obj`` share: running an action on one connection."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeAlias

__all__ = ("Action", "Connect", "runner")

Connect: TypeAlias = Callable[[str], Awaitable[Any]]
"""Connects to a NATS server by URL (the command line's own, with its clear errors)."""

Action: TypeAlias = Callable[[Any, argparse.Namespace], Awaitable[int]]
"""One subcommand: given a connected client and the arguments, its exit status."""


def runner(
    actions: Mapping[str, Action], *, connect: Connect, default_url: str
) -> Callable[[argparse.Namespace], int]:
    """The ``run`` of a command: connect, run ``args.action``, close the connection.

    The server is ``--url``, else ``$NATS_URL``, else ``default_url``; the connection
    is closed whatever happens.
    """

    def run(args: argparse.Namespace) -> int:
        url = args.url or os.environ.get("NATS_URL") or default_url

        async def go() -> int:
            nc = await connect(url)
            try:
                return await actions[args.action](nc, args)
            finally:
                await nc.close()

        return asyncio.run(go())

    return run
