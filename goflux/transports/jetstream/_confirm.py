"""Confirmed acks ("double acks"): an ack the server answers once it has applied it.

A confirmed ack is ``+ACK`` published on the message's ``$JS.ACK`` subject with a
reply subject; the server replies with an empty message when the ack is applied (for
a replicated consumer, once its group agreed), and nats-server's no-responders status
(503) comes back at once when nobody takes acks for that consumer any more.

:class:`Confirmations` keeps a subscription's confirmations in flight together, on
one reply inbox (``<inbox>.<token>``): sending an ack costs one publish, and nothing
waits for its reply unless a caller asks to, so many confirmations overlap and a
worker need not wait a round trip per message. An ack without a reply within
``timeout`` is sent again (acks are idempotent), ``attempts`` times in all; then it
is given up and reported to its :class:`Confirmable`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from goflux._errors import AckNotConfirmed, SettlementError
from goflux._message import Delivery
from goflux.transports._refusals import Refusal
from goflux.transports.jetstream._inbox import ReplyInbox

__all__ = ("CONFIRM_ATTEMPTS", "DEFAULT_CONFIRM_TIMEOUT", "Confirmable", "Confirmations")

CONFIRM_ATTEMPTS = 3
"""Sends of one ack, in all, before it is reported unconfirmed."""

DEFAULT_CONFIRM_TIMEOUT = 2.0
"""Seconds to wait for the reply to one send of an ack before sending it again."""

_ACK = b"+ACK"

logger = logging.getLogger("goflux.transports.jetstream")


class Confirmable(Protocol):
    """A message's acker, as far as confirming its ack goes."""

    @property
    def reply(self) -> str:
        """The message's ``$JS.ACK`` reply subject."""

    @property
    def delivery(self) -> Delivery:
        """The delivery facts (stream, consumer, sequence) for error messages."""

    def confirmed(self) -> None:
        """The server applied the ack: count it, give the message's room back."""

    def unconfirmed(self) -> None:
        """The ack was given up: count it as unconfirmed, give the room back."""

    def unsent(self) -> None:
        """The ack could not be sent: count it as an ack that failed."""


class _Pending:
    """One ack waiting for its reply."""

    __slots__ = ("attempts", "sent_at", "target", "waiter")

    def __init__(
        self, target: Confirmable, sent_at: float, waiter: asyncio.Future[None] | None
    ) -> None:
        self.target = target
        self.sent_at = sent_at
        self.waiter = waiter  # None: nobody waits (the subscription's own auto-ack)
        self.attempts = 1


class Confirmations:
    """A subscription's acks waiting for the server's confirmation, on one reply inbox.

    Args:
        nc: The connection the messages arrived on.
        timeout: Seconds to wait for a reply before sending the ack again.
        attempts: Sends of one ack in all before it is given up.
        where: Names the subscription in log messages and errors.

    Raises:
        ValueError: ``timeout`` is not positive or ``attempts`` < 1.
    """

    def __init__(
        self, nc: Client, *, timeout: float, attempts: int = CONFIRM_ATTEMPTS, where: str = ""
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"confirm_timeout must be > 0 seconds, got {timeout}")
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        self._nc = nc
        self._timeout = timeout
        self._attempts = attempts
        self._where = where
        self._loop = asyncio.get_running_loop()
        self._inbox = ReplyInbox(nc, self._on_reply, self._on_refused)
        self._pending: dict[str, _Pending] = {}  # insertion order = oldest send first
        self._sweeper: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    @property
    def pending(self) -> int:
        """Acks sent and not yet confirmed or given up."""
        return len(self._pending)

    @property
    def opened(self) -> bool:
        """Whether the reply inbox is subscribed."""
        return self._inbox.opened

    async def open(self) -> None:
        """Subscribe to the reply inbox, if not done yet.

        Raises:
            SettlementError: The subscription could not be made.
        """
        try:
            await self._inbox.open()
        except nats.errors.Error as exc:
            raise SettlementError(f"cannot receive ack confirmations: {exc}") from exc

    async def ack(self, target: Confirmable, *, wait: bool) -> None:
        """Send ``target``'s ack for confirmation; with ``wait``, until it is confirmed.

        Without ``wait`` it returns once the ack is sent: ``target`` hears of the
        outcome (:meth:`Confirmable.confirmed` or :meth:`Confirmable.unconfirmed`).

        Raises:
            SettlementError: The ack could not be sent (nothing is pending).
            AckNotConfirmed: With ``wait``: no confirmation after every attempt.
        """
        try:
            await self.open()
        except SettlementError:
            target.unsent()  # not sent either: an ack that failed
            raise
        token, reply = self._inbox.new_token()
        waiter = self._loop.create_future() if wait else None
        # Registered before it is sent: a publish may yield, and the reply could come.
        self._pending[token] = _Pending(target, self._loop.time(), waiter)
        self._idle.clear()
        try:
            await self._nc.publish(target.reply, _ACK, reply=reply)
        except nats.errors.Error as exc:
            if self._pending.pop(token, None) is not None and not self._pending:
                self._idle.set()
            target.unsent()
            raise SettlementError(f"could not send ack: {exc}") from exc
        if self._sweeper is None:
            self._sweeper = self._loop.create_task(
                self._sweep(), name=f"goflux-jetstream-{self._where}-confirmations"
            )
        if waiter is not None:
            await waiter

    async def settled(self) -> None:
        """Wait until every ack sent is confirmed or given up (each is bounded in time)."""
        await self._idle.wait()

    async def close(self) -> None:
        """Give up what is pending and drop the inbox (a later ack opens it again)."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        pending, self._pending = self._pending, {}
        for waiting in pending.values():
            self._give_up(waiting, ConnectionError("the subscription stopped"))
        self._idle.set()
        await self._inbox.close()

    # ----------------------------------------------------------- outcomes

    def _on_refused(self, refusal: Refusal) -> None:
        """The server refused the reply inbox: no confirmation can come."""
        pending, self._pending = self._pending, {}
        for waiting in pending.values():
            self._give_up(waiting, refusal.error("the inbox for ack confirmations"))
        self._idle.set()

    async def _on_reply(self, token: str, msg: Msg) -> None:
        pending = self._pending.pop(token, None)
        if pending is None:
            return  # the second reply to an ack sent twice, or one given up already
        headers = msg.headers
        if headers and headers.get("Status"):  # 503: nobody takes acks for the consumer
            self._give_up(pending, nats.errors.NoRespondersError())
        else:
            pending.target.confirmed()
            if pending.waiter is not None and not pending.waiter.done():
                pending.waiter.set_result(None)
        self._after_outcome()

    def _give_up(self, pending: _Pending, cause: BaseException) -> None:
        """Report an ack that was not confirmed (taken out of the table already)."""
        delivery = pending.target.delivery
        what = (
            f"ack of message {delivery.stream_sequence} on stream {delivery.stream!r} "
            f"(consumer {delivery.consumer!r})"
        )
        reason = (
            "nobody took it: the consumer is gone"
            if isinstance(cause, nats.errors.NoRespondersError)
            else f"{type(cause).__name__}: {cause}"
        )
        error = AckNotConfirmed(
            f"{what} not confirmed after {pending.attempts} attempt(s) ({reason}); if "
            "it was not applied, the server redelivers the message after ack_wait",
            stream=delivery.stream,
            consumer=delivery.consumer,
            sequence=delivery.stream_sequence,
        )
        error.__cause__ = cause
        pending.target.unconfirmed()
        waiter = pending.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        else:  # nobody waits to be told: say it here
            logger.error("%s", error)

    def _after_outcome(self) -> None:
        if not self._pending:
            self._idle.set()
            if self._closed and self._inbox.opened:  # opened again by a late ack
                self._loop.create_task(self._inbox.close())

    # ------------------------------------------------------------ retries

    async def _sweep(self) -> None:
        """Send again what had no reply within the timeout; give up after the attempts."""
        tick = self._timeout / 4
        try:
            while self._pending:
                await asyncio.sleep(tick)
                now = self._loop.time()
                expired = []
                for token, pending in self._pending.items():
                    if now - pending.sent_at < self._timeout:
                        break  # oldest first: the rest are younger
                    expired.append(token)
                for token in expired:
                    await self._retry(token, now)
                if expired:
                    self._after_outcome()
        finally:
            if asyncio.current_task() is self._sweeper:
                self._sweeper = None

    async def _retry(self, token: str, now: float) -> None:
        pending = self._pending.get(token)
        if pending is None:
            return  # answered meanwhile
        if pending.attempts >= self._attempts:
            del self._pending[token]
            self._give_up(pending, TimeoutError(f"no reply within {self._timeout:g}s"))
            return
        del self._pending[token]
        self._pending[token] = pending  # to the end: sent now
        pending.attempts += 1
        pending.sent_at = now
        try:
            reply = self._inbox.reply_subject(token)
            await self._nc.publish(pending.target.reply, _ACK, reply=reply)
        except nats.errors.Error as exc:
            if self._pending.pop(token, None) is not None:
                self._give_up(pending, exc)
