"""A publisher's own reply inbox for pipelined PubAcks.

Each pipelined publish gets a reply subject under one wildcard subscription, and its
future resolves with the receipt, or fails with the server's refusal (its error code
and description, read here: nats-py's own pipelining raises a refusal inside its
reply callback and never resolves the caller's future), or with "no stream" when no
stream captures the subject.
"""

from __future__ import annotations

import asyncio

from nats.aio.client import Client
from nats.aio.msg import Msg

from goflux._errors import PublishError
from goflux._receipt import PublishReceipt
from goflux.transports._refusals import Refusal
from goflux.transports.jetstream._inbox import ReplyInbox
from goflux.transports.jetstream._replies import no_stream, receipt

__all__ = ("PubAcks",)

_NO_RESPONDERS = "503"


class PubAcks:
    """Reply subjects and futures for PubAcks awaited in a pipeline."""

    __slots__ = ("_inbox", "_pending", "_refused")

    def __init__(self, nc: Client) -> None:
        self._inbox = ReplyInbox(nc, self._on_reply, self._on_refused)
        self._pending: dict[str, tuple[asyncio.Future[PublishReceipt], str]] = {}
        self._refused: Refusal | None = None

    async def open(self) -> None:
        """Subscribe the inbox (once; again after :meth:`close`).

        Raises:
            PermissionDenied: The server refused the inbox.
            nats.errors.Error: The connection is closed or failed.
        """
        if self._refused is not None:
            raise self._refused.error("the inbox for PubAcks")
        await self._inbox.open()

    def expect(self, subject: str) -> tuple[str, asyncio.Future[PublishReceipt]]:
        """A reply subject for a publish to ``subject``, and the future of its receipt."""
        token, reply = self._inbox.new_token()
        future: asyncio.Future[PublishReceipt] = asyncio.get_running_loop().create_future()
        self._pending[token] = (future, subject)
        return reply, future

    def forget(self, future: asyncio.Future[PublishReceipt], reply: str) -> None:
        """Stop waiting for the PubAck sent to ``reply`` (a late one is ignored)."""
        self._pending.pop(self._inbox.token_of(reply), None)
        if not future.done():
            future.cancel()

    def fail(self, reply: str, error: PublishError) -> None:
        """Fail the publish awaiting its PubAck on ``reply`` (a late PubAck is ignored)."""
        entry = self._pending.pop(self._inbox.token_of(reply), None)
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

    async def _on_reply(self, token: str, msg: Msg) -> None:
        entry = self._pending.pop(token, None)
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
        for future, _ in self._pending.values():
            if not future.done():
                future.cancel()
        self._pending.clear()
        await self._inbox.close()
