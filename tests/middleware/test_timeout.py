"""timeout(): cancels slow handlers into a retryable HandlerTimeout."""

from __future__ import annotations

import asyncio
import math
import threading

import pytest

from goflux import HandlerTimeout, Message
from goflux.middleware import RetryPolicy, timeout


async def test_a_slow_handler_is_cancelled_and_fails_with_handler_timeout() -> None:
    cancelled = asyncio.Event()

    async def hang(msg: Message[int]) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(HandlerTimeout, match=r"longer than 0\.05s") as caught:
        await timeout(0.05)(hang)(Message("s", 1))
    assert cancelled.is_set()
    assert caught.value.seconds == 0.05
    assert isinstance(caught.value, TimeoutError)
    assert isinstance(caught.value.__cause__, asyncio.CancelledError)
    assert RetryPolicy().decide(caught.value, 1).action == "nak"  # retryable


async def test_a_fast_handler_is_untouched() -> None:
    seen: list[int] = []

    async def fast(msg: Message[int]) -> None:
        seen.append(msg.payload)

    await timeout(5)(fast)(Message("s", 7))
    assert seen == [7]


async def test_the_handlers_own_timeout_error_passes_through_unchanged() -> None:
    own = TimeoutError("the database timed out")

    async def failing(msg: Message[int]) -> None:
        raise own

    with pytest.raises(TimeoutError) as caught:
        await timeout(5)(failing)(Message("s", 1))
    assert caught.value is own


async def test_a_handler_that_swallows_its_cancellation_still_times_out() -> None:
    async def stubborn(msg: Message[int]) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return  # returns as if it had finished

    with pytest.raises(HandlerTimeout, match="ignored its cancellation"):
        await timeout(0.05)(stubborn)(Message("s", 1))


async def test_cancelling_from_outside_is_not_a_timeout() -> None:
    started = asyncio.Event()

    async def hang(msg: Message[int]) -> None:
        started.set()
        await asyncio.Event().wait()

    async def run() -> None:
        await timeout(5)(hang)(Message("s", 1))

    task = asyncio.create_task(run())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_no_heartbeats_without_acknowledgement() -> None:
    """A channel message cannot be kept alive; the timeout still applies."""

    async def slow(msg: Message[int]) -> None:
        await asyncio.sleep(0.05)
        assert msg.settled is None

    await timeout(1, heartbeat=0.01)(slow)(Message("s", 1))


@pytest.mark.parametrize(
    ("seconds", "heartbeat"), [(0, None), (-1, None), (math.inf, None), (1, 0), (1, math.nan)]
)
def test_bad_settings_are_rejected(seconds: float, heartbeat: float | None) -> None:
    with pytest.raises(ValueError, match="positive number"):
        timeout(seconds, heartbeat=heartbeat)


async def test_a_cancellation_turned_into_another_error_leaves_the_task_clean() -> None:
    """Our cancel request is undone on every exit, or later drains would be misjudged."""

    async def converts(msg: Message[int]) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    with pytest.raises(RuntimeError, match="cleanup failed"):
        await timeout(0.05)(converts)(Message("s", 1))
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


def test_one_timeout_serves_loops_in_several_threads_with_one_watcher_each() -> None:
    middleware = timeout(5)

    async def quick(msg: Message[int]) -> None:
        await asyncio.sleep(0.001)

    handler = middleware(quick)
    most: list[int] = []

    async def main() -> None:
        peak = 0
        for _ in range(100):
            await asyncio.gather(*(handler(Message("s", n)) for n in range(5)))
            watchers = [
                t
                for t in asyncio.all_tasks()
                if getattr(t.get_coro(), "__qualname__", "") == "Watchdog._watch"
            ]
            peak = max(peak, len(watchers))
        most.append(peak)

    threads = [threading.Thread(target=asyncio.run, args=(main(),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert most == [1, 1]
