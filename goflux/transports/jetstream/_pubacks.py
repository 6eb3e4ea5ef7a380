"""A publisher's own reply inbox for pipelined PubAcks.

Each pipelined publish gets a reply subject under one wildcard subscription, and its
future resolves with the receipt, or fails with the server's refusal (its error code
and description, read here: nats-py's own pipelining raises a refusal inside its
reply callback and never resolves the caller's future), or with "no stream" when no
stream captures the subject.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from goflux._errors import PublishError
from goflux._receipt import PublishReceipt
from goflux.transports._refusals import Refusal, refusals
from goflux.transports.jetstream._replies import no_stream, receipt

__all__ = ("PubAcks",)

_NO_RESPONDERS = "503"


class PubAcks:
    """Reply subjects and futures for PubAcks awaited in a pipeline."""

    __slots__ = ("_nc", "_next", "_opening", "_pending", "_prefix", "_refused", "_sub", "_unlisten")

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._prefix = ""
        self._sub: Subscription | None = None
        self._opening: asyncio.Lock | None = None
        self._pending: dict[str, tuple[asyncio.Future[PublishReceipt], str]] = {}
        self._next = 0
        self._refused: Refusal | None = None
        self._unlisten: Callable[[], None] | None = None

    async def open(self) -> None:
        """Subscribe the inbox (once; again after :meth:`close`).

        Raises:
            PermissionDenied: The server refused the inbox.
            nats.errors.Error: The connection is closed or failed.
        """
        if self._refused is not None:
            raise self._refused.error("the inbox for PubAcks")
        if self._sub is not None:
            return
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._sub is None:
                prefix = self._nc.new_inbox()
                self._unlisten = refusals(self._nc).listen(
                    "subscribe", f"{prefix}.*", self._on_refused
                )
                self._sub = await self._nc.subscribe(f"{prefix}.*", cb=self._on_reply)
                self._prefix = prefix + "."

    def expect(self, subject: str) -> tuple[str, asyncio.Future[PublishReceipt]]:
        """A reply subject for a publish to ``subject``, and the future of its receipt."""
        self._next += 1
        token = str(self._next)
        future: asyncio.Future[PublishReceipt] = asyncio.get_running_loop().create_future()
        self._pending[token] = (future, subject)
        return self._prefix + token, future

    def forget(self, future: asyncio.Future[PublishReceipt], reply: str) -> None:
        """Stop waiting for the PubAck sent to ``reply`` (a late one is ignored)."""
        self._pending.pop(reply[len(self._prefix) :], None)
        if not future.done():
            future.cancel()

    def fail(self, reply: str, error: PublishError) -> None:
        """Fail the publish awaiting its PubAck on ``reply`` (a late PubAck is ignored)."""
        entry = self._pending.pop(reply[len(self._prefix) :], None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(error)

    def _on_refused(self, refusal: Refusal) -> None:
        """The server refused the inbox: no PubAck can come; every waiting publish fails.

        The publishes themselves went out and may have been stored.
        """
        self._refused = refusal
        pending, self._pending = self._pending, {}
        for future, subject in pending.values():
            if not future.done():
                what = f"publish to {subject!r}: the inbox for its PubAck"
                future.set_exception(refusal.error(what, may_be_stored=True))

    async def _on_reply(self, msg: Msg) -> None:
        entry = self._pending.pop(msg.subject[len(self._prefix) :], None)
        if entry is None:
            return  # late: its publish was given up
        future, subject = entry
        if future.done():
            return
        headers = msg.headers
        if headers and headers.get("Status") == _NO_RESPONDERS:
            future.set_exception(no_stream(subject))
            return
        try:
            future.set_result(receipt(msg.data, subject))
        except PublishError as refused:  # receipt() raises nothing else
            future.set_exception(refused)

    async def close(self) -> None:
        """Unsubscribe; publishes still waiting get "cancelled"."""
        sub, self._sub = self._sub, None
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        for future, _ in self._pending.values():
            if not future.done():
                future.cancel()
        self._pending.clear()
        if sub is not None and not self._nc.is_closed:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
