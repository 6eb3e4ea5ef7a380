"""Test helpers that wait on real signals, never on fixed sleeps."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any, Generic, TypeVar

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import ConsumerInfo

from goflux import Headers, Message, Publisher, PublishError, PublishReceipt
from goflux.transports._natspy import callback_task

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


async def drained(js: JetStreamContext, stream: str, consumer: str) -> ConsumerInfo:
    """Wait until ``consumer`` has delivered, and holds nothing pending or unacked.

    Acks and terms are fire-and-forget, and acks lost in a fault come back after
    ``ack_wait``: the server's view is the signal (each check is a round trip). It
    must have delivered something too: right after a publish, a loaded server may
    report nothing pending before it counts the new message.
    """
    while True:
        info = await js.consumer_info(stream, consumer)
        delivered = info.delivered.stream_seq if info.delivered is not None else 0
        if (info.num_pending, info.num_ack_pending) == (0, 0) and delivered:
            return info
        await js._nc.flush()


async def num_pending_is(
    js: JetStreamContext, stream: str, consumer: str, count: int, timeout: float = 20.0
) -> int:
    """Wait until the server counts ``count`` messages pending for ``consumer``; return it.

    The server counts a stored message for its consumers off a queue of its own, after
    it sent the PubAck: right after a publish, a loaded server may report fewer. Each
    look is a round trip; the deadline is checked between them.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (pending := (await js.consumer_info(stream, consumer)).num_pending) != count:
        assert loop.time() < deadline, f"{consumer!r}: {pending} pending, expected {count}"
        await js._nc.flush()
    return count


async def pull_waiting(js: JetStreamContext, stream: str, consumer: str) -> None:
    """Wait until ``consumer`` holds a waiting pull request (the server's view)."""
    while (await js.consumer_info(stream, consumer)).num_waiting == 0:
        await js._nc.flush()


async def settle_loop(rounds: int = 50) -> None:
    """Let every ready task run a few times (to show something does NOT happen)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class ScriptedPublisher:
    """A Publisher test double: records each publish and fails the first ``failures``.

    For middleware tests (never for transports: those talk to a real server).
    """

    def __init__(self, failures: int = 0, error: PublishError | None = None) -> None:
        self.failures = failures
        self.error = error or PublishError("no PubAck", subject="s", may_be_stored=True)
        self.calls: list[tuple[str, object, Headers | None, str | None]] = []
        self.failed_once = asyncio.Event()
        self.closed = False

    async def publish(
        self,
        subject: str,
        value: object,
        /,
        *,
        headers: object = None,
        message_id: str | None = None,
    ) -> PublishReceipt | None:
        recorded = Headers(headers) if headers else None  # type: ignore[arg-type]
        self.calls.append((subject, value, recorded, message_id))
        if len(self.calls) <= self.failures:
            self.failed_once.set()
            raise self.error
        return PublishReceipt(stream="S", sequence=len(self.calls), duplicate=False)

    async def close(self) -> None:
        self.closed = True

    async def __aenter__(self) -> ScriptedPublisher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def one_at_a_time_until_idle(
    idle: Callable[[], bool],
    send: Callable[[int], Awaitable[object]],
    handled: Callable[[], int],
    count: int,
) -> None:
    """``send(n)`` for each of ``count`` messages, each once the last is handled and
    ``idle()`` says the subscription waits for more (a real state, polled each turn)."""
    for n in range(count):
        await send(n)
        async with asyncio.timeout(10):
            while handled() <= n or not idle():  # noqa: ASYNC110 - no event
                await asyncio.sleep(0)


class Box:
    """A decoded payload whose freeing a test can watch (a weak reference)."""

    def __init__(self, data: bytes) -> None:
        self.data = data


class BoxCodec:
    """Bytes in a :class:`Box`."""

    def encode(self, value: Box, /) -> bytes:
        return value.data

    def decode(self, data: bytes, /) -> Box:
        return Box(data)


async def publish_large(publisher: Publisher[Box], subject: str, n: int) -> None:
    """Publish the ``n``-th large message of the idle tests: a 100 KB payload, a 20 KB
    header value and a message ID of 10,000 characters."""
    await publisher.publish(
        subject,
        Box(b"%d" % n * 100_000),
        headers=[("Tag", str(n) * 20_000)],
        message_id=str(n) * 10_000,
    )


def held_only_by(holder: list[Any]) -> None:
    """Assert that nothing but the list ``holder`` refers to any object in it."""
    for item in holder:
        assert [ref for ref in gc.get_referrers(item) if ref is not holder] == [], item


def last_called_back(subscription: Subscription) -> Msg | None:
    """The message nats-py's callback task for ``subscription`` keeps in its ``msg``
    local while it waits for the next (None before the first, or in another nats-py)."""
    task = callback_task(subscription)
    assert task is not None
    frame = task.get_coro().cr_frame  # type: ignore[union-attr]
    found = frame.f_locals.get("msg") if frame is not None else None
    return found if isinstance(found, Msg) else None


async def raw_publish(
    url: str,
    subject: str,
    header_lines: bytes,
    payload: bytes,
    *,
    first_line: bytes = b"NATS/1.0\r\n",
) -> None:
    """Publish with hand-written NATS protocol, as a peer with laxer rules may.

    ``header_lines`` are ``b"Name: value\\r\\n"`` lines sent exactly as given, after
    ``first_line``; returns once the server has processed the message (its PONG to
    our PING).
    """
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        await reader.readline()  # INFO
        block = first_line + header_lines + b"\r\n"
        writer.write(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\n')
        writer.write(
            b"HPUB %s %d %d\r\n%s%s\r\nPING\r\n"
            % (subject.encode(), len(block), len(block) + len(payload), block, payload)
        )
        await writer.drain()
        async with asyncio.timeout(10):
            while (line := await reader.readline()) != b"PONG\r\n":
                if not line or line.startswith(b"-ERR"):
                    raise ConnectionError(f"the server refused the message: {line!r}")
    finally:
        writer.close()
        await writer.wait_closed()


def all_stopped(pid: int) -> bool:
    """Whether every thread of process ``pid`` is stopped."""
    tasks = Path(f"/proc/{pid}/task").iterdir()
    states = [(task / "stat").read_text().rpartition(")")[2].split()[0] for task in tasks]
    return all(state in ("T", "t") for state in states)


async def stopped(pid: int) -> None:
    """Wait until every thread of process ``pid`` is stopped (SIGSTOP takes a moment)."""
    async with asyncio.timeout(10):
        while not all_stopped(pid):  # noqa: ASYNC110 - no event for it: ask the kernel
            await asyncio.sleep(0)


class PeerPorts:
    """An ASGI app answering every request 204 and recording the client's port of each.

    Two requests with one port came over one (kept-alive) connection.
    """

    def __init__(self) -> None:
        self.ports: list[int] = []

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
        send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ) -> None:
        assert scope["type"] == "http"
        while (await receive()).get("more_body", False):
            pass
        self.ports.append(scope["client"][1])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
