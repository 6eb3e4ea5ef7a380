from __future__ import annotations

from goflux import Handler, Message, chain


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
