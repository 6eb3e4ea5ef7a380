"""The in-process broker: routes envelopes to subscription inboxes by NATS subject rules."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from goflux._codecs import Codec
from goflux._headers import Headers
from goflux._subjects import tokens_match

__all__ = ("Bus", "Envelope", "Route")

T = TypeVar("T")

DEFAULT_BUFFER = 1024


@dataclass(slots=True, eq=False)
class Envelope:
    """One published message as it travels through the bus."""

    subject: str
    value: object  # the payload, or its bytes when the bus has a codec
    data: bytes | None
    headers: Headers | None
    message_id: str | None
    trace: dict[str, str]


class Route:
    """A subscription's place on the bus: its pattern, queue group and bounded inbox.

    The inbox holds at most ``capacity`` envelopes. A publisher finding it full leaves
    its envelope with the route and waits; the envelope moves into the inbox, in
    arrival order, as soon as the subscription takes one out. An envelope accepted
    either way belongs to the route: the publisher giving up waiting does not take it
    back. Closing the route releases every waiting publisher and reports how many
    envelopes were left.
    """

    __slots__ = (
        "_buffer",
        "_closed",
        "_ready",
        "_waiting",
        "capacity",
        "delivered",
        "pattern",
        "queue",
        "tokens",
    )

    def __init__(self, pattern: str, queue: str | None, capacity: int) -> None:
        self.pattern = pattern
        self.tokens = tuple(pattern.split("."))
        self.queue = queue
        self.capacity = capacity
        self.delivered = 0  # envelopes handed to this route (queue-group fairness)
        self._buffer: deque[Envelope] = deque()
        self._waiting: deque[tuple[Envelope, asyncio.Future[None]]] = deque()
        self._ready: asyncio.Future[None] | None = None
        self._closed = False

    @property
    def pending(self) -> int:
        """Envelopes in the inbox plus those held for waiting publishers."""
        return len(self._buffer) + len(self._waiting)

    def _wake(self) -> None:
        ready = self._ready
        if ready is not None and not ready.done():
            ready.set_result(None)

    def offer(self, envelope: Envelope) -> asyncio.Future[None] | None:
        """Accept ``envelope`` now; return a future to await while the inbox is full.

        The future completes when the envelope moves into the inbox, or when the route
        closes (the envelope is then counted by :meth:`close`). Returns None when the
        envelope went straight into the inbox, or the route was already closed.
        """
        if self._closed:
            return None
        self.delivered += 1
        if len(self._buffer) < self.capacity and not self._waiting:
            self._buffer.append(envelope)
            self._wake()
            return None
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((envelope, slot))
        return slot

    def take(self) -> Envelope | None:
        """Return the next envelope, or None when the inbox is empty."""
        if not self._buffer:
            return None
        envelope = self._buffer.popleft()
        if self._waiting:
            waiting, slot = self._waiting.popleft()
            self._buffer.append(waiting)
            if not slot.done():
                slot.set_result(None)
        return envelope

    async def wait(self) -> None:
        """Wait until an envelope arrives or :meth:`interrupt` is called."""
        if self._buffer:
            return
        self._ready = asyncio.get_running_loop().create_future()
        try:
            await self._ready
        finally:
            self._ready = None

    def interrupt(self) -> None:
        """Wake a :meth:`wait` without an envelope (to start a drain)."""
        self._wake()

    def close(self) -> int:
        """Refuse further envelopes, release waiting publishers; return how many were left.

        Closing again returns 0.
        """
        self._closed = True
        left = len(self._buffer) + len(self._waiting)
        self._buffer.clear()
        while self._waiting:
            _, slot = self._waiting.popleft()
            if not slot.done():
                slot.set_result(None)
        self._wake()
        return left


class Bus(Generic[T]):
    """An in-process message broker for payloads of type ``T``.

    Subjects follow NATS rules (``*`` and ``>`` wildcards in subscriptions). Each
    subscription has a bounded inbox: a publisher waits while an inbox is full, so a
    slow subscriber slows its publishers down instead of growing memory. Subscribers
    sharing a queue group name compete: each message goes to one of them (the one
    that has been given the fewest messages).

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

    @property
    def subscription_count(self) -> int:
        """Number of subscriptions currently taking messages."""
        return len(self._routes)

    def add(self, route: Route) -> None:
        """Register a subscription's route; it receives messages published from now on."""
        if route.queue is not None:
            # A late member starts level with its group instead of taking every
            # message until it has caught up.
            route.delivered = min(
                (r.delivered for r in self._routes if r.queue == route.queue), default=0
            )
        self._routes.append(route)

    def remove(self, route: Route) -> None:
        """Unregister a route; no message published afterwards reaches it."""
        if route in self._routes:
            self._routes.remove(route)

    async def deliver(self, envelope: Envelope) -> None:
        """Hand ``envelope`` to every matching subscription, one member per queue group.

        Every target accepts the envelope before anything is awaited, so a target that
        stops meanwhile still owns (handles or counts) it. Then waits while any
        target's inbox is full. Cancelling the wait does not withdraw the envelope.
        """
        tokens = envelope.subject.split(".")
        targets: list[Route] = []
        groups: dict[str, Route] | None = None
        for route in self._routes:
            if not tokens_match(route.tokens, tokens):
                continue
            if route.queue is None:
                targets.append(route)
                continue
            if groups is None:
                groups = {}
            chosen = groups.get(route.queue)
            if chosen is None or route.delivered < chosen.delivered:
                groups[route.queue] = route
        if groups:
            targets.extend(groups.values())
        waits = [slot for route in targets if (slot := route.offer(envelope)) is not None]
        for slot in waits:
            await asyncio.shield(slot)
