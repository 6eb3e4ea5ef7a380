"""The line protocol between a supervisor and its workers over a socket pair.

A worker writes one JSON object per line: its readiness report whenever it changes
(``{"readiness": {...}}``), the signal that made it drain (``{"signalled": "SIGTERM"}``)
and why it failed before it exits (``{"failed": "..."}``). The supervisor never
writes; a worker that reads end-of-file (or a reset) knows its supervisor is gone and
drains.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Callable, Mapping

__all__ = ("LINE_LIMIT", "WorkerLink", "read_reports")

logger = logging.getLogger("goflux.run")

LINE_LIMIT = 16 * 1024 * 1024
"""Longest line a supervisor reads (a readiness report of thousands of members fits)."""


class WorkerLink:
    """A worker's end of the link to its supervisor (an inherited socket descriptor)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        """Wrap the descriptor in asyncio streams.

        Raises:
            OSError: ``fd`` is not an open socket.
        """
        sock = socket.socket(fileno=self._fd)
        self._reader, self._writer = await asyncio.open_connection(sock=sock)

    def send(self, message: Mapping[str, object]) -> None:
        """Queue one line for the supervisor (dropped if it is gone)."""
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def flush(self) -> None:
        """Wait until queued lines are written (or the supervisor is gone)."""
        if self._writer is not None and not self._writer.is_closing():
            try:
                await self._writer.drain()
            except ConnectionError:
                return

    async def supervisor_gone(self) -> None:
        """Return once the supervisor's end is closed (it exited or was killed)."""
        assert self._reader is not None, "open() first"
        try:
            while await self._reader.read(4096):
                continue
        except OSError:  # reset: the supervisor died with lines of ours unread
            return

    def close(self) -> None:
        """Close the worker's end."""
        if self._writer is not None:
            self._writer.close()


async def read_reports(
    reader: asyncio.StreamReader, on_message: Callable[[dict[str, object]], None]
) -> None:
    """Hand each line a worker writes to ``on_message`` until the worker's end closes."""
    while True:
        try:
            line = await reader.readline()
        except ValueError:  # longer than the reader's limit: skipped, the next one is read
            logger.warning("a worker's report was too long to read; skipped")
            continue
        except OSError:
            return
        if not line:
            return
        try:
            message = json.loads(line)
        except ValueError:
            continue  # not ours; a worker only writes JSON objects here
        if isinstance(message, dict):
            on_message(message)
