"""One wildcard reply inbox whose replies come back by token.

Pipelined PubAcks (:class:`~._replies.PubAcks`) and confirmed acks (:mod:`._confirm`) both send
many requests whose replies come back in any order: each request gets the reply
subject ``<inbox>.<token>``, and one subscription on ``<inbox>.*`` hands every reply
to its owner with the token. A refusal of the inbox by the server is reported too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from goflux.transports._refusals import Refusal, refusals

__all__ = ("ReplyInbox",)


class ReplyInbox:
    """A reply inbox subscribed on first use; replies go to ``on_reply(token, msg)``.

    Args:
        nc: The connection the requests go out on.
        on_reply: Called with each reply's token and message.
        on_refused: Called if the server refuses the inbox's subscription.
    """

    __slots__ = (
        "_nc",
        "_next",
        "_on_refused",
        "_on_reply",
        "_opening",
        "_prefix",
        "_sub",
        "_unlisten",
    )

    def __init__(
        self,
        nc: Client,
        on_reply: Callable[[str, Msg], Awaitable[None]],
        on_refused: Callable[[Refusal], None],
    ) -> None:
        self._nc = nc
        self._on_reply = on_reply
        self._on_refused = on_refused
        self._prefix = ""
        self._sub: Subscription | None = None
        self._opening: asyncio.Lock | None = None
        self._unlisten: Callable[[], None] | None = None
        self._next = 0

    @property
    def opened(self) -> bool:
        """Whether the inbox is subscribed."""
        return self._sub is not None

    async def open(self) -> None:
        """Subscribe the inbox (once; again after :meth:`close`).

        Raises:
            nats.errors.Error: The connection is closed or failed.
        """
        if self._sub is not None:
            return
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._sub is None:  # not opened by another caller meanwhile
                prefix = self._nc.new_inbox() + "."
                registry = refusals(self._nc)
                self._unlisten = registry.listen("subscribe", prefix + "*", self._on_refused)
                self._sub = await self._nc.subscribe(prefix + "*", cb=self._dispatch)
                self._prefix = prefix

    def new_token(self) -> tuple[str, str]:
        """A fresh token and the reply subject that carries it."""
        self._next += 1
        token = str(self._next)
        return token, self._prefix + token

    def reply_subject(self, token: str) -> str:
        """The reply subject that carries ``token``."""
        return self._prefix + token

    def token_of(self, reply: str) -> str:
        """The token of a reply subject made by :meth:`new_token`."""
        return reply[len(self._prefix) :]

    async def _dispatch(self, msg: Msg) -> None:
        await self._on_reply(msg.subject[len(self._prefix) :], msg)

    async def close(self) -> None:
        """Unsubscribe (if the connection is still open)."""
        sub, self._sub = self._sub, None
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        if sub is not None and not self._nc.is_closed:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
