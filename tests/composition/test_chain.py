from __future__ import annotations

import asyncio

import pytest

from goflux import (
    Handler,
    HandlerTimeout,
    HeadersLike,
    Message,
    Publisher,
    PublisherMiddleware,
    chain,
    chain_publishers,
)
from goflux.middleware import RetryPolicy, retry_ack, timeout
from goflux.transports import channel


def tag(name: str, log: list[str]):  # type: ignore[no-untyped-def]
    def middleware(handler: Handler[int]) -> Handler[int]:
        async def wrapped(msg: Message[int]) -> None:
            log.append(f"{name}>")
            await handler(msg)
            log.append(f"<{name}")

        return wrapped

    return middleware


async def test_first_middleware_is_outermost() -> None:
    log: list[str] = []

    async def handler(msg: Message[int]) -> None:
        log.append(f"handle {msg.payload}")

    a, b = tag("a", log), tag("b", log)
    await chain(a, b)(handler)(Message("s", 1))
    assert log == ["a>", "b>", "handle 1", "<b", "<a"]
    log.clear()
    await a(b(handler))(Message("s", 1))
    assert log == ["a>", "b>", "handle 1", "<b", "<a"]


async def test_empty_chain_returns_the_handler() -> None:
    async def handler(msg: Message[int]) -> None:
        return None

    assert chain()(handler) is handler


async def test_publisher_middleware_first_is_outermost() -> None:
    log: list[str] = []
    bus: channel.Bus[int] = channel.Bus()

    def tag_publisher(name: str) -> PublisherMiddleware[int]:
        def middleware(inner: Publisher[int]) -> Publisher[int]:
            class Tagged(channel.Publisher[int]):
                async def publish(
                    self,
                    subject: str,
                    value: int,
                    /,
                    *,
                    headers: HeadersLike | None = None,
                    message_id: str | None = None,
                ) -> None:
                    log.append(f"{name}>")
                    await inner.publish(subject, value, headers=headers, message_id=message_id)
                    log.append(f"<{name}")

            return Tagged(bus)

        return middleware

    publisher = chain_publishers(tag_publisher("a"), tag_publisher("b"))(channel.Publisher(bus))
    await publisher.publish("s", 1)
    assert log == ["a>", "b>", "<b", "<a"]
    plain = channel.Publisher(bus)
    assert chain_publishers()(plain) is plain


async def test_retry_outside_timeout_retries_timeouts_and_inside_does_not() -> None:
    """The documented order: retry_ack first (outermost) sees the timeout's failure."""
    calls = 0

    async def hangs_once(msg: Message[int]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.Event().wait()

    policy = RetryPolicy(backoff=[0.01], max_attempts=3)
    await chain(retry_ack(policy), timeout(0.05))(hangs_once)(Message("s", 1))
    assert calls == 2  # timed out, retried, succeeded

    calls = 0
    with pytest.raises(HandlerTimeout):  # the timeout covers every attempt together
        await chain(timeout(0.05), retry_ack(policy))(hangs_once)(Message("s", 1))
    assert calls == 1
