"""The in-process broker: routes envelopes to subscription inboxes by NATS subject rules."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from goflux.codecs import Codec
from goflux.headers import Headers
from goflux.subjects import tokens_match

__all__ = ("Bus", "Envelope", "Route")

T = TypeVar("T")

DEFAULT_BUFFER = 1024


@dataclass(slots=True)
class Envelope:
    """One published message as it travels through the bus."""

    subject: str
    value: object  # the payload, or its bytes when the bus has a codec
    data: bytes | None
    headers: Headers | None
    message_id: str | None
    trace: dict[str, str]


class Route:
    """A subscription's registration on the bus: its pattern, queue group and inbox."""

    __slots__ = ("closing", "inbox", "pattern", "queue", "tokens")

    def __init__(self, pattern: str, queue: str | None, buffer: int) -> None:
        self.pattern = pattern
        self.tokens = tuple(pattern.split("."))
        self.queue = queue
        self.inbox: asyncio.Queue[Envelope | None] = asyncio.Queue(maxsize=buffer)
        # Set when the subscription stops taking messages; releases blocked publishers.
        self.closing = asyncio.Event()

    async def put(self, envelope: Envelope) -> None:
        """Queue ``envelope``, waiting for room (back-pressure) unless the route closes."""
        if self.closing.is_set():
            return
        try:
            self.inbox.put_nowait(envelope)
            return
        except asyncio.QueueFull:
            pass
        putter = asyncio.ensure_future(self.inbox.put(envelope))
        closed = asyncio.ensure_future(self.closing.wait())
        try:
            await asyncio.wait((putter, closed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            putter.cancel()
            closed.cancel()


class Bus(Generic[T]):
    """An in-process message broker for payloads of type ``T``.

    Subjects follow NATS rules (``*`` and ``>`` wildcards in subscriptions). Each
    subscription has a bounded inbox: a publisher waits while an inbox is full, so a
    slow subscriber slows its publishers down instead of growing memory. Subscribers
    sharing a queue group name compete: each message goes to one of them.

    Without a codec, subscribers receive the published object itself (do not mutate
    it). With a codec, payloads travel as bytes and every subscriber decodes its own
    copy, exactly as over a network transport.

    Args:
        codec: Optional codec the payloads pass through.
        buffer: Default inbox size of each subscription (>= 1).

    Raises:
        ValueError: ``buffer`` is smaller than 1.
    """

    @overload
    def __init__(self: Bus[T], *, codec: Codec[T], buffer: int = DEFAULT_BUFFER) -> None: ...

    @overload
    def __init__(self, *, codec: None = None, buffer: int = DEFAULT_BUFFER) -> None: ...

    def __init__(self, *, codec: Codec[Any] | None = None, buffer: int = DEFAULT_BUFFER) -> None:
        if buffer < 1:
            raise ValueError(f"buffer must be >= 1, got {buffer}")
        self.codec: Codec[Any] | None = codec
        self.buffer = buffer
        self._routes: list[Route] = []
        self._turns: dict[str, int] = {}

    @property
    def subscription_count(self) -> int:
        """Number of active subscriptions."""
        return len(self._routes)

    def add(self, route: Route) -> None:
        """Register a subscription's route; it receives messages published from now on."""
        self._routes.append(route)

    def remove(self, route: Route) -> None:
        """Unregister a route; no message published afterwards reaches it."""
        if route in self._routes:
            self._routes.remove(route)

    async def deliver(self, envelope: Envelope) -> None:
        """Hand ``envelope`` to every matching subscription, one member per queue group."""
        tokens = envelope.subject.split(".")
        targets: list[Route] = []
        groups: dict[str, list[Route]] | None = None
        for route in self._routes:
            if tokens_match(route.tokens, tokens):
                if route.queue is None:
                    targets.append(route)
                else:
                    if groups is None:
                        groups = {}
                    groups.setdefault(route.queue, []).append(route)
        if groups:
            for queue, members in groups.items():
                turn = self._turns.get(queue, 0)
                self._turns[queue] = turn + 1
                targets.append(members[turn % len(members)])
        for route in targets:
            await route.put(envelope)
