"""Fast-ingest batch publishing (nats-server 2.14, ADR-50): many messages, few acks.

A fast batch is not atomic: the stream stores each message as it comes, and the
server acknowledges only every N-th one. Each message carries the batch's state in
its reply subject, ``<inbox>.<id>.<flow>.<gap>.<seq>.<op>.$FI``: ``flow`` is the
most messages per ack the client allows, ``gap`` is ``fail`` here (a lost or refused
message ends the batch, so what is stored is always the batch's first messages, in
order, none missing), ``seq`` counts from 1, and ``op`` is 0 for the first message,
1 for the ones after it, 2 for the last (store it and commit), 3 for an end without a
message (commit what came) and 4 for a ping (keep the batch alive, resend the latest
ack). One subscription on ``<inbox>.<id>.>`` takes every answer:

- ``{"type":"ack","seq":S,"msgs":N}``: messages up to ``S`` are stored; from now on an
  ack comes every ``N`` messages (the server sets ``N``, at most ``flow``). The first
  message gets one with ``S`` 0 before anything else is sent: the server's go-ahead.
- ``{"type":"gap",...}`` and ``{"type":"err","seq":S,"error":{...}}``: a message was
  lost or refused (a stream limit, an expectation); the server ends the batch.
- a PubAck with ``"batch"`` and ``"count"``: the batch ended; ``count`` messages were
  stored, the last under ``seq``. A plain error reply refuses one message outright;
  10208 (batch unknown) means the server forgot the batch: it does after its batch
  timeout without a message (10 s unless the server's ``jetstream.limits.batch.timeout``
  says otherwise), and when it restarts.

The client sends until ``acked + N * outstanding`` messages are out, then waits for
the next ack: so at most that many messages (and their telemetry scopes) are held,
and a slow stream slows the client down instead of losing messages. A batch that
ends without its last message sent as the commit (no answer in time, the caller
cancelled) gets an end (op 3), so the server commits what came, says how many that
is, and does not hold the batch open until its timeout. While the message source
keeps the batch waiting, the client pings (op 4) so the server does not forget it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, NamedTuple, TypeVar

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import APIError
from nats.nuid import NUID

from goflux._errors import GofluxError, PayloadTooLarge, PublishError
from goflux._otel.scopes import NullScope, PublishScope, PublishScopes
from goflux._subjects import tokens_match
from goflux._wire import check_size
from goflux.transports._refusals import Refusal, Refusals
from goflux.transports.jetstream._api import ApiCall, api_request, provisioning_error
from goflux.transports.jetstream._errors import (
    FastBatchError,
    StreamFeatureDisabled,
    SubjectOutsideStream,
)
from goflux.transports.jetstream._features import FAST_BATCH, require, unsupported
from goflux.transports.jetstream._replies import no_stream, refused, send_error
from goflux.transports.jetstream._status import (
    FAST_BATCH_DISABLED,
    FAST_BATCH_TOO_MANY,
    FAST_BATCH_UNKNOWN,
    NO_RESPONDERS,
)

__all__ = (
    "DEFAULT_FLOW",
    "DEFAULT_KEEPALIVE",
    "DEFAULT_OUTSTANDING",
    "FastBatchReceipt",
    "FastBatchSender",
    "Prepared",
)

T = TypeVar("T")

DEFAULT_FLOW: Final = 1_000
"""Most messages per ack the client allows (nats-server 2.14 caps it at 500 itself)."""
DEFAULT_OUTSTANDING: Final = 2
"""Acks a client may be waiting for at once (ADR-50: 2 suits most uses)."""
DEFAULT_KEEPALIVE: Final = 5.0
"""Seconds a batch may go without a message before the client pings it: half the
server's default batch timeout (10 s), after which it forgets the batch."""
_MAX_FLOW: Final = 65_535
_MAX_OUTSTANDING: Final = 3
_IDS = NUID()
_SUFFIX: Final = "$FI"
_START, _APPEND, _COMMIT, _END_BATCH, _PING = 0, 1, 2, 3, 4
_END: Final[Any] = object()  # the end of a plain iterable
_SUBJECTS_KEPT: Final = 4_096
_FORGOT: Final = (
    "the server forgot the batch: it forgets one after its batch timeout without a "
    "message (10 s unless the server's jetstream.limits.batch.timeout says otherwise; "
    "keep keepalive= below half of it) and when it restarts"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FastBatchReceipt:
    """The server's confirmation that a fast batch was stored whole.

    The batch's messages are stored in order; their sequences are increasing and end
    at ``last_sequence``. They are consecutive unless another client published to
    the stream at the same time (a fast batch is not atomic: others interleave).

    Attributes:
        stream: The stream that stored the batch.
        batch_id: The batch's ID (the server's ``batch``).
        count: Messages of the batch the stream took, all of them, duplicates
            included (a message whose ``message_id`` was already stored counts, but is
            not stored again).
        last_sequence: The stream sequence of the batch's last message stored anew (0
            when every message was a duplicate: the server stored none again, for a
            batch of one message too).
        domain: The JetStream domain, when the server reports one.
    """

    stream: str
    batch_id: str
    count: int
    last_sequence: int
    domain: str | None = None


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
        "forgot",
        "gap",
        "lost",
        "msgs",
        "plain",
        "problem",
        "stopped",
        "stream",
        "subject_of",
        "wake",
    )

    def __init__(self, subject_of: Callable[[int], str], stream: str) -> None:
        self.subject_of = subject_of
        self.stream = stream
        self.acked = 0  # messages up to this batch sequence are stored
        self.msgs = 1  # the server acks every msgs messages
        self.first = False  # the server's go-ahead (ack of sequence 0) came
        self.final: dict[str, Any] | None = None  # the batch's PubAck
        self.gap: tuple[int, int] | None = None  # (expected, got) of the first gap
        # The earliest refusal: (batch sequence, error, the server's err_code).
        self.problem: tuple[int, PublishError, int | None] | None = None
        self.plain: int | None = None  # a plain PubAck: the server stored message 1 alone
        self.lost = False  # the server forgot the batch (it timed out, it restarted)
        self.forgot: int | None = None  # the first message the server did not know the batch for
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
            self._refuse(seq, no_stream(self.subject_of(seq)), None, alone=seq == 1)
            return
        try:
            reply = json.loads(msg.data)
            kind = reply.get("type")
        except (ValueError, AttributeError):
            self._refuse(seq, self._unreadable(seq, msg.data), None, alone=False)
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
            error = reply.get("error") or {}
            self._refuse(at, self._refusal(at, error, None), error.get("err_code"), alone=False)
        elif (error := reply.get("error")) is not None:
            self._error(seq, op, error, reply.get("stream"))
        elif "batch" in reply:
            self.final = reply
            self.stopped = True
        else:
            self.plain = int(reply.get("seq", 0))  # a server that does not know fast batches
            self.stopped = True
        self.wake.set()

    def _error(self, seq: int, op: int, error: Mapping[str, Any], stream: str | None) -> None:
        """A plain error reply to message (or ping) ``seq``."""
        err_code = error.get("err_code")
        if err_code == FAST_BATCH_UNKNOWN and (op == _PING or seq > 1):
            # The batch is gone (timed out, the server restarted, or it ended): a
            # message it did not take is not stored, nor any after it.
            self.lost = True
            self.stopped = True
            if op != _PING and (self.forgot is None or seq < self.forgot):
                self.forgot = seq
        else:
            # Refused outright; the first message's refusal means no batch began.
            self._refuse(seq, self._refusal(seq, error, stream), err_code, alone=seq == 1)

    def _refusal(self, seq: int, error: Mapping[str, Any], stream: str | None) -> PublishError:
        subject = self.subject_of(seq)
        err_code = error.get("err_code")
        description = error.get("description", "")
        if err_code == FAST_BATCH_TOO_MANY:
            # A 400, but it passes: a batch of the stream's ends, or times out.
            return PublishError(
                f"publish to {subject!r} refused: {description} (stream "
                f"{stream or self.stream!r} has as many fast batches open as the server "
                "allows, jetstream.limits.batch.max_inflight_per_stream; try again once "
                "one ends)",
                subject=subject,
                err_code=err_code,
            )
        return refused(subject, error.get("code"), err_code, description, stream or self.stream)

    def _unreadable(self, seq: int, data: bytes) -> PublishError:
        subject = self.subject_of(seq)
        return PublishError(
            f"publish to {subject!r}: unreadable answer {bytes(data[:100])!r}",
            subject=subject,
            may_be_stored=True,
        )

    def _refuse(self, seq: int, error: PublishError, err_code: int | None, *, alone: bool) -> None:
        if self.problem is None or seq < self.problem[0]:
            self.problem = (seq, error, err_code)
        self.stopped = True
        if alone:
            self.lost = True  # nothing was begun: no PubAck will come
        self.wake.set()


# ------------------------------------------------------------------ the sender


class _Bad(NamedTuple):
    """What ended the batch on the client's side before an item was sent."""

    at: int  # the item's position
    error: BaseException
    why: Literal["input", "source", "closed"]  # bad input, the source raised, closed


def _count(name: str, value: object, high: int, unit: str) -> int:
    if type(value) is not int:
        raise TypeError(f"{name} must be an int (1..{high} {unit}), got {value!r}")
    if not 1 <= value <= high:
        raise ValueError(f"{name} must be 1..{high} {unit}, got {value}")
    return value


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be seconds (a number > 0), got {value!r}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be seconds > 0, got {value!r}")
    return float(value)


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
        closed: Whether the publisher is closed (then ``prepare`` refuses every item).
        stream: The stream, or None to look it up from the first message's subject.
        flow: Most messages per ack (the server may ask for fewer).
        outstanding: Acks the client may be waiting for at once (1 to 3).
        timeout: Seconds to wait for an ack or the batch's PubAck.
        keepalive: Most seconds the batch goes without a message while the client
            waits for the next item: then it pings.

    Raises:
        TypeError: ``flow`` or ``outstanding`` is not an int, or a time not a number.
        ValueError: One is out of range (a time must be > 0).
    """

    def __init__(
        self,
        js: JetStreamContext,
        nc: Client,
        scopes: PublishScopes,
        refusals: Refusals,
        prepare: Callable[[T, int], Prepared],
        closed: Callable[[], bool],
        *,
        stream: str | None,
        flow: int,
        outstanding: int,
        timeout: float,
        keepalive: float = DEFAULT_KEEPALIVE,
    ) -> None:
        self._flow = _count("flow", flow, _MAX_FLOW, "messages per ack")
        self._outstanding = _count("outstanding", outstanding, _MAX_OUTSTANDING, "acks")
        self._timeout = _seconds("timeout", timeout)
        self._keepalive = _seconds("keepalive", keepalive)
        self._js = js
        self._nc = nc
        self._scopes = scopes
        self._refusals = refusals
        self._prepare = prepare
        self._closed = closed
        self._stream = stream
        self._no_ack = False
        self._id = _IDS.next().decode()
        self._pending: deque[tuple[int, str, PublishScope | NullScope]] = deque()
        self._first_subject = ""
        self._sent = 0  # messages sent so far
        self._ended = False  # the commit (the last message, or an end) was sent
        self._waiting = False  # waiting for the server's ack, not for the next item

    # -------------------------------------------------------------- before sending

    async def _stream_of(self, subject: str) -> tuple[str, tuple[str, ...], bool]:
        """The stream's name, subjects and ``no_ack``, checked to allow fast batches.

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
        return name, subjects, bool(config.get("no_ack"))

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
        stream, subjects, self._no_ack = await self._stream_of(current.subject)
        self._stream = stream
        check = _StreamSubjects(stream, subjects)
        check(current, 0)
        self._first_subject = current.subject
        prefix = self._nc.new_inbox()
        control = _Control(self._subject_of, stream)
        inbox = f"{prefix}.{self._id}.>"
        base = f"{prefix}.{self._id}.{self._flow}.fail."

        async def on_msg(msg: Msg) -> None:
            control.on_msg(msg)

        what = f"fast batch {self._id!r} to stream {stream!r}"
        sub = None
        sent = 0
        bad: _Bad | None = None
        failure: BaseException | None = None
        pinger: asyncio.Task[None] | None = None
        try:
            with (
                self._refusals.guard("publish", "", what, accept=check.accept),
                self._refusals.guard("subscribe", inbox, f"{what}: its inbox"),
            ):
                sub = await self._nc.subscribe(inbox, cb=on_msg)
                pinger = asyncio.create_task(self._keep_alive(control, base))
                try:
                    sent, bad = await self._send_all(items, current, check, control, base)
                finally:
                    pinger.cancel()
                await self._finish(control, sent, base)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            if pinger is not None:
                pinger.cancel()
            if self._sent and not self._ended and not control.ended and not self._nc.is_closed:
                # Ended without its commit (cancelled, the source or a send failed):
                # the server commits what came instead of holding the batch open.
                await self._end(base)
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
    ) -> tuple[int, _Bad | None]:
        """Send the messages until the last, bad input or the batch's end; (sent, bad).

        The hot loop: per message one prepare, one scope, one ``nc.publish``; the
        window is awaited only when it is full (or for the server's go-ahead). The
        next item is read and checked before the current one goes, so that the last
        good one is sent as the commit.
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
        bad: _Bad | None = None
        while True:
            # Look one ahead: the last message is sent as the commit.
            nxt: Prepared | None = None
            try:
                more, item = items.next_sync() if items.sync else await items.next()
            except Exception as exc:  # noqa: BLE001 - the source broke: what came is the batch
                more = False
                bad = _Bad(items.index + 1, exc, "source")
            if more:
                index = items.index
                try:
                    nxt = check(prepare(item, index), index)  # type: ignore[arg-type]
                    check_size(nxt.subject, nxt.wire, nxt.data, limit)
                except (GofluxError, ValueError, TypeError) as exc:
                    bad = _Bad(index, exc, "closed" if self._closed() else "input")
                    nxt = None
            seq += 1
            op = _COMMIT if nxt is None else (_START if seq == 1 else _APPEND)
            subject, data, wire = current.subject, current.data, current.wire
            scope = open_scope(subject, wire, message_id=current.message_id)
            scope.__enter__()  # injects the trace context into wire
            scope.set_body_size(len(data))
            pending.append((seq, subject, scope))
            try:
                check_size(subject, wire, data, limit)  # the trace context may tip it over
            except PayloadTooLarge as exc:
                if seq == 1:
                    raise
                await self._end(base)  # the one before it was the last
                return seq - 1, _Bad(seq - 1, exc, "input")
            try:
                await nc.publish(
                    subject, data, reply=f"{base}{seq}.{op}.{_SUFFIX}", headers=wire or None
                )
            except nats.errors.Error as exc:
                cause = send_error(subject, exc, nc)
                if seq == 1:
                    raise cause from exc
                raise self._broken(control, seq, cause) from cause
            self._sent = seq
            if nxt is None:
                self._ended = True
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
        fate = _fate(stored, None, seq if seq > stored else stored)
        error = FastBatchError(
            f"fast batch {self._id!r} to stream {self._stream!r} broke off: item {seq - 1} "
            f"could not be sent ({cause}). {fate}",
            subject=cause.subject,
            stream=self._stream or "",
            batch_id=self._id,
            stored=stored,
            sent=seq,
            index=seq - 1,
            last_sequence=None,
            may_be_stored=seq > stored,
            unknown_until=max(seq, stored),
        )
        self._close_scopes(stored, error)
        return error

    async def _window(self, control: _Control, seq: int, base: str) -> bool:
        """Wait until another message may go; False once the batch has ended early."""
        pinged = False
        self._waiting = True
        if seq == 1 and self._no_ack and not control.first:
            # A no_ack stream sends no go-ahead: ask for the first ack at once.
            pinged = True
            if not await self._ping(seq, base):
                control.stopped = True
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
                if pinged or not await self._ping(seq, base):  # lost acks: ask again
                    control.stopped = True  # no answer: what was stored is unknown
                    break
                pinged = True
        self._waiting = False
        self._settle_scopes(control.acked)
        return not control.stopped

    async def _keep_alive(self, control: _Control, base: str) -> None:
        """Ping the batch while the message source keeps it without a message.

        The server forgets a batch after its batch timeout without a message; a ping
        at the batch's last sequence resets that timer (and resends the latest ack).
        Checked every half ``keepalive``: a ping goes once a whole check found no
        message sent, so at most ``keepalive`` seconds pass without one.
        """
        seen = -1
        while not control.stopped:
            await asyncio.sleep(self._keepalive / 2)
            sent = self._sent
            if sent != seen:
                seen = sent
            elif sent and not self._ended and not self._waiting:
                await self._ping(sent, base)

    async def _ping(self, seq: int, base: str) -> bool:
        """Ask for the latest ack (and keep the batch alive); False if it cannot go."""
        return await self._signal(f"{base}{seq}.{_PING}.{_SUFFIX}")

    async def _end(self, base: str) -> bool:
        """End the batch after the messages sent: the server commits what came."""
        self._ended = True
        return await self._signal(f"{base}{self._sent + 1}.{_END_BATCH}.{_SUFFIX}")

    async def _signal(self, reply: str) -> bool:
        """Send a message without a body (a ping, an end); False if it could not go."""
        try:
            await self._nc.publish(self._first_subject, b"", reply=reply)
        except nats.errors.Error:
            return False
        return True

    async def _finish(self, control: _Control, seq: int, base: str) -> None:
        """Wait for the batch's PubAck.

        A batch the server has not ended (no answer came in time) gets an end, so its
        PubAck says how many messages it stored; one ping follows if nothing comes.
        """
        if (
            not self._ended
            and not control.ended
            and control.problem is None
            and not control.gap
            and not await self._end(base)
        ):
            return
        pinged = False
        while not control.ended:
            control.wake.clear()
            try:
                await asyncio.wait_for(control.wake.wait(), self._timeout)
            except TimeoutError:
                if pinged or not await self._ping(seq, base):
                    return
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
        self, control: _Control, stream: str, sent: int, bad: _Bad | None
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
            # A batch of one duplicate: the server names the sequence stored before.
            last = 0 if final.get("duplicate") else int(final.get("seq", 0))
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
    def _cause(control: _Control, bad: _Bad | None) -> BaseException | None:
        if control.problem is not None and not _gap_first(control):
            return control.problem[1]
        return bad.error if bad is not None else None

    def _gap_error(
        self,
        control: _Control,
        stream: str,
        sent: int,
        stored: int,
        last: int | None,
        bad: _Bad | None,
        *,
        unknown: bool,
    ) -> FastBatchError:
        head = f"fast batch {self._id!r} to stream {stream!r}"
        index: int | None = None
        err_code: int | None = None
        subject = self._pending[-1][1] if self._pending else self._first_subject
        upto = sent  # with no answer, the items from stored up to this one may be stored
        if control.problem is not None and not _gap_first(control):
            seq, cause, err_code = control.problem
            index, subject = seq - 1, cause.subject
            reason = f"item {index} (to {subject!r}) was refused: {cause}"
            upto = min(upto, index)
        elif control.gap is not None:
            index = control.gap[0] - 1
            reason = (
                f"the server missed item {index} (a message lost on the way; got "
                f"item {control.gap[1] - 1} after it)"
            )
            upto = min(upto, index)
        elif control.lost:
            reason = _FORGOT
        elif bad is not None:
            index = bad.at
            if bad.why == "source":
                reason = f"the message source raised at item {index}: {bad.error!r}"
            elif bad.why == "closed":
                reason = f"the publisher was closed before item {index} was sent"
            else:
                reason = f"item {index} is bad input and was not sent: {bad.error}"
        else:
            reason = f"no answer from the server within {self._timeout:g}s"
        if control.forgot is not None:
            upto = min(upto, control.forgot - 1)  # the server had forgotten it by then
        if not unknown or upto < stored:
            upto = stored
        if self._nc.is_closed:
            reason += "; the connection is closed"
        return FastBatchError(
            f"{head} ended early: {reason}. {_fate(stored, last, upto)}",
            subject=subject or self._first_subject,
            stream=stream,
            batch_id=self._id,
            stored=stored,
            sent=sent,
            index=index,
            last_sequence=last,
            may_be_stored=upto > stored,
            unknown_until=upto,
            err_code=err_code,
        )


def _span(first: int, end: int) -> str:
    """Items ``first`` up to (not including) ``end``, in words."""
    return f"item {first}" if end == first + 1 else f"items {first}..{end - 1}"


def _fate(stored: int, last: int | None, upto: int) -> str:
    """What is stored: the first ``stored`` items; those up to ``upto`` may be."""
    if not stored:
        kept = "none is stored"
    elif stored == 1:
        kept = "item 0 is stored"
    else:
        kept = f"{_span(0, stored)} are stored, in order"
    if last:
        kept += f" (the last at sequence {last})"
    if upto > stored:
        kept += (
            f"; {_span(stored, upto)} may or may not be stored (publish "
            f"{'it' if upto == stored + 1 else 'them'} again with the same message IDs so "
            "the server de-duplicates them)"
        )
    return f"{kept}; items from {upto} on are not stored"


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
