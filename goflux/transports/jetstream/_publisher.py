"""Publishing to JetStream with acknowledgement."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, NamedTuple, TypeVar, overload

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux._codecs import Codec
from goflux._errors import PublishError
from goflux._facts import Facts
from goflux._headers import HeadersLike
from goflux._lifecycle import CloseOnExit, closed_publisher_error
from goflux._otel.scopes import NullScope, PublishScope, PublishScopes
from goflux._otel.telemetry import Telemetry
from goflux._receipt import PublishReceipt
from goflux._wire import check_size, outgoing
from goflux.transports._limits import in_flight_error
from goflux.transports._natspy import connection
from goflux.transports._refusals import Overflowed, Refusal, Refusals, closed_reason, refusals
from goflux.transports.jetstream._account import (
    is_no_stream,
    jetstream_refused,
    no_stream_error,
    unavailable,
)
from goflux.transports.jetstream._atomic import AtomicBatch, AtomicReplies, batch_headers
from goflux.transports.jetstream._errors import InvalidSchedule
from goflux.transports.jetstream._fast_batch import (
    DEFAULT_FLOW,
    DEFAULT_KEEPALIVE,
    DEFAULT_OUTSTANDING,
    FastBatchReceipt,
    FastBatchSender,
    Prepared,
)
from goflux.transports.jetstream._features import ATOMIC_BATCH, check_headers, require
from goflux.transports.jetstream._replies import PubAcks, receipt, send_error, timeout_error
from goflux.transports.jetstream._schedule import (
    Schedule,
    explain_batch_refusal,
    explain_refusal,
    schedule_headers,
)
from goflux.transports.jetstream._server_headers import TTL, expectations
from goflux.transports.jetstream._server_headers import server_headers as server_headers_of
from goflux.transports.jetstream._system import SYSTEM

__all__ = ("Outgoing", "Publisher")

T = TypeVar("T")

DEFAULT_TIMEOUT = 5.0
DEFAULT_WINDOW = 256
_PENDING: Any = None  # placeholder in the results list until the PubAck settles


@dataclass(frozen=True, slots=True)
class Outgoing(Generic[T]):
    """One message for :meth:`Publisher.publish_many` or :meth:`Publisher.publish_atomic`.

    ``ttl``, ``server_headers``, ``schedule`` and ``target`` are as for
    :meth:`Publisher.publish`.
    """

    subject: str
    value: T
    headers: HeadersLike | None = None
    message_id: str | None = None
    ttl: TTL | None = None
    server_headers: Mapping[str, str] | None = None
    schedule: Schedule | None = None
    target: str | None = None


class Publisher(CloseOnExit, Generic[T]):
    """Publishes values of type ``T`` to JetStream and waits for the server's PubAck.

    Every publish returns a :class:`~goflux.PublishReceipt` (stream, sequence,
    duplicate). With a ``message_id`` the server stores a message once within the
    stream's duplicate window, so a retried publish is safe.

    Args:
        js: A JetStream context of a connected nats-py client (the caller owns it).
        codec: Encodes the values.
        timeout: Seconds to wait for each PubAck.
        telemetry: Tracing and metrics; default: OpenTelemetry globals.

    Raises:
        ValueError: ``timeout`` is not positive.
    """

    def __init__(
        self,
        js: JetStreamContext,
        codec: Codec[T],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        telemetry: Telemetry | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self._js = js
        self._nc = connection(js)
        self._refusals = refusals(self._nc)
        self._acks = PubAcks(self._nc)
        self._atomic = AtomicReplies(self._nc)
        self._batches = 0  # publish_many and publish_atomic calls running
        self._codec = codec
        self._timeout = timeout
        self._scopes = PublishScopes(Telemetry.or_default(telemetry), SYSTEM)
        self._closed = False

    def _facts(self) -> Facts:
        return Facts("jetstream", codec=self._codec, client=self._nc)

    def _prepare(
        self,
        subject: str,
        value: T,
        headers: HeadersLike | None,
        message_id: str | None,
        server: dict[str, str] | None,
    ) -> tuple[bytes, dict[str, str]]:
        if self._closed:
            raise closed_publisher_error(subject)
        wire = outgoing(subject, headers, message_id, jetstream=True)
        if server:
            wire.update(server)
        return self._codec.encode(value), wire

    async def publish(
        self,
        subject: str,
        value: T,
        /,
        *,
        headers: HeadersLike | None = None,
        message_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_sequence: int | None = None,
        expected_last_subject_sequence: int | None = None,
        expected_last_message_id: str | None = None,
        ttl: TTL | None = None,
        server_headers: Mapping[str, str] | None = None,
        schedule: Schedule | None = None,
        target: str | None = None,
        timeout: float | None = None,
    ) -> PublishReceipt:
        """Publish ``value`` to ``subject`` and wait until the stream has stored it.

        The ``expected_*`` options make the publish conditional (optimistic
        concurrency): the server stores it only if the stream is named
        ``expected_stream``, its last sequence (or the subject's last sequence) is the
        given one, or its last message ID is the given one.

        Args:
            subject: Where to publish (a stream must capture it).
            value: What to publish, encoded by the codec.
            headers: User headers (they travel as ``X-Goflux-*``).
            message_id: The ID the server de-duplicates on (``Nats-Msg-Id``).
            expected_stream: Store only if the subject's stream has this name.
            expected_last_sequence: Store only if the stream's last sequence is this.
            expected_last_subject_sequence: Store only if the subject's last sequence
                is this (0: no message on the subject yet).
            expected_last_message_id: Store only if the stream's last message ID is this.
            ttl: The message's time to live: whole seconds (at least 1), a
                ``timedelta``, or ``"never"`` (outlives the stream's ``max_age``). The
                stream needs ``allow_msg_ttl``.
            server_headers: The server's own ``Nats-*`` headers, sent unprefixed
                (``{"Nats-Rollup": "sub"}``, ``Nats-Schedule``, ...), unlike
                ``headers``, which travel as ``X-Goflux-*`` user headers. The ones
                goflux sets from an option (``Nats-Msg-Id``, ``Nats-TTL``,
                ``Nats-Batch-*``) are refused here.
            schedule: Store the message as a schedule (:class:`Schedule`): the stream
                publishes it to ``target`` at its time(s) (``allow_msg_schedules``;
                ``subject`` is the schedule's own, one schedule per subject). The
                server stores it with ``Nats-Rollup: sub``, deleting everything else
                on ``subject``. The schedule message itself is a message of the stream:
                a consumer whose filter covers ``subject`` gets it at once, so keep
                schedule subjects outside consumer filters (a prefix of their own).
                The receipt is the schedule message's own PubAck (its sequence on
                ``subject``), not a delivery; with a ``message_id`` already in the
                duplicate window it says ``duplicate`` and the earlier schedule stays.
            target: The subject, of the same stream, a schedule publishes to.
            timeout: Seconds to wait for the PubAck (default: the publisher's).

        Raises:
            InvalidSubject: ``subject`` is not a valid publish subject.
            InvalidHeader: A header or the message ID cannot travel on the wire, or a
                server header is not a ``Nats-*`` one or is set by an option.
            ValueError: ``ttl`` is below a second or not whole seconds, or
                ``schedule`` and ``target`` are not given together.
            EncodeError: ``value`` cannot be encoded.
            InvalidSchedule: The server refused the schedule (its pattern, a
                ``target`` outside the stream, a time zone) or a ``Nats-Scheduler``
                header set by hand; nothing stored.
            ExpectationFailed: An ``expected_*`` condition did not hold; nothing stored.
            StreamFeatureDisabled: The stream does not allow the TTL, rollup or
                schedule asked for; nothing stored.
            PayloadTooLarge: Headers and body exceed the server's ``max_payload``
                (also when it lowered the limit and closed the connection for this
                message); nothing stored.
            MaxPayloadLowered: The server closed the connection for another message
                over a ``max_payload`` it lowered, before the PubAck came
                (``may_be_stored``).
            FeatureUnsupported: The server's version lacks what ``ttl`` or a server
                header asks for (a TTL needs nats-server 2.11); nothing was sent.
            JetStreamUnavailable: The account has no JetStream; nothing stored.
            PublishError: No stream captures ``subject``, the server refused it, the
                connection is closed, or no PubAck arrived in time (then
                ``may_be_stored`` is True).
        """
        server_headers = schedule_headers(server_headers, schedule, target, subject)
        server = None
        if (
            server_headers
            or ttl is not None
            or expected_stream is not None
            or (
                expected_last_sequence is not None
                or expected_last_subject_sequence is not None
                or expected_last_message_id is not None
            )
        ):
            server = server_headers_of(
                server_headers,
                ttl=ttl,
                expected=expectations(
                    expected_stream,
                    expected_last_sequence,
                    expected_last_subject_sequence,
                    expected_last_message_id,
                ),
            )
            if server:
                check_headers(self._nc, server, f"publish to {subject!r}", subject)
        wait = self._timeout if timeout is None else timeout
        data, wire = self._prepare(subject, value, headers, message_id, server)
        with self._scopes.open(subject, wire, message_id=message_id) as scope:
            scope.set_body_size(len(data))
            check_size(subject, wire, data, self._nc.max_payload)
            try:
                with self._refusals.guard(
                    "publish", subject, f"publish to {subject!r}", request=True, overflow=True
                ):
                    reply = await self._nc.request(
                        subject, data, timeout=wait, headers=wire or None
                    )
            except Overflowed as exc:  # the server closed the connection (max_payload)
                raise await in_flight_error(
                    self._nc,
                    exc.overflow,
                    subject,
                    wire,
                    data,
                    waiting_for="its PubAck",
                    retry="publish it again with the same message_id",
                    timeout=wait,
                ) from exc
            except nats.errors.TimeoutError as exc:
                raise timeout_error(subject, wait, self._nc) from exc
            except nats.errors.NoRespondersError as exc:
                raise await no_stream_error(self._js, subject) from exc
            except nats.errors.Error as exc:
                raise send_error(subject, exc, self._nc) from exc
            try:
                return receipt(reply.data, subject)
            except InvalidSchedule as exc:
                raise explain_refusal(exc, schedule, target) from exc

    @overload
    async def publish_many(
        self,
        messages: Iterable[Outgoing[T]] | AsyncIterable[Outgoing[T]],
        *,
        window: int = DEFAULT_WINDOW,
        timeout: float | None = None,
        return_exceptions: Literal[False] = False,
    ) -> list[PublishReceipt]: ...

    @overload
    async def publish_many(
        self,
        messages: Iterable[Outgoing[T]] | AsyncIterable[Outgoing[T]],
        *,
        window: int = DEFAULT_WINDOW,
        timeout: float | None = None,
        return_exceptions: Literal[True],
    ) -> list[PublishReceipt | PublishError]: ...

    async def publish_many(
        self,
        messages: Iterable[Outgoing[T]] | AsyncIterable[Outgoing[T]],
        *,
        window: int = DEFAULT_WINDOW,
        timeout: float | None = None,
        return_exceptions: bool = False,
    ) -> list[PublishReceipt] | list[PublishReceipt | PublishError]:
        """Publish many messages with up to ``window`` PubAcks outstanding at a time.

        Each PubAck is awaited with ``timeout`` (default: the publisher's). Receipts
        come back in input order. Messages are sent in input order; with message IDs a
        retry of the whole batch is de-duplicated by the server.

        Args:
            messages: What to publish (a list, a generator or an async iterator).
            window: Maximum publishes awaiting their PubAck.
            timeout: Seconds to wait for each PubAck.
            return_exceptions: Put a :class:`PublishError` in place of each failed
                receipt instead of raising the first failure.

        Raises:
            ValueError: ``window`` < 1.
            TypeError: An item is not an :class:`Outgoing` (raised where it is met).
            FeatureUnsupported: A message asks for what the server's version lacks
                (raised where it is met, like bad input).
            PublishError: The first failure (after every publish in flight settled),
                unless ``return_exceptions``. Bad input (subject, headers, encoding) of
                a message raises before anything after it is sent. Once the publisher
                or the connection is closed, each message left gets a PublishError.
        """
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        wait = self._timeout if timeout is None else timeout
        batch = _Batch(self._nc, self._refusals, wait)
        self._batches += 1
        try:
            await self._feed(messages, window, batch)
        finally:
            try:
                await batch.finish()  # whatever happens, leave nothing in flight behind
            finally:
                self._batches -= 1
                if self._closed and not self._batches:
                    await self._close_inboxes()
        await self._explain_no_stream(batch.results)
        for position, (schedule, target) in batch.scheduled.items():
            result = batch.results[position]
            if isinstance(result, PublishError):
                batch.results[position] = explain_refusal(result, schedule, target)
        if not return_exceptions:
            for result in batch.results:
                if isinstance(result, PublishError):
                    raise result
        return batch.results

    async def _explain_no_stream(self, results: list[PublishReceipt | PublishError]) -> None:
        """Replace "no stream answered" errors of an account without JetStream (asked once)."""
        asked = False
        refusal: tuple[str, int | None] | None = None
        for position, result in enumerate(results):
            if not (isinstance(result, PublishError) and is_no_stream(result)):
                continue
            if not asked:
                asked = True
                refusal = await jetstream_refused(self._js)
            if refusal is None:
                return
            error = unavailable(result.subject, *refusal)
            error.__cause__ = result
            results[position] = error

    async def _feed(
        self,
        messages: Iterable[Outgoing[T]] | AsyncIterable[Outgoing[T]],
        window: int,
        batch: _Batch,
    ) -> None:
        if isinstance(messages, AsyncIterable):
            async for item in messages:
                if len(batch.in_flight) >= window:
                    await batch.settle_oldest()
                await self._send(item, batch)
        else:
            for item in messages:
                if len(batch.in_flight) >= window:
                    await batch.settle_oldest()
                await self._send(item, batch)

    async def _send(self, item: Outgoing[T], batch: _Batch) -> None:
        index = len(batch.results)
        if not isinstance(item, Outgoing):
            raise TypeError(f"publish_many takes Outgoing messages, got {item!r} (item {index})")
        subject = item.subject
        if self._closed or self._nc.is_closed:
            # Not bad input: this and the remaining messages each get their error.
            why = "publisher is closed" if self._closed else "the connection is closed"
            batch.results.append(closed_publisher_error(subject, why + closed_reason(self._nc)))
            return
        given = schedule_headers(item.server_headers, item.schedule, item.target, subject)
        server = server_headers_of(given, ttl=item.ttl)
        if server:
            check_headers(self._nc, server, f"publish to {subject!r} (item {index})", subject)
        if item.schedule is not None and item.target is not None:
            batch.scheduled[index] = (item.schedule, item.target)
        data, wire = self._prepare(subject, item.value, item.headers, item.message_id, server)
        scope = self._scopes.open(subject, wire, message_id=item.message_id)
        scope.__enter__()
        scope.set_body_size(len(data))
        try:
            check_size(subject, wire, data, self._nc.max_payload)
            await self._acks.open()
        except PublishError as unsendable:  # too large, or the PubAck inbox was refused
            scope.__exit__(type(unsendable), unsendable, None)
            batch.results.append(unsendable)
            return
        except nats.errors.Error as exc:
            error = send_error(subject, exc, self._nc)
            scope.__exit__(type(error), error, None)
            batch.results.append(error)
            return
        reply, ack = self._acks.expect(subject)
        batch.results.append(_PENDING)
        try:
            await self._nc.publish(subject, data, reply=reply, headers=wire or None)
        except nats.errors.Error as exc:
            self._acks.forget(ack, reply)
            error = send_error(subject, exc, self._nc)
            scope.__exit__(type(error), error, None)
            batch.results[index] = error
            return
        batch.sent(_InFlight(index, subject, reply, ack, scope), self._acks)

    async def close(self) -> None:
        """Refuse further publishes. The caller owns the connection.

        Publishes already sent by a running :meth:`publish_many` still get their PubAck.
        """
        self._closed = True
        if not self._batches:
            await self._close_inboxes()

    async def _close_inboxes(self) -> None:
        await self._acks.close()
        await self._atomic.close()

    async def publish_atomic(
        self,
        messages: Iterable[Outgoing[T]],
        *,
        timeout: float | None = None,
    ) -> list[PublishReceipt]:
        """Publish ``messages`` as one atomic batch: the stream stores all of them, or none.

        The stream needs ``allow_atomic`` (nats-server 2.12), and every subject must
        be one of its subjects. Each message is checked and encoded before anything
        is sent, so bad input stores nothing either. Message IDs, TTLs, server
        headers and tracing work as for :meth:`publish`. The server holds a batch in
        memory until it is committed and takes at most 1,000 messages per batch (its
        default).

        Args:
            messages: What to publish, in order.
            timeout: Seconds to wait for the batch's PubAck (default: the publisher's).

        Returns:
            A receipt per message, in order (consecutive sequences in the stream),
            once every message's reply is in and the commit's PubAck names this
            batch and its size.

        Raises:
            TypeError: An item is not an :class:`Outgoing`.
            InvalidSubject, InvalidHeader, EncodeError, PayloadTooLarge, ValueError:
                A message is bad input; nothing was sent.
            StreamFeatureDisabled: The stream does not allow atomic batches (or a
                TTL, rollup or schedule a message asks for: ``setting`` names which);
                nothing stored.
            InvalidSchedule: The stream refused a message's schedule, naming it and
                its target (the server checks schedules at the commit; with several
                schedules in the batch the error lists them); nothing stored.
            FeatureUnsupported: The server is older than 2.12 (or lacks what a
                message asks for); nothing was sent. Or a server on the way to the
                stream (a leaf node's hub) turned out not to know atomic batches and
                stored messages one by one: ``may_be_stored``, and the message says
                which were stored; no receipt is returned.
            JetStreamUnavailable: The account has no JetStream; nothing stored.
            ExpectationFailed: An expectation of a message did not hold; nothing stored.
            PermissionDenied: The server refused a subject or the reply inbox.
            PublishError: The server refused the batch (naming the message and the
                server's reason; nothing stored), or no PubAck came in time
                (``may_be_stored``), or the connection is closed.
        """
        items = list(messages)
        if not items:
            return []
        prepared: list[tuple[str, bytes, dict[str, str], str | None]] = []
        for index, item in enumerate(items):
            if not isinstance(item, Outgoing):
                raise TypeError(
                    f"publish_atomic takes Outgoing messages, got {item!r} (item {index})"
                )
            if index == 0:
                what = f"atomic batch of {len(items)} messages"
                require(self._nc, ATOMIC_BATCH, what, subject=item.subject)
            given = schedule_headers(item.server_headers, item.schedule, item.target, item.subject)
            server = server_headers_of(given, ttl=item.ttl)
            if server:
                what = f"atomic batch: message {index + 1} to {item.subject!r}"
                check_headers(self._nc, server, what, item.subject)
            data, wire = self._prepare(
                item.subject, item.value, item.headers, item.message_id, server
            )
            prepared.append((item.subject, data, wire, item.message_id))
        wait = self._timeout if timeout is None else timeout
        batch = AtomicBatch([subject for subject, *_ in prepared])
        last = len(prepared) - 1
        subjects = frozenset(batch.subjects)
        scopes: list[PublishScope | NullScope] = []
        failure: BaseException | None = None
        self._batches += 1
        try:
            for index, (subject, data, wire, message_id) in enumerate(prepared):
                wire.update(batch_headers(batch.id, index + 1, commit=index == last))
                scope = self._scopes.open(subject, wire, message_id=message_id)
                scope.__enter__()  # injects the trace context into wire
                scopes.append(scope)
                scope.set_body_size(len(data))
                check_size(subject, wire, data, self._nc.max_payload)
            with self._refusals.guard(
                "publish",
                "",
                f"atomic batch {batch.id!r}",
                accept=lambda refusal: any(refusal.names(s) for s in subjects),
            ):
                await self._send_atomic(batch, prepared)
                try:
                    return batch.receipts(await self._committed(batch, wait))
                except InvalidSchedule as exc:
                    index = batch.failure[0] if batch.failure else last
                    pairs = [(item.subject, item.schedule, item.target) for item in items]
                    explained = explain_batch_refusal(exc, index, pairs)
                    if explained is exc:
                        raise
                    raise explained from exc
        except BaseException as exc:
            failure = exc
            raise
        finally:
            self._atomic.forget(batch)
            for scope in scopes:
                scope.__exit__(type(failure) if failure else None, failure, None)
            self._batches -= 1
            if self._closed and not self._batches:
                await self._close_inboxes()

    async def publish_fast(
        self,
        messages: Iterable[Outgoing[T]] | AsyncIterable[Outgoing[T]],
        *,
        stream: str | None = None,
        flow: int = DEFAULT_FLOW,
        outstanding: int = DEFAULT_OUTSTANDING,
        timeout: float | None = None,
        keepalive: float = DEFAULT_KEEPALIVE,
    ) -> FastBatchReceipt:
        """Publish ``messages`` as one fast batch: high rate, flow-controlled, in order.

        The stream needs ``allow_batched`` (nats-server 2.14). Unlike
        :meth:`publish_many`, the server acknowledges only every N-th message (N up to
        ``flow``, set by the server), and the client sends ahead only as far as
        ``outstanding`` acks allow: a busy stream slows it down, nothing is dropped,
        and memory stays bounded (messages are read from ``messages`` as they go).
        Not atomic: messages are stored as they come. The batch ends at its first lost
        or refused message, so what is stored is always its first messages, in order,
        none missing; :class:`FastBatchError` says how many. Message IDs, TTLs,
        server headers and tracing work as for :meth:`publish`.

        Args:
            messages: What to publish, in order (a list, a generator or an async
                iterator); every subject must be one of the stream's.
            stream: The stream (default: the one that takes the first subject).
            flow: Most messages per ack (1 to 65,535; nats-server 2.14 caps it at 500).
            outstanding: Acks to be waiting for at once before sending more (1 to 3).
            timeout: Seconds to wait for each ack and for the batch's PubAck (default:
                the publisher's).
            keepalive: Most seconds the batch goes without a message while ``messages``
                makes it wait: then the client pings it, as the server forgets a batch
                after its batch timeout without one (10 s unless the server's
                ``jetstream.limits.batch.timeout`` says otherwise). Default 5; keep it
                below half the server's timeout.

        Returns:
            The batch's receipt: its count and the sequence of its last message.

        Raises:
            ValueError: No messages, ``flow`` or ``outstanding`` out of range, or
                ``timeout`` or ``keepalive`` not above 0; nothing was sent.
            TypeError: ``flow`` or ``outstanding`` not an int, or ``timeout`` or
                ``keepalive`` not a number; nothing was sent.
            TypeError, InvalidSubject, InvalidHeader, EncodeError, PayloadTooLarge:
                The first message is bad input; nothing was sent. (A later bad message
                ends the batch before it: :class:`FastBatchError`.)
            FeatureUnsupported: The server is older than 2.14 (or lacks what a message
                asks for); nothing was sent.
            StreamFeatureDisabled: The stream does not allow fast batches
                (``allow_batched``); nothing stored.
            SubjectOutsideStream: The first message's subject is not the stream's;
                nothing was sent.
            StreamNotFound: ``stream`` does not exist.
            FastBatchError: The batch ended early: a message was refused (a stream
                limit, an expectation, too large), lost, bad input, or not the
                stream's; ``messages`` raised (the exception is the cause; what came
                before it is committed); the publisher was closed; the server forgot
                the batch; or no answer came in time (``may_be_stored``). Its
                ``stored`` first messages are stored, and it says which are not.
            PermissionDenied: The server refused a subject or the batch's inbox.
            PublishError: No stream takes the first subject, or the connection is closed.
        """
        sender: FastBatchSender[Outgoing[T]] = FastBatchSender(
            self._js,
            self._nc,
            self._scopes,
            self._refusals,
            self._prepare_item,
            lambda: self._closed,
            stream=stream,
            flow=flow,
            outstanding=outstanding,
            timeout=self._timeout if timeout is None else timeout,
            keepalive=keepalive,
        )
        self._batches += 1
        try:
            return await sender.send(messages)
        finally:
            self._batches -= 1
            if self._closed and not self._batches:
                await self._close_inboxes()

    def _prepare_item(self, item: Outgoing[T], index: int) -> Prepared:
        """Check and encode message ``index`` of a fast batch."""
        if not isinstance(item, Outgoing):
            raise TypeError(f"publish_fast takes Outgoing messages, got {item!r} (item {index})")
        given = schedule_headers(item.server_headers, item.schedule, item.target, item.subject)
        server = server_headers_of(given, ttl=item.ttl)
        if server:
            what = f"fast batch: item {index} to {item.subject!r}"
            check_headers(self._nc, server, what, item.subject)
        data, wire = self._prepare(item.subject, item.value, item.headers, item.message_id, server)
        return Prepared(item.subject, data, wire, item.message_id)

    async def _send_atomic(
        self,
        batch: AtomicBatch,
        prepared: list[tuple[str, bytes, dict[str, str], str | None]],
    ) -> None:
        """Send every message of ``batch``, each a request on the atomic replies inbox."""
        last_subject = batch.subjects[-1]
        try:
            await self._atomic.open()
            for index, (subject, data, wire, _) in enumerate(prepared):
                reply = self._atomic.expect(batch, index)
                await self._nc.publish(subject, data, reply=reply, headers=wire)
        except nats.errors.Error as exc:
            raise send_error(last_subject, exc, self._nc) from exc

    async def _committed(self, batch: AtomicBatch, wait: float) -> PublishReceipt:
        """Wait for the PubAck of ``batch``'s commit."""
        subject = batch.subjects[-1]
        try:
            return await asyncio.wait_for(asyncio.shield(batch.commit), wait)
        except PublishError as exc:
            cause = batch.failure[1] if batch.failure is not None else None
            if cause is not None and is_no_stream(cause):
                refusal = await jetstream_refused(self._js)
                if refusal is not None:
                    raise unavailable(cause.subject, *refusal) from exc
            raise
        except TimeoutError as exc:
            if self._nc.is_closed:
                raise timeout_error(subject, wait, self._nc) from exc
            raise PublishError(
                f"atomic batch {batch.id!r}: no PubAck for its commit within {wait}s; it may "
                "have been stored whole. A retry with the same message IDs is refused, not "
                "de-duplicated, if it was: check the stream before publishing it again",
                subject=subject,
                may_be_stored=True,
            ) from exc


class _InFlight(NamedTuple):
    """A pipelined publish awaiting its PubAck."""

    position: int
    subject: str
    reply: str
    ack: asyncio.Future[PublishReceipt]
    scope: PublishScope | NullScope


class _Batch:
    """One :meth:`Publisher.publish_many` call: results, publishes in flight, refusals.

    A subject the server refuses fails every publish to it still in flight at once,
    with :class:`~goflux.PermissionDenied`.
    """

    __slots__ = (
        "_acks",
        "_loop",
        "_nc",
        "_refusals",
        "_unwatch",
        "_wait",
        "_waiting",
        "in_flight",
        "results",
        "scheduled",
    )

    def __init__(self, nc: Client, refusals: Refusals, wait: float) -> None:
        self._nc = nc
        self._refusals = refusals
        self._wait = wait
        self._loop = asyncio.get_running_loop()
        self._unwatch: dict[str, Callable[[], None]] = {}
        self._acks: PubAcks | None = None
        self._waiting: _InFlight | None = None  # the entry settle_oldest awaits
        self.in_flight: deque[tuple[_InFlight, float]] = deque()
        self.results: list[PublishReceipt | PublishError] = []
        self.scheduled: dict[int, tuple[Schedule, str]] = {}  # position: schedule, target

    def sent(self, entry: _InFlight, acks: PubAcks) -> None:
        """Track ``entry``, sent just now, until its PubAck settles."""
        self._acks = acks
        if entry.subject not in self._unwatch:
            self._unwatch[entry.subject] = self._refusals.listen(
                "publish", entry.subject, self._refused
            )
        self.in_flight.append((entry, self._loop.time() + self._wait))

    def _refused(self, refusal: Refusal) -> None:
        waiting = [entry for entry, _ in self.in_flight]
        if self._waiting is not None:
            waiting.append(self._waiting)  # taken out of in_flight while awaited
        for entry in waiting:
            if not entry.ack.done() and refusal.names(entry.subject) and self._acks is not None:
                self._acks.fail(entry.reply, refusal.error(f"publish to {entry.subject!r}"))

    async def settle_oldest(self) -> None:
        """Wait for the oldest PubAck (at most until its deadline) and record the outcome."""
        entry, deadline = self.in_flight.popleft()
        ack = entry.ack
        if not ack.done():
            self._waiting = entry
            try:
                await asyncio.wait((ack,), timeout=max(deadline - self._loop.time(), 0.0))
            finally:
                self._waiting = None
        outcome: PublishReceipt | PublishError
        if not ack.done():
            if self._acks is not None:
                self._acks.forget(ack, entry.reply)
            outcome = timeout_error(entry.subject, self._wait, self._nc)
        elif ack.cancelled():
            outcome = PublishError(f"publish to {entry.subject!r} cancelled", subject=entry.subject)
        elif (exc := ack.exception()) is not None:
            outcome = (
                exc
                if isinstance(exc, PublishError)
                else PublishError(
                    f"publish to {entry.subject!r} failed: {exc}", subject=entry.subject
                )
            )
        else:
            outcome = ack.result()
        if isinstance(outcome, PublishError):
            entry.scope.__exit__(type(outcome), outcome, None)
        else:
            entry.scope.__exit__(None, None, None)
        self.results[entry.position] = outcome

    async def finish(self) -> None:
        """Settle everything in flight and stop watching for refusals."""
        try:
            while self.in_flight:
                await self.settle_oldest()
        finally:
            for unwatch in self._unwatch.values():
                unwatch()
