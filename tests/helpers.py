"""Test helpers that wait on real signals, never on fixed sleeps."""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from goflux import Message

T = TypeVar("T")


class Inbox(Generic[T]):
    """A handler that records messages and lets a test wait until N have arrived."""

    def __init__(self) -> None:
        self.messages: list[Message[T]] = []
        self._changed = asyncio.Event()

    async def __call__(self, msg: Message[T]) -> None:
        self.messages.append(msg)
        self._changed.set()

    @property
    def payloads(self) -> list[T]:
        return [m.payload for m in self.messages]

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[Message[T]]:
        async with asyncio.timeout(timeout):
            while len(self.messages) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.messages


async def settle_loop(rounds: int = 50) -> None:
    """Let every ready task run a few times (to show something does NOT happen)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
