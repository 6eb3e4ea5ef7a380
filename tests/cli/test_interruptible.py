"""kv and obj commands end on SIGINT/SIGTERM even when a cancellation is lost on its way.

Each action signals this very process once it runs (``interruptible`` has its handlers
in place by then), so the signal is the real one, not a stand-in.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from goflux.cli._actions import interruptible


async def test_an_action_that_loses_a_cancellation_still_ends_on_sigint() -> None:
    cancellations = 0

    async def stubborn() -> int:
        nonlocal cancellations
        os.kill(os.getpid(), signal.SIGINT)
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancellations += 1
                if cancellations == 2:
                    raise
                # lost, as Python 3.11's asyncio.wait_for (in nats-py) can lose one

    async with asyncio.timeout(10):
        assert await interruptible(stubborn()) == 130
    assert cancellations == 2


async def test_sigterm_ends_it_with_143() -> None:
    async def watch() -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.Event().wait()
        return 0

    async with asyncio.timeout(10):
        assert await interruptible(watch()) == 143


async def test_what_the_action_returns_or_raises_comes_through() -> None:
    async def done() -> int:
        return 7

    async def broken() -> int:
        raise LookupError("no such bucket")

    assert await interruptible(done()) == 7
    with pytest.raises(LookupError, match="no such bucket"):
        await interruptible(broken())
    # The handlers are gone again: SIGINT is Python's own.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


async def test_in_another_thread_the_action_just_runs() -> None:
    async def done() -> int:
        return 3

    def in_thread() -> int:
        return asyncio.run(interruptible(done()))

    assert await asyncio.to_thread(in_thread) == 3
