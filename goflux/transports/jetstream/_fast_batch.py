"""Fast-ingest batch publishing (nats-server 2.14, ADR-50): many messages, few acks.

A fast batch is not atomic: the stream stores each message as it comes, and the
server acknowledges only every N-th one. Each message carries the batch's state in
its reply subject, ``<inbox>.<id>.<flow>.<gap>.<seq>.<op>.$FI``: ``flow`` is the
most messages per ack the client allows, ``gap`` is ``fail`` here (a lost or refused
message ends the batch, so what is stored is always the batch's first messages, in
order, none missing), ``seq`` counts from 1, and ``op`` is 0 for the first message,
1 for the ones after it, 2 for the last (store it and commit) and 4 for a ping. One
subscription on ``<inbox>.<id>.>`` takes every answer:

- ``{"type":"ack","seq":S,"msgs":N}``: messages up to ``S`` are stored; from now on an
  ack comes every ``N`` messages (the server sets ``N``, at most ``flow``). The first
  message gets one with ``S`` 0 before anything else is sent: the server's go-ahead.
- ``{"type":"gap",...}`` and ``{"type":"err","seq":S,"error":{...}}``: a message was
  lost or refused (a stream limit, an expectation); the server ends the batch.
- a PubAck with ``"batch"`` and ``"count"``: the batch ended; ``count`` messages were
  stored, the last under ``seq``. A plain error reply refuses one message outright.

The client sends until ``acked + N * outstanding`` messages are out, then waits for
the next ack: so at most that many messages (and their telemetry scopes) are held,
and a slow stream slows the client down instead of losing messages. When the batch
ends early the client pings (op 4) so the server commits what it has and says how
many messages that is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import APIError
from nats.nuid import NUID

from goflux._errors import GofluxError, PublishError
from goflux._otel.scopes import NullScope, PublishScope, PublishScopes
from goflux._subjects import tokens_match
from goflux._wire import check_size
from goflux.transports._refusals import Refusal, Refusals
from goflux.transports.jetstream._api import ApiCall, api_request, provisioning_error
from goflux.transports.jetstream._errors import StreamFeatureDisabled
from goflux.transports.jetstream._features import FAST_BATCH, require, unsupported
from goflux.transports.jetstream._replies import no_stream, refused, send_error
from goflux.transports.jetstream._status import (
    FAST_BATCH_DISABLED,
    FAST_BATCH_UNKNOWN,
    NO_RESPONDERS,
)

__all__ = (
    "DEFAULT_FLOW",
    "DEFAULT_OUTSTANDING",
    "FastBatchError",
    "FastBatchReceipt",
    "FastBatchSender",
    "Prepared",
    "SubjectOutsideStream",
)

T = TypeVar("T")

DEFAULT_FLOW: Final = 1_000
"""Most messages per ack the client allows (nats-server 2.14 caps it at 500 itself)."""
DEFAULT_OUTSTANDING: Final = 2
"""Acks a client may be waiting for at once (ADR-50: 2 suits most uses)."""
_MAX_FLOW: Final = 65_535
_MAX_OUTSTANDING: Final = 3
_IDS = NUID()
_SUFFIX: Final = "$FI"
_START, _APPEND, _COMMIT, _PING = 0, 1, 2, 4
_END: Final[Any] = object()  # the end of a plain iterable
_SUBJECTS_KEPT: Final = 4_096


@dataclass(frozen=True, slots=True, kw_only=True)
class FastBatchReceipt:
    """The server's confirmation that a fast batch was stored whole.

    The batch's messages are stored in order; their sequences are increasing and end
    at ``last_sequence``. They are consecutive unless another client published to
    the stream at the same time (a fast batch is not atomic: others interleave).

    Attributes:
        stream: The stream that stored the batch.
        batch_id: The batch's ID (the server's ``batch``).
        count: Messages of the batch the stream took, all of them (a message whose
            ``message_id`` was already stored counts, stored once).
        last_sequence: The stream sequence of the batch's last message stored anew (0
            when every message was a duplicate: the server stored none again).
        domain: The JetStream domain, when the server reports one.
    """

    stream: str
    batch_id: str
    count: int
    last_sequence: int
    domain: str | None = None


class FastBatchError(PublishError):
    """A fast batch ended before all its messages were stored: the gap report.

    The batch's first ``stored`` messages are stored, in order, none missing (the
    server ends a batch at its first lost or refused message). When ``may_be_stored``
    is False, none after them is. When it is True the outcome of the messages from
    ``stored`` up to ``sent`` is unknown (no answer came: a timeout, a closed
    connection): each may or may not be stored; publish them again with their
    message IDs so the server de-duplicates them.

    Attributes:
        stream: The batch's stream.
        batch_id: The batch's ID.
        stored: How many of the batch's first messages are known to be stored.
        sent: How many messages were sent; any after them were not.
        index: The position (from 0) of the message that ended the batch (refused,
            lost, or bad input), if one did.
        last_sequence: The stream sequence of the last message stored, when the
            server said (its PubAck).
    """

    def __init__(
        self,
        message: str,
        *,
        subject: str,
        stream: str,
        batch_id: str,
        stored: int,
        sent: int,
        index: int | None,
        last_sequence: int | None,
        may_be_stored: bool,
        err_code: int | None = None,
    ) -> None:
        super().__init__(message, subject=subject, may_be_stored=may_be_stored, err_code=err_code)
        self.stream = stream
        self.batch_id = batch_id
        self.stored = stored
        self.sent = sent
        self.index = index
        self.last_sequence = last_sequence


class SubjectOutsideStream(PublishError):
    """A message of a fast batch goes to a subject its stream does not take.

    A fast batch goes to one stream; every message's subject must be one of that
    stream's subjects. Raised before the message is sent.

    Attributes:
        stream: The batch's stream.
        subjects: The stream's subjects.
    """

    def __init__(self, message: str, *, subject: str, stream: str, subjects: tuple[str, ...]):
        super().__init__(message, subject=subject, permanent=True)
        self.stream = stream
        self.subjects = subjects


@dataclass(frozen=True, slots=True)
class Prepared:
    """One message ready to send: subject, body, wire headers, message ID."""

    subject: str
    data: bytes
    wire: dict[str, str]
    message_id: str | None


# ------------------------------------------------------------------ the answers


class _Control:
    """What the server answered on the batch's inbox so far."""

    __slots__ = (
        "acked",
        "final",
        "first",
        "gap",
        "lost",
        "msgs",
        "plain",
        "problem",
        "stopped",
        "subject_of",
        "wake",
    )

    def __init__(self, subject_of: Callable[[int], str]) -> None:
        self.subject_of = subject_of
        self.acked = 0  # messages up to this batch sequence are stored
        self.msgs = 1  # the server acks every msgs messages
        self.first = False  # the server's go-ahead (ack of sequence 0) came
        self.final: dict[str, Any] | None = None  # the batch's PubAck
        self.gap: tuple[int, int] | None = None  # (expected, got) of the first gap
        self.problem: tuple[int, PublishError] | None = None  # the earliest refusal
        self.plain: int | None = None  # a plain PubAck: the server stored message 1 alone
        self.lost = False  # the server forgot the batch (it timed out)
        self.stopped = False
        self.wake = asyncio.Event()

    @property
    def ended(self) -> bool:
        """No further answer is due: the PubAck came, or nothing will."""
        return self.final is not None or self.plain is not None or self.lost

    def on_msg(self, msg: Msg) -> None:
        """Take one answer (every message of the inbox lands here)."""
        parts = msg.subject.rsplit(".", 3)
        seq, op = (int(parts[1]), int(parts[2])) if len(parts) == 4 else (0, -1)
        headers = msg.headers
        if headers and headers.get("Status") == NO_RESPONDERS:
            self._refuse(seq, no_stream(self.subject_of(seq)), alone=seq == 1)
            return
        try:
            reply = json.loads(msg.data)
            kind = reply.get("type")
        except (ValueError, AttributeError):
            self._refuse(seq, self._unreadable(seq, msg.data), alone=False)
            return
        if kind == "ack":
            acked = int(reply.get("seq", 0))
            self.first = True
            if acked >= self.acked:
                self.acked = acked
                self.msgs = max(int(reply.get("msgs", 1)), 1)
        elif kind == "gap":
            if self.gap is None:
                self.gap = (int(reply.get("last_seq", 0)), int(reply.get("seq", 0)))
            self.stopped = True
        elif kind == "err":
            at = int(reply.get("seq", 0))
            self._refuse(at, self._refusal(at, reply.get("error") or {}, None), alone=False)
        elif (error := reply.get("error")) is not None:
            if op == _PING and error.get("err_code") == FAST_BATCH_UNKNOWN:
                self.lost = True  # the batch is gone: timed out at the server
                self.stopped = True
            else:
                # Refused outright; the first message's refusal means no batch began.
                self._refuse(seq, self._refusal(seq, error, reply.get("stream")), alone=seq == 1)
        elif "batch" in reply:
            self.final = reply
            self.stopped = True
        else:
            self.plain = int(reply.get("seq", 0))  # a server that does not know fast batches
            self.stopped = True
        self.wake.set()

    def _refusal(self, seq: int, error: Mapping[str, Any], stream: str | None) -> PublishError:
        return refused(
            self.subject_of(seq),
            error.get("code"),
            error.get("err_code"),
            error.get("description", ""),
            stream,
        )

    def _unreadable(self, seq: int, data: bytes) -> PublishError:
        subject = self.subject_of(seq)
        return PublishError(
            f"publish to {subject!r}: unreadable answer {bytes(data[:100])!r}",
            subject=subject,
            may_be_stored=True,
        )

    def _refuse(self, seq: int, error: PublishError, *, alone: bool) -> None:
        if self.problem is None or seq < self.problem[0]:
            self.problem = (seq, error)
        self.stopped = True
        if alone:
            self.lost = True  # nothing was begun: no PubAck will come
        self.wake.set()


# ------------------------------------------------------------------ the sender


class _Items(Generic[T]):
    """The messages one at a time, sync or async, with the position of each."""

    __slots__ = ("_aiter", "_iter", "index", "sync")

    def __init__(self, messages: Iterable[T] | AsyncIterable[T]) -> None:
        self._aiter: AsyncIterator[T] | None = None
        self._iter: Iterator[T] | None = None
        if isinstance(messages, AsyncIterable):
            self._aiter = aiter(messages)
        else:
            self._iter = iter(messages)
        self.sync = self._iter is not None
        self.index = -1

    def next_sync(self) -> tuple[bool, T | None]:
        """(True, the next item), or (False, None) at the end, of a plain iterable."""
        assert self._iter is not None
        item = next(self._iter, _END)
        if item is _END:
            return False, None
        self.index += 1
        return True, item

    async def next(self) -> tuple[bool, T | None]:
        """(True, the next item), or (False, None) at the end."""
        try:
            if self._aiter is not None:
                item = await anext(self._aiter)
            else:
                assert self._iter is not None
                item = next(self._iter)
        except (StopIteration, StopAsyncIteration):
            return False, None
        self.index += 1
        return True, item


class FastBatchSender(Generic[T]):
    """Sends one fast batch for a :class:`~goflux.transports.jetstream.Publisher`.

    Args:
        js: The JetStream context.
        scopes: The publisher's telemetry scopes (one per message, as for
            ``publish_many``).
        refusals: The connection's refusals (a refused subject or inbox fails the batch).
        prepare: Checks and encodes message ``index``; raises what bad input raises.
        stream: The stream, or None to look it up from the first message's subject.
        flow: Most messages per ack (the server may ask for fewer).
        outstanding: Acks the client may be waiting for at once (1 to 3).
        timeout: Seconds to wait for an ack or the batch's PubAck.
    """

    def __init__(
        self,
        js: JetStreamContext,
        nc: Client,
        scopes: PublishScopes,
        refusals: Refusals,
        prepare: Callable[[T, int], Prepared],
        *,
        stream: str | None,
        flow: int,
        outstanding: int,
        timeout: float,
    ) -> None:
        if not 1 <= flow <= _MAX_FLOW:
            raise ValueError(f"flow must be 1..{_MAX_FLOW} messages per ack, got {flow}")
        if not 1 <= outstanding <= _MAX_OUTSTANDING:
            raise ValueError(f"outstanding must be 1..{_MAX_OUTSTANDING} acks, got {outstanding}")
        self._js = js
        self._nc = nc
        self._scopes = scopes
        self._refusals = refusals
        self._prepare = prepare
        self._stream = stream
        self._flow = flow
        self._outstanding = outstanding
        self._timeout = timeout
        self._id = _IDS.next().decode()
        self._pending: deque[tuple[int, str, PublishScope | NullScope]] = deque()
        self._first_subject = ""

    # -------------------------------------------------------------- before sending

    async def _stream_of(self, subject: str) -> tuple[str, tuple[str, ...]]:
        """The stream's name and subjects, checked to allow fast batches.

        Raises:
            StreamNotFound: The named stream does not exist.
            PublishError: No stream takes ``subject``.
            StreamFeatureDisabled: The stream lacks ``allow_batched``.
        """
        name = self._stream
        what = f"fast batch to {subject!r}"
        if name is None:
            with ApiCall(self._js, what, "STREAM.NAMES"):
                try:
                    found = await api_request(self._js, "STREAM.NAMES", {"subject": subject})
                except APIError as exc:
                    raise provisioning_error(exc, what) from exc
            names = found.get("streams") or []
            if not names:
                raise no_stream(subject)
            name = str(names[0])
        what = f"fast batch to stream {name!r}"
        tail = f"STREAM.INFO.{name}"
        with ApiCall(self._js, what, tail):
            try:
                info = await api_request(self._js, tail)
            except APIError as exc:
                raise provisioning_error(exc, what) from exc
        config = info.get("config") or {}
        if not config.get("allow_batched"):
            raise _disabled(name, subject, "")
        subjects = tuple(config.get("subjects") or [name])
        return name, subjects

    # -------------------------------------------------------------- sending

    async def send(self, messages: Iterable[T] | AsyncIterable[T]) -> FastBatchReceipt:
        """Send ``messages`` as one fast batch and wait for its PubAck.

        Raises:
            what :meth:`Publisher.publish_fast` documents.
        """
        items: _Items[T] = _Items(messages)
        more, item = await items.next()
        if not more:
            raise ValueError("publish_fast needs at least one message")
        current = self._prepare(item, 0)  # type: ignore[arg-type]
        require(self._nc, FAST_BATCH, "fast batch publish", subject=current.subject)
        stream, subjects = await self._stream_of(current.subject)
        self._stream = stream
        check = _StreamSubjects(stream, subjects)
        check(current, 0)
        self._first_subject = current.subject
        prefix = self._nc.new_inbox()
        control = _Control(self._subject_of)
        inbox = f"{prefix}.{self._id}.>"
        base = f"{prefix}.{self._id}.{self._flow}.fail."

        async def on_msg(msg: Msg) -> None:
            control.on_msg(msg)

        what = f"fast batch {self._id!r} to stream {stream!r}"
        sub = None
        sent = 0
        bad: tuple[int, BaseException] | None = None
        failure: BaseException | None = None
        try:
            with (
                self._refusals.guard("publish", "", what, accept=check.accept),
                self._refusals.guard("subscribe", inbox, f"{what}: its inbox"),
            ):
                sub = await self._nc.subscribe(inbox, cb=on_msg)
                sent, bad = await self._send_all(items, current, check, control, base)
                await self._finish(control, sent, base)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            if sub is not None and not self._nc.is_closed:
                with contextlib.suppress(nats.errors.Error):
                    await sub.unsubscribe()
            if failure is not None:
                self._close_scopes(control.acked, failure)
        return self._outcome(control, stream, sent, bad)

    async def _send_all(
        self,
        items: _Items[T],
        current: Prepared,
        check: _StreamSubjects,
        control: _Control,
        base: str,
    ) -> tuple[int, tuple[int, BaseException] | None]:
        """Send the messages until the last, bad input or the batch's end; (sent, bad).

        The hot loop: per message one prepare, one scope, one ``nc.publish``; the
        window is awaited only when it is full (or for the server's go-ahead).
        """
        nc, prepare, pending, outstanding = (
            self._nc,
            self._prepare,
            self._pending,
            self._outstanding,
        )
        open_scope = self._scopes.open
        limit = nc.max_payload
        seq = 0
        bad: tuple[int, BaseException] | None = None
        while True:
            # Look one ahead: the last message is sent as the commit.
            nxt: Prepared | None = None
            more, item = items.next_sync() if items.sync else await items.next()
            if more:
                try:
                    nxt = check(prepare(item, items.index), items.index)  # type: ignore[arg-type]
                except (GofluxError, ValueError, TypeError) as exc:
                    bad = (items.index, exc)
            seq += 1
            op = _COMMIT if nxt is None else (_START if seq == 1 else _APPEND)
            subject, data, wire = current.subject, current.data, current.wire
            scope = open_scope(subject, wire, message_id=current.message_id)
            scope.__enter__()  # injects the trace context into wire
            scope.set_body_size(len(data))
            pending.append((seq, subject, scope))
            check_size(subject, wire, data, limit)
            try:
                await nc.publish(
                    subject, data, reply=f"{base}{seq}.{op}.{_SUFFIX}", headers=wire or None
                )
            except nats.errors.Error as exc:
                cause = send_error(subject, exc, nc)
                if seq == 1:
                    raise cause from exc
                raise self._broken(control, seq, cause) from cause
            if nxt is None:
                return seq, bad
            if (
                control.stopped
                or (seq == 1 and not control.first)
                or control.acked + control.msgs * outstanding <= seq
            ) and not await self._window(control, seq, base):
                return seq, bad
            current = nxt

    def _broken(self, control: _Control, seq: int, cause: PublishError) -> FastBatchError:
        """The gap report of a batch whose message ``seq`` could not be sent."""
        stored = control.acked
        error = FastBatchError(
            f"fast batch {self._id!r} to stream {self._stream!r} broke off: item {seq - 1} "
            f"could not be sent ({cause}). The first {stored} items are stored, in order; "
            f"items {stored}..{seq - 1} may or may not be stored (publish them again with "
            "their message IDs so the server de-duplicates them); none after was sent",
            subject=cause.subject,
            stream=self._stream or "",
            batch_id=self._id,
            stored=stored,
            sent=seq,
            index=seq - 1,
            last_sequence=None,
            may_be_stored=True,
        )
        self._close_scopes(stored, error)
        return error

    async def _window(self, control: _Control, seq: int, base: str) -> bool:
        """Wait until another message may go; False once the batch has ended early."""
        pinged = False
        while not control.stopped:
            if seq == 1 and not control.first:
                due = True  # the server's go-ahead comes first
            else:
                due = control.acked + control.msgs * self._outstanding <= seq
            if not due:
                break
            control.wake.clear()
            try:
                await asyncio.wait_for(control.wake.wait(), self._timeout)
            except TimeoutError:
                if pinged:
                    control.stopped = True  # no answer: what was stored is unknown
                    break
                await self._ping(seq, base)  # lost acks: ask for the latest again
                pinged = True
        self._settle_scopes(control.acked)
        return not control.stopped

    async def _ping(self, seq: int, base: str) -> None:
        reply = f"{base}{seq}.{_PING}.{_SUFFIX}"
        try:
            await self._nc.publish(self._first_subject, b"", reply=reply)
        except nats.errors.Error as exc:
            raise send_error(self._first_subject, exc, self._nc) from exc

    async def _finish(self, control: _Control, seq: int, base: str) -> None:
        """Wait for the batch's PubAck; ping once when it ended early or nothing comes."""
        pinged = False
        while not control.ended:
            if control.stopped and not pinged:
                await self._ping(seq, base)  # make the server commit what it has
                pinged = True
            control.wake.clear()
            try:
                await asyncio.wait_for(control.wake.wait(), self._timeout)
            except TimeoutError:
                if pinged:
                    return
                await self._ping(seq, base)
                pinged = True

    # -------------------------------------------------------------- telemetry

    def _subject_of(self, seq: int) -> str:
        for sent, subject, _ in self._pending:
            if sent == seq:
                return subject
        return self._pending[-1][1] if self._pending else self._first_subject

    def _settle_scopes(self, acked: int) -> None:
        """End the scopes of the messages the server acknowledged as stored."""
        pending = self._pending
        while pending and pending[0][0] <= acked:
            pending.popleft()[2].__exit__(None, None, None)

    def _close_scopes(self, stored: int, error: BaseException | None) -> None:
        """End every scope left: stored ones as sent, the others with ``error``."""
        self._settle_scopes(stored)
        while self._pending:
            scope = self._pending.popleft()[2]
            if error is None:
                scope.__exit__(None, None, None)
            else:
                scope.__exit__(type(error), error, None)

    # -------------------------------------------------------------- the outcome

    def _outcome(
        self, control: _Control, stream: str, sent: int, bad: tuple[int, BaseException] | None
    ) -> FastBatchReceipt:
        final = control.final
        if control.plain is not None and final is None:
            error: PublishError = unsupported(
                FAST_BATCH,
                f"fast batch {self._id!r} to stream {stream!r}",
                None,
                subject=self._first_subject,
                may_be_stored=True,
                after=(
                    f"it stored item 0 on its own as sequence {control.plain} and nothing "
                    "after it was sent. Publish to a stream on nats-server 2.14 or later"
                ),
            )
            self._close_scopes(1, error)
            raise error
        if final is not None:
            count = int(final.get("count", 0))
            last = int(final.get("seq", 0))
            if (
                control.problem is None
                and control.gap is None
                and bad is None
                and count == sent
                and final.get("batch") == self._id
            ):
                self._close_scopes(count, None)
                return FastBatchReceipt(
                    stream=str(final.get("stream", stream)),
                    batch_id=self._id,
                    count=count,
                    last_sequence=last,
                    domain=final.get("domain"),
                )
            error = self._gap_error(control, stream, sent, count, last or None, bad, unknown=False)
            self._close_scopes(count, error)
            raise error from self._cause(control, bad)
        # No PubAck: refused before a batch began, or no answer at all.
        if control.problem is not None and control.problem[0] == 1 and control.lost:
            cause = control.problem[1]
            if isinstance(cause, StreamFeatureDisabled) or cause.err_code == FAST_BATCH_DISABLED:
                error = _disabled(stream, self._first_subject, f" ({cause})")
            else:
                error = self._gap_error(control, stream, sent, 0, None, bad, unknown=False)
            self._close_scopes(0, error)
            raise error from cause
        error = self._gap_error(control, stream, sent, control.acked, None, bad, unknown=True)
        self._close_scopes(control.acked, error)
        raise error from self._cause(control, bad)

    @staticmethod
    def _cause(control: _Control, bad: tuple[int, BaseException] | None) -> BaseException | None:
        if control.problem is not None and not _gap_first(control):
            return control.problem[1]
        return bad[1] if bad is not None else None

    def _gap_error(
        self,
        control: _Control,
        stream: str,
        sent: int,
        stored: int,
        last: int | None,
        bad: tuple[int, BaseException] | None,
        *,
        unknown: bool,
    ) -> FastBatchError:
        head = f"fast batch {self._id!r} to stream {stream!r}"
        index: int | None = None
        reason = ""
        err_code: int | None = None
        subject = self._pending[-1][1] if self._pending else self._first_subject
        if control.problem is not None and not _gap_first(control):
            seq, cause = control.problem
            index, subject, err_code = seq - 1, cause.subject, cause.err_code
            reason = f"item {index} (to {subject!r}) was refused: {cause}"
        elif control.gap is not None:
            index = control.gap[0] - 1
            reason = (
                f"the server missed item {index} (a message lost on the way; got "
                f"item {control.gap[1] - 1} after it)"
            )
        elif bad is not None:
            index = bad[0]
            reason = f"item {index} is bad input and was not sent: {bad[1]}"
        elif control.lost:
            reason = "the server no longer knows the batch (it timed out)"
        else:
            reason = f"no answer from the server within {self._timeout}s"
        if self._nc.is_closed:
            reason += "; the connection is closed"
        kept = (
            "none is stored"
            if not stored
            else "item 0 is stored"
            if stored == 1
            else f"items 0..{stored - 1} are stored, in order"
        )
        if last:
            kept += f" (the last at sequence {last})"
        if unknown:
            fate = (
                f"{kept}; items {stored}..{sent - 1} may or may not be stored (publish them "
                "again with their message IDs so the server de-duplicates them)"
            )
        else:
            fate = f"{kept}; items from {stored} on are not stored"
        return FastBatchError(
            f"{head} ended early: {reason}. {fate}",
            subject=subject or self._first_subject,
            stream=stream,
            batch_id=self._id,
            stored=stored,
            sent=sent,
            index=index,
            last_sequence=last,
            may_be_stored=unknown and sent > stored,
            err_code=err_code,
        )


def _gap_first(control: _Control) -> bool:
    """Whether a lost message ended the batch before a refused one did.

    A message the server refused outright leaves a gap at itself: the refusal says why.
    Refusals after the gap (``batch unknown`` once the batch ended) are its consequence.
    """
    gap, problem = control.gap, control.problem
    return gap is not None and (problem is None or gap[0] < problem[0])


class _StreamSubjects:
    """Checks that a message goes to one of the stream's subjects."""

    __slots__ = ("_patterns", "_seen", "stream", "subjects")

    def __init__(self, stream: str, subjects: tuple[str, ...]) -> None:
        self.stream = stream
        self.subjects = subjects
        self._patterns = [tuple(p.split(".")) for p in subjects]
        self._seen: dict[str, bool] = {}  # a batch's subjects repeat: each is matched once

    def takes(self, subject: str) -> bool:
        """Whether the stream takes ``subject``."""
        known = self._seen.get(subject)
        if known is None:
            tokens = subject.split(".")
            known = any(tokens_match(p, tokens) for p in self._patterns)
            if len(self._seen) < _SUBJECTS_KEPT:
                self._seen[subject] = known
        return known

    def accept(self, refusal: Refusal) -> bool:
        """Whether a refused publish concerns this stream's subjects."""
        return self.takes(refusal.subject)

    def __call__(self, prepared: Prepared, index: int) -> Prepared:
        """``prepared``, once its subject is checked.

        Raises:
            SubjectOutsideStream: The stream does not take it.
        """
        if not self.takes(prepared.subject):
            raise SubjectOutsideStream(
                f"fast batch to stream {self.stream!r}: item {index} goes to "
                f"{prepared.subject!r}, which is not one of the stream's subjects "
                f"{list(self.subjects)}; a fast batch goes to one stream",
                subject=prepared.subject,
                stream=self.stream,
                subjects=self.subjects,
            )
        return prepared


def _disabled(stream: str, subject: str, why: str) -> StreamFeatureDisabled:
    return StreamFeatureDisabled(
        f"fast batch to {subject!r} refused, nothing stored: stream {stream!r} does not "
        f"allow fast batches{why}; set it with "
        f"ensure_stream(js, name={stream!r}, ..., allow_batched=True)",
        subject=subject,
        stream=stream,
        setting="allow_batched",
    )
