"""Atomic batch publishing (nats-server 2.12): every message of a batch stored, or none.

Each message carries ``Nats-Batch-Id`` and ``Nats-Batch-Sequence`` (from 1); the last
one also ``Nats-Batch-Commit: 1``. The stream (with ``allow_atomic``) holds the batch
until the commit and then stores all of it under one lock, or nothing: a refused
message, a gap, or a failed expectation abandons the whole batch. Every message is
sent as a request on :class:`AtomicReplies`' inbox, pipelined: the server answers each
with an empty reply, or with the error that abandoned the batch, so a failure names
the message that caused it. The commit's reply is the PubAck of the whole batch
(ADR-50): the sequence of its last message, the batch's ID (``batch``) and its size
(``count``).

The batch settles once every message has its reply, and every reply is checked: a
server that does not know atomic batches (before 2.12, such as one behind a leaf
node of a newer server) ignores the batch headers and stores each message on its
own, answering with a plain PubAck. Then no receipt is returned: the error says
which messages were stored, under which sequences.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.nuid import NUID

from goflux._errors import PublishError
from goflux._receipt import PublishReceipt
from goflux.transports._refusals import Refusal
from goflux.transports.jetstream._errors import (
    ExpectationFailed,
    InvalidSchedule,
    StreamFeatureDisabled,
)
from goflux.transports.jetstream._features import ATOMIC_BATCH, unsupported
from goflux.transports.jetstream._inbox import ReplyInbox
from goflux.transports.jetstream._replies import no_stream, receipt, refused
from goflux.transports.jetstream._status import ATOMIC_DUPLICATE_ID, NO_RESPONDERS

__all__ = ("AtomicBatch", "AtomicReplies", "batch_headers")

_IDS = NUID()
ATOMIC_SETTING = "allow_atomic"


def batch_headers(batch_id: str, sequence: int, *, commit: bool) -> dict[str, str]:
    """The ``Nats-Batch-*`` headers of message ``sequence`` (from 1) of a batch."""
    headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(sequence)}
    if commit:
        headers["Nats-Batch-Commit"] = "1"
    return headers


@dataclass(eq=False)
class AtomicBatch:
    """One batch in flight: its messages' subjects, the first refusal, the commit's reply."""

    subjects: Sequence[str]
    id: str = field(default_factory=lambda: _IDS.next().decode())
    failure: tuple[int, PublishError] | None = None  # the first refused message (index)
    commit: asyncio.Future[PublishReceipt] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    replies: int = 0  # replies received, one per message
    alone: dict[int, int] = field(default_factory=dict)  # index: sequence, stored on its own
    acked: tuple[PublishReceipt, object, object] | None = None  # the commit's PubAck

    def refused(self, index: int, error: PublishError) -> None:
        """Message ``index`` was refused; the earliest refusal is what went wrong."""
        if self.failure is None or index < self.failure[0]:
            self.failure = (index, error)

    def settle(self) -> None:
        """Resolve the commit once every message has its reply, from all of them."""
        if self.replies < len(self.subjects) or self.commit.done():
            return
        if self.alone:
            self.commit.set_exception(self._not_atomic())
        elif self.failure is not None:
            self.commit.set_exception(self.error())
        elif self.acked is not None:
            ack, batch, count = self.acked
            if batch != self.id or count != len(self.subjects):
                self.commit.set_exception(self._not_this_batch(ack, batch, count))
            else:
                self.commit.set_result(ack)

    def _not_atomic(self) -> PublishError:
        """Messages were stored one by one: the server does not know atomic batches."""
        stored = sorted(self.alone.items())
        listed = ", ".join(f"message {index + 1} as sequence {seq}" for index, seq in stored)
        refused = ""
        if self.failure is not None:
            index, cause = self.failure
            refused = f"; message {index + 1} was refused: {cause}"
        return unsupported(
            ATOMIC_BATCH,
            f"atomic batch {self.id!r} of {len(self.subjects)} messages",
            None,
            subject=self.subjects[stored[0][0]],
            may_be_stored=True,
            after=(
                f"it stored {len(stored)} of them one by one, not as a batch: {listed}"
                f"{refused}. Publish to a stream on nats-server 2.12 or later"
            ),
        )

    def _not_this_batch(self, ack: PublishReceipt, batch: object, count: object) -> PublishError:
        subject = self.subjects[-1]
        return PublishError(
            f"atomic batch {self.id!r} of {len(self.subjects)} messages: the commit's "
            f"PubAck (stream {ack.stream!r}, sequence {ack.sequence}) names batch "
            f"{batch!r} of {count!r} messages, not this one; what was stored is unknown: "
            "check the stream before publishing it again",
            subject=subject,
            may_be_stored=True,
            permanent=True,
        )

    def error(self) -> PublishError:
        """The error that abandoned the batch (the earliest refusal), worded for the batch.

        The refusal of the message is its cause (``__cause__``).
        """
        assert self.failure is not None
        index, cause = self.failure
        error = self._worded(index, cause)
        error.__cause__ = cause
        return error

    def _worded(self, index: int, cause: PublishError) -> PublishError:
        subject = self.subjects[index]
        where = f"atomic batch {self.id!r} of {len(self.subjects)} messages not stored"
        at = f"message {index + 1} (to {subject!r})"
        header_check = isinstance(cause, InvalidSchedule | StreamFeatureDisabled)
        if header_check and index and index == len(self.subjects) - 1:
            # The server checks every message's headers at the commit: the refusal may
            # be another message's.
            at += ", the commit, where the server checks every message's headers,"
        refused = f"{where}: {at} was refused: {cause}"
        if isinstance(cause, StreamFeatureDisabled):
            if cause.setting != ATOMIC_SETTING:  # a TTL, schedule, ... of that message
                return StreamFeatureDisabled(
                    refused, subject=subject, stream=cause.stream, setting=cause.setting
                )
            return StreamFeatureDisabled(
                f"{where}: stream {cause.stream!r} does not allow atomic batches; set it "
                f"with ensure_stream(js, name={cause.stream!r}, ..., {ATOMIC_SETTING}=True)",
                subject=subject,
                stream=cause.stream,
                setting=cause.setting,
            )
        if isinstance(cause, InvalidSchedule):  # the publisher names the schedule
            return InvalidSchedule(
                refused,
                subject=subject,
                stream=cause.stream,
                reason=cause.reason,
                err_code=cause.err_code,
            )
        if cause.err_code == ATOMIC_DUPLICATE_ID:
            # Found at the commit: the message it names is the commit, not the duplicate.
            return PublishError(
                f"{where}: a message ID of the batch repeats within it or is already in "
                "the stream's duplicate window (an earlier attempt of this batch may have "
                "been stored whole: check the stream before publishing it again)",
                subject=subject,
                permanent=True,
                err_code=cause.err_code,
            )
        if isinstance(cause, ExpectationFailed):
            # The server checks every message's expectations at the commit.
            return ExpectationFailed(
                f"{where}: an expectation of the batch did not hold at its commit: {cause}",
                subject=subject,
                expectation=cause.expectation,
            )
        return PublishError(
            refused, subject=subject, permanent=cause.permanent, err_code=cause.err_code
        )

    def receipts(self, last: PublishReceipt) -> list[PublishReceipt]:
        """Every message's receipt, from the commit's PubAck (the last one's sequence)."""
        first = last.sequence - len(self.subjects) + 1
        return [
            PublishReceipt(stream=last.stream, sequence=first + i, domain=last.domain)
            for i in range(len(self.subjects))
        ]


class AtomicReplies:
    """A publisher's inbox for the replies of its atomic batches' messages."""

    __slots__ = ("_inbox", "_pending", "_refused")

    def __init__(self, nc: Client) -> None:
        self._inbox = ReplyInbox(nc, self._on_reply, self._on_refused)
        self._pending: dict[str, tuple[AtomicBatch, int]] = {}
        self._refused: Refusal | None = None

    async def open(self) -> None:
        """Subscribe the inbox (once).

        Raises:
            PermissionDenied: The server refused the inbox.
            nats.errors.Error: The connection is closed or failed.
        """
        if self._refused is not None:
            raise self._refused.error("the inbox for atomic batch replies")
        await self._inbox.open()

    def expect(self, batch: AtomicBatch, index: int) -> str:
        """The reply subject for message ``index`` of ``batch``."""
        token, reply = self._inbox.new_token()
        self._pending[token] = (batch, index)
        return reply

    def forget(self, batch: AtomicBatch) -> None:
        """Stop waiting for ``batch``'s replies (late ones are ignored)."""
        for token in [t for t, (b, _) in self._pending.items() if b is batch]:
            del self._pending[token]
        if not batch.commit.done():
            batch.commit.cancel()

    def _on_refused(self, refusal: Refusal) -> None:
        self._refused = refusal
        pending, self._pending = self._pending, {}
        for batch, _ in pending.values():
            if not batch.commit.done():
                what = f"atomic batch {batch.id!r}: the inbox for its replies"
                batch.commit.set_exception(refusal.error(what, may_be_stored=True))

    async def _on_reply(self, token: str, msg: Msg) -> None:
        entry = self._pending.pop(token, None)
        if entry is None:
            return
        batch, index = entry
        batch.replies += 1
        subject = batch.subjects[index]
        headers = msg.headers
        if headers and headers.get("Status") == NO_RESPONDERS:
            batch.refused(index, no_stream(subject))
        elif index == len(batch.subjects) - 1:
            try:
                ack = receipt(msg.data, subject)
            except PublishError as exc:
                batch.refused(index, exc)
            else:
                reply = json.loads(msg.data)
                batch.acked = (ack, reply.get("batch"), reply.get("count"))
                if batch.acked[1] is None:  # a plain PubAck: stored on its own
                    batch.alone[index] = ack.sequence
        elif msg.data:  # a message before the commit: empty means accepted
            _answered(batch, index, subject, msg.data)
        batch.settle()

    async def close(self) -> None:
        """Unsubscribe; batches still waiting get "cancelled"."""
        for batch, _ in self._pending.values():
            if not batch.commit.done():
                batch.commit.cancel()
        self._pending.clear()
        await self._inbox.close()


def _answered(batch: AtomicBatch, index: int, subject: str, data: bytes) -> None:
    """Note the non-empty reply to message ``index`` before the commit.

    An error abandoned the batch; a PubAck means the server stored the message on its
    own (it does not know atomic batches).
    """
    try:
        reply = json.loads(data)
        error = reply.get("error")
        if error is None:
            batch.alone[index] = int(reply["seq"])
            return
        batch.refused(
            index,
            refused(
                subject,
                error.get("code"),
                error.get("err_code"),
                error.get("description", ""),
                reply.get("stream") or None,
            ),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        batch.refused(
            index,
            PublishError(
                f"publish to {subject!r}: unreadable reply {bytes(data[:100])!r}",
                subject=subject,
                may_be_stored=True,
                permanent=True,
            ),
        )
