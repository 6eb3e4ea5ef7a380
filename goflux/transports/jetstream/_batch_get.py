"""Reading many stored messages at once: batched direct gets (ADR-31, nats-server 2.11+).

A stream that allows direct gets (``allow_direct``) answers
``$JS.API.DIRECT.GET.<stream>`` from every replica (and mirror with ``mirror_direct``).
Two batched forms of that request are used here:

- ``{"seq": n, "batch": b, "max_bytes": m, "next_by_subj": filter}``: up to ``b``
  messages from sequence ``n`` on (on subjects matching ``filter``; every subject
  without it), cut short after about ``m`` bytes (the server always sends at least
  one). :func:`get_batch` asks for one such batch at a time and asks for the next one,
  from the sequence after the last one received, when its end arrives: memory stays
  bounded by one batch whatever the stream holds.
- ``{"multi_last": [subjects...]}``: the last message of each subject (wildcards
  allowed), in stream order. The server refuses a request matching more than 1024
  subjects (status 413): :func:`get_last_many` sends the subjects in chunks of at most
  1024 and halves a chunk the server refuses (its wildcards matched too many). The
  first answer's ``Nats-UpTo-Sequence`` is sent with every later request
  (``up_to_seq``), so the chunks and pages read the stream as it was then.

Every message carries ``Nats-Stream``, ``Nats-Subject``, ``Nats-Sequence``,
``Nats-Time-Stamp``, ``Nats-Num-Pending`` and ``Nats-Last-Sequence``, appended after
its stored headers: the last line of each of these names is taken off again, so
stored headers of the same names (a republished message has them) remain. A batch
ends with an empty message of status ``204`` (``EOB``) whose ``Nats-Num-Pending``
says how many matching messages the stream holds after the batch (0: the end),
``Nats-Last-Sequence`` the last sequence sent. Nothing to send at all is status
``404``. A reply with ``Nats-Sequence`` is a message even when its stored headers
hold a ``Status`` (a message published with one by another client): only a reply
without it is a status. A stream without direct gets has no responder: the
request's status ``503`` (no responders) is then explained with the stream's info
(missing, or ``allow_direct`` off).

nats-server 2.11 counts ``Nats-Num-Pending`` of a ``multi_last`` answer one short
(fixed in 2.12): an answer cut by ``max_bytes`` just before its last subject says 0
left. On those servers :func:`get_last_many` asks again after every answer that
held messages, until one holds none.

:class:`DirectReplies` is the plumbing both use, and the Object store's chunk
reader too: one reply inbox, requests out, replies classified. :func:`last_replies`
is one ``multi_last`` read, page by page, for :func:`get_last_many` and the batched
reads of counters; a page the server said more were left for answering 404 (their
messages removed meanwhile) fails the read rather than pass a part for the whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import weakref
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.errors import APIError

from goflux._codecs import Codec
from goflux._errors import GofluxError, TransportError
from goflux._subjects import validate_pattern
from goflux.transports._natspy import (
    api_prefix,
    api_timeout,
    connection,
    keep_header_lines,
)
from goflux.transports._refusals import Guard
from goflux.transports.jetstream._api import (
    Stored,
    api_error,
    api_guard,
    api_request,
    check_name,
    from_rfc3339,
)
from goflux.transports.jetstream._errors import (
    ResourceLimit,
    StreamFeatureDisabled,
    StreamNotFound,
)
from goflux.transports.jetstream._features import BATCH_DIRECT_GET, require
from goflux.transports.jetstream._server import connected_server
from goflux.transports.jetstream._status import (
    END_OF_BATCH,
    NO_MESSAGES,
    NO_RESPONDERS,
    STREAM_NOT_FOUND,
    TOO_MANY_RESULTS,
)
from goflux.transports.jetstream._stored import StoredMessage, _stored

__all__ = (
    "DEFAULT_BATCH",
    "DEFAULT_MAX_BYTES",
    "MAX_SUBJECTS",
    "DirectReplies",
    "EndOfBatch",
    "explain_missing",
    "get_batch",
    "get_last_many",
    "last_replies",
    "stored_of",
)

T = TypeVar("T")

DEFAULT_BATCH: Final = 1_000
"""How many messages one request of :func:`get_batch` asks for at most."""
DEFAULT_MAX_BYTES: Final = 1024 * 1024
"""About how many bytes one request of :func:`get_batch` asks for at most."""
MAX_SUBJECTS: Final = 1024
"""The most subjects one ``multi_last`` request may match (nats-server's limit)."""

_STATUS: Final = "Status"
_PENDING: Final = "Nats-Num-Pending"
_LAST: Final = "Nats-Last-Sequence"
_UP_TO: Final = "Nats-UpTo-Sequence"
_SUBJECT: Final = "Nats-Subject"
_SEQUENCE: Final = "Nats-Sequence"
_TIME: Final = "Nats-Time-Stamp"
_ADDED: Final = frozenset(("Nats-Stream", _SUBJECT, _SEQUENCE, _TIME, _PENDING, _LAST))
"""The headers a batched direct get appends to a message's stored ones (as it spells them)."""
_MAX_SEQUENCE: Final = 2**64 - 1
"""The largest stream sequence (the server's ``uint64``)."""
_MAX_INT: Final = 2**63 - 1
"""The largest ``batch`` or ``max_bytes`` the server reads (its ``int``)."""
_PENDING_COUNTED: Final = (2, 12, 0)
"""From this nats-server on, a ``multi_last`` answer's pending count is right."""


@dataclass(frozen=True, slots=True)
class EndOfBatch:
    """The end of one batch (status 204).

    Attributes:
        pending: How many matching messages the stream holds after the batch.
        last_sequence: The sequence of the last message of the batch.
        up_to_sequence: For ``multi_last``: the last sequence the read covered.
    """

    pending: int
    last_sequence: int
    up_to_sequence: int | None


Missing = Callable[[], Awaitable[Exception]]
"""Says why nothing answers direct gets of a stream (called on status 503; raised)."""


class DirectReplies:
    """One reply inbox for batched direct gets of ``stream``.

    :meth:`open` checks the server has batched direct gets and subscribes the inbox,
    :meth:`ask` sends a request, :meth:`next` takes the next reply, :meth:`close`
    removes the inbox (a dropped, unclosed one is removed by the garbage collector).
    Wrap the calls in :meth:`guard` and map ``nats.errors.Error`` with
    :func:`~goflux.transports.jetstream._api.api_error`.
    """

    __slots__ = (
        "__weakref__",
        "_finalizer",
        "_inbox",
        "_js",
        "_missing",
        "_queue",
        "_seen",
        "_stream",
        "_sub",
        "_what",
    )

    def __init__(self, js: JetStreamContext, stream: str, what: str, missing: Missing) -> None:
        self._js = js
        self._stream = stream
        self._what = what
        self._missing = missing
        self._sub: Subscription | None = None
        self._queue = _Queue()
        self._inbox = ""
        self._seen = ""  # the sequence of the last reply that had one
        self._finalizer: weakref.finalize[[Subscription], DirectReplies] | None = None

    @property
    def is_open(self) -> bool:
        """Whether the inbox is subscribed."""
        return self._sub is not None

    @property
    def ready(self) -> bool:
        """Whether a reply is queued (:meth:`next` then returns without waiting)."""
        return bool(self._queue.replies)

    @property
    def what(self) -> str:
        """What the reads are, for error messages."""
        return self._what

    def guard(self) -> Guard:
        """Fails its block with PermissionDenied when the server refuses the requests."""
        return api_guard(self._js, self._what, f"DIRECT.GET.{self._stream}")

    def check(self) -> None:
        """Raise unless the server has batched direct gets (nothing is sent).

        Raises:
            FeatureUnsupported: The server is older than 2.11.
        """
        require(connection(self._js), BATCH_DIRECT_GET, self._what)

    async def open(self) -> None:
        """Check the server, then subscribe the reply inbox (once).

        Raises:
            FeatureUnsupported: The server is older than 2.11 (nothing is sent).
            nats.errors.Error: The subscription failed.
        """
        if self._sub is not None:
            return
        self.check()
        nc = connection(self._js)
        keep_header_lines(nc)  # a stored message's repeated header lines are kept
        self._inbox = nc.new_inbox()
        # Replies are queued by a callback, not taken with next_msg: that makes a task
        # and a timer per message, which costs more than the rest of reading it.
        # The callback holds the queue, not this object: a reader dropped unclosed is
        # collected, and its finalizer removes the subscription.
        self._sub = await nc.subscribe(self._inbox, cb=self._queue.arrive)
        # A reader dropped without close() must not keep its subscription.
        self._finalizer = weakref.finalize(self, _drop_subscription, self._sub)

    async def ask(self, request: Mapping[str, Any]) -> None:
        """Send one direct get request; its replies come to the inbox.

        Raises:
            nats.errors.Error: The publish failed.
        """
        subject = f"{api_prefix(self._js)}.DIRECT.GET.{self._stream}"
        await connection(self._js).publish(subject, json.dumps(request).encode(), reply=self._inbox)

    async def next(self) -> Msg | EndOfBatch | None:
        """The next reply: a message, the end of the batch, or None for "no messages" (404).

        Raises:
            StreamNotFound: Nothing answers and the stream does not exist.
            StreamFeatureDisabled: Nothing answers: the stream does not allow direct gets.
                (Both as :func:`explain_missing` says: nothing answering raises what
                the missing callback gives.)
            ResourceLimit: A ``multi_last`` request matched too many subjects (413).
            TransportError: Another status from the server, or no reply in time after
                earlier replies (naming the last sequence received).
            nats.errors.TimeoutError: No reply in time, none before either.
        """
        if self._sub is None:
            raise TransportError(f"{self._what}: not open")
        wait = api_timeout(self._js)
        try:
            msg = await self._queue.take(wait)
        except nats.errors.TimeoutError as exc:
            if not self._seen:
                raise
            raise TransportError(
                f"{self._what}: the server stopped answering at sequence {self._seen} "
                f"(the last one received; nothing more within {wait}s)"
            ) from exc
        headers = msg.headers
        if not headers:
            return msg
        # A message has its sequence; a status has none, whatever the message's stored
        # headers say (a "Status" header of its own is no status).
        sequence = headers.get(_SEQUENCE)
        if sequence is not None:
            self._seen = sequence
            return msg
        status = headers.get(_STATUS)
        if status is None:
            return msg
        if status == END_OF_BATCH:
            up_to = headers.get(_UP_TO)
            last = int(headers.get(_LAST, "0"))
            if last:
                self._seen = str(last)
            return EndOfBatch(
                pending=int(headers.get(_PENDING, "0")),
                last_sequence=last,
                up_to_sequence=int(up_to) if up_to else None,
            )
        if status == NO_MESSAGES:
            return None
        if status == NO_RESPONDERS:
            raise await self._missing()
        description = headers.get("Description", "")
        if status == TOO_MANY_RESULTS:
            raise ResourceLimit(
                f"{self._what}: the subjects match more than {MAX_SUBJECTS} subjects, the "
                f"most one read may match ({status} {description}); ask for fewer or "
                "narrower subjects, or read them with a consumer",
                code=int(status),
            )
        raise TransportError(f"{self._what}: the server answered {status} {description}")

    async def close(self) -> None:
        """Remove the reply inbox (safe to call again)."""
        sub, self._sub = self._sub, None
        self._queue.replies.clear()
        if self._finalizer is not None:
            self._finalizer.detach()  # closed: nothing left for the garbage collector
        if sub is not None and not connection(self._js).is_closed:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()


class _Queue:
    """The replies of one inbox, queued as they arrive."""

    __slots__ = ("arrived", "replies")

    def __init__(self) -> None:
        self.replies: deque[Msg] = deque()
        self.arrived = asyncio.Event()

    async def arrive(self, msg: Msg) -> None:
        self.replies.append(msg)
        self.arrived.set()

    async def take(self, timeout: float) -> Msg:
        """The next reply, waiting up to ``timeout`` seconds for one.

        Raises:
            nats.errors.TimeoutError: None came in time.
        """
        replies = self.replies
        while not replies:
            self.arrived.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self.arrived.wait()
            except TimeoutError as exc:
                raise nats.errors.TimeoutError from exc
        return replies.popleft()


_DROPPING: set[asyncio.Task[None]] = set()  # unsubscribes of dropped readers, until done


def _drop_subscription(sub: Subscription) -> None:
    """Unsubscribe the inbox of a reader that was dropped unclosed."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no loop any more: its client is gone too
        return
    task = loop.create_task(_unsubscribe(sub))
    _DROPPING.add(task)
    task.add_done_callback(_DROPPING.discard)


async def _unsubscribe(sub: Subscription) -> None:
    with contextlib.suppress(nats.errors.Error):
        await sub.unsubscribe()


# ------------------------------------------------------------------ the messages


def stored_of(stream: str, codec: Codec[T], msg: Msg) -> StoredMessage[T]:
    """The typed stored message of one direct get reply.

    Raises:
        DecodeError: The data is not a valid ``T`` (naming stream, subject, sequence).
        TransportError: The reply lacks the direct get headers.
    """
    headers = msg.headers or {}
    try:
        subject = headers[_SUBJECT]
        sequence = int(headers[_SEQUENCE])
        time = from_rfc3339(headers[_TIME])
    except (KeyError, ValueError) as exc:
        raise TransportError(
            f"stream {stream!r}: a direct get reply without its subject, sequence or time ({exc})"
        ) from exc
    return _stored(stream, codec, Stored(subject, sequence, time, msg.data, _kept(headers)))


class _Kept(dict[str, str]):
    """The stored headers of a reply (last value wins), with every line (``lines``)."""

    __slots__ = ("lines", "repeated")

    def __init__(self, lines: list[tuple[str, str]]) -> None:
        super().__init__(lines)
        self.lines = lines
        self.repeated = len(lines) > len(self)


def _kept(headers: Mapping[str, str]) -> Mapping[str, str] | None:
    """The stored headers of a direct get reply: without the lines the get appended.

    The server appends one line of each name in ``_ADDED`` after the stored lines: the
    last line of each such name is its, any before it a stored one.
    """
    if not getattr(headers, "repeated", False):  # each name once: the dict has every line
        if len(headers) == len(_ADDED):  # nothing but the appended ones (most messages)
            return None
        kept = [(name, value) for name, value in headers.items() if name not in _ADDED]
    else:
        kept = list(headers.lines)  # type: ignore[attr-defined]
        dropped: set[str] = set()
        for index in range(len(kept) - 1, -1, -1):
            name = kept[index][0]
            if name in _ADDED and name not in dropped:
                dropped.add(name)
                del kept[index]
                if len(dropped) == len(_ADDED):
                    break
    return _Kept(kept) if kept else None


def explain_missing(
    js: JetStreamContext,
    stream: str,
    what: str,
    subject: str,
    not_found: Callable[[], GofluxError] | None = None,
) -> Missing:
    """Explains a direct get nobody answers: no such stream, or no direct gets on it.

    Args:
        js: The JetStream context.
        stream: The stream read.
        what: What the read is, for the messages.
        subject: The subject read, for StreamFeatureDisabled.
        not_found: The error for a missing stream (None: StreamNotFound).
    """

    async def explain() -> GofluxError:
        try:
            info = await api_request(js, f"STREAM.INFO.{stream}")
        except APIError as exc:
            if exc.err_code == STREAM_NOT_FOUND:
                if not_found is not None:
                    return not_found()
                return StreamNotFound(
                    f"{what}: stream not found", code=exc.code, err_code=exc.err_code
                )
            return api_error(exc, what, js)
        except nats.errors.Error as exc:
            return api_error(exc, what, js)
        if not info.get("config", {}).get("allow_direct"):
            return StreamFeatureDisabled(
                f"{what}: stream {stream!r} does not allow direct gets (its setting "
                f"'allow_direct' is off); turn it on, e.g. with ensure_stream(..., "
                "allow_direct=True)",
                subject=subject,
                stream=stream,
                setting="allow_direct",
            )
        return TransportError(f"{what}: nothing answers the stream's direct gets")

    return explain


async def _last_sequence(js: JetStreamContext, stream: str, what: str) -> int:
    """The stream's last sequence now (STREAM.INFO).

    Raises:
        StreamNotFound: The stream does not exist.
        PermissionDenied: The server refused the request.
        TransportError: No answer in time, or the connection failed.
    """
    with api_guard(js, what, f"STREAM.INFO.{stream}"):
        try:
            info = await api_request(js, f"STREAM.INFO.{stream}")
        except APIError as exc:
            if exc.err_code == STREAM_NOT_FOUND:
                raise StreamNotFound(
                    f"{what}: stream not found", code=exc.code, err_code=exc.err_code
                ) from exc
            raise api_error(exc, what, js) from exc
        except nats.errors.Error as exc:
            raise api_error(exc, what, js) from exc
    return int(info.get("state", {}).get("last_seq", 0))


# ------------------------------------------------------------------ get_batch


async def _send(js: JetStreamContext, replies: DirectReplies, request: Mapping[str, Any]) -> None:
    """Open the reply inbox (once) and send ``request``.

    Raises:
        FeatureUnsupported: The server is older than 2.11 (nothing is sent).
        PermissionDenied: The server refused the inbox or the request.
        TransportError: The connection failed.
    """
    with replies.guard():
        try:
            await replies.open()
            await replies.ask(request)
        except nats.errors.Error as exc:
            raise api_error(exc, replies.what, js) from exc


async def _receive(js: JetStreamContext, replies: DirectReplies) -> Msg | EndOfBatch | None:
    """The next reply (see :meth:`DirectReplies.next`), a raw error mapped.

    Raises:
        PermissionDenied: The server refused the request.
        TransportError: No answer in time, or the connection failed.
    """
    if replies.ready:  # queued already: nothing to wait for, no refusal to listen for
        return await replies.next()
    with replies.guard():
        try:
            return await replies.next()
        except nats.errors.Error as exc:
            raise api_error(exc, replies.what, js) from exc


def _check_positive(name: str, value: object, most: int = _MAX_INT) -> None:
    """Raise ValueError unless ``value`` is an int from 1 to ``most``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    if value > most:
        raise ValueError(f"{name} must be at most {most}, not {value!r}")


def _check_sequence(name: str, value: object) -> None:
    """Raise ValueError unless ``value`` is a stream sequence (1 to 2**64 - 1)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_SEQUENCE:
        raise ValueError(f"{name} must be a sequence from 1 to {_MAX_SEQUENCE}, not {value!r}")


def get_batch(
    js: JetStreamContext,
    codec: Codec[T],
    *,
    stream: str,
    subjects: str | None = None,
    start_seq: int = 1,
    up_to_seq: int | None = None,
    max_messages: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    batch: int = DEFAULT_BATCH,
) -> AsyncGenerator[StoredMessage[T], None]:
    """The messages ``stream`` stores, decoded, in stream order, read in batches.

    Use it as ``async for message in get_batch(...)``; to leave the loop early and
    remove its reply subscription at once, inside ``contextlib.aclosing(...)`` (else
    the subscription goes when the generator is collected). Each request asks for at
    most ``batch`` messages and about ``max_bytes`` bytes (the server sends at least
    one message, however large), from ``start_seq`` or the sequence after the last
    one received; the next request goes out when a batch has ended. Memory stays
    bounded by one batch, whatever the stream holds. The read ends after
    ``max_messages`` messages, after sequence ``up_to_seq``, or at the end of the
    stream: without ``up_to_seq``, messages stored while reading are read too, until
    a batch ends with none left (a writer that keeps ahead keeps the read going:
    give ``up_to_seq``, e.g. the stream's last sequence before the read, to stop
    there). A stream with nothing to read yields nothing. The stream must allow
    direct gets (``allow_direct``) and the server be nats-server 2.11 or later.

    The arguments are checked when it is called (nothing is sent then); the server
    is asked on the first iteration.

    Args:
        js: The JetStream context.
        codec: Decodes each message's data.
        stream: The stream to read.
        subjects: Only messages on subjects matching this subject or wildcard pattern
            (the server takes one filter per request); None: every subject.
        start_seq: The first sequence to read (1: from the start).
        up_to_seq: The last sequence to read; None: up to the end of the stream,
            however far it grows while being read.
        max_messages: Stop after this many messages; None: no limit.
        max_bytes: About how many bytes one request asks for.
        batch: How many messages one request asks for at most.

    Raises (when called):
        ValueError: Invalid stream name, ``subjects`` not a string, ``start_seq`` or
            ``up_to_seq`` not a sequence (1 to 2**64 - 1), ``max_messages`` not
            positive, ``max_bytes`` or ``batch`` not from 1 to 2**63 - 1.
        InvalidSubject: Invalid subject pattern.
        FeatureUnsupported: The server is older than 2.11 (nothing is sent).

    Raises (while iterating):
        StreamNotFound: The stream does not exist.
        StreamFeatureDisabled: The stream does not allow direct gets (``allow_direct``).
        DecodeError: A message's data is not a valid ``T`` (naming stream, subject
            and sequence); the messages before it were yielded.
        PermissionDenied: The server refused the request.
        TransportError: No answer in time (after some messages: naming the sequence
            it stopped at), or the connection failed.
    """
    check_name("stream", stream)
    if subjects is not None:
        if not isinstance(subjects, str):
            raise ValueError(
                f"subjects must be one subject or wildcard pattern (the server takes one "
                f"filter per request), not {subjects!r}"
            )
        validate_pattern(subjects)
    _check_sequence("start_seq", start_seq)
    if up_to_seq is not None:
        _check_sequence("up_to_seq", up_to_seq)
    if max_messages is not None:
        _check_positive("max_messages", max_messages, most=_MAX_SEQUENCE)
    _check_positive("max_bytes", max_bytes)
    _check_positive("batch", batch)
    on = f" on {subjects!r}" if subjects is not None else ""
    what = f"reading the messages{on} of stream {stream!r} from sequence {start_seq}"
    replies = DirectReplies(js, stream, what, explain_missing(js, stream, what, subjects or ""))
    replies.check()
    return _batches(
        js, codec, replies, stream, subjects, start_seq, up_to_seq, max_messages, max_bytes, batch
    )


async def _batches(
    js: JetStreamContext,
    codec: Codec[T],
    replies: DirectReplies,
    stream: str,
    subjects: str | None,
    seq: int,
    up_to: int | None,
    max_messages: int | None,
    max_bytes: int,
    batch: int,
) -> AsyncGenerator[StoredMessage[T], None]:
    left = max_messages
    try:
        while left is None or left > 0:
            size = batch if left is None else min(batch, left)
            if up_to is not None:
                if seq > up_to:
                    return
                size = min(size, up_to - seq + 1)  # no more than there are up to there
            request: dict[str, Any] = {"seq": seq, "batch": size, "max_bytes": max_bytes}
            if subjects is not None:
                request["next_by_subj"] = subjects
            await _send(js, replies, request)
            while True:
                reply = await _receive(js, replies)
                if reply is None:  # 404: nothing (more) to read
                    return
                if isinstance(reply, EndOfBatch):
                    break
                if up_to is not None and int(reply.headers[_SEQUENCE]) > up_to:  # type: ignore[index]
                    return  # (filtered: the next match is past the end)
                message = stored_of(stream, codec, reply)
                seq = message.sequence + 1
                yield message
                if left is not None:
                    left -= 1
            seq = max(seq, reply.last_sequence + 1)
            if reply.pending == 0:
                return
    finally:
        await replies.close()


# ------------------------------------------------------------------ get_last_many


async def get_last_many(
    js: JetStreamContext,
    codec: Codec[T],
    *,
    stream: str,
    subjects: Sequence[str],
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> dict[str, StoredMessage[T]]:
    """The last message of each subject in ``stream``, decoded, by subject.

    ``subjects`` may hold wildcard patterns: every subject a pattern matches gets its
    last message. A subject the stream holds nothing on is absent from the result.
    The server answers with one read for at most 1024 matched subjects: more subjects
    are sent in chunks of 1024, and a chunk whose wildcards match more than 1024 is
    split. The result is one point in time: every chunk and page reads the stream up
    to the same sequence (``up_to_seq``): the stream's last one before the first
    request where more than one chunk is needed, else the first answer's. An answer
    stops after about ``max_bytes`` bytes and the read goes on from there. The
    stream must allow direct gets (``allow_direct``) and the server be nats-server
    2.11 or later.

    Raises:
        ValueError: Invalid stream name, ``subjects`` empty or a single string, or
            ``max_bytes`` not from 1 to 2**63 - 1.
        InvalidSubject: An invalid subject or pattern.
        FeatureUnsupported: The server is older than 2.11 (nothing is sent).
        StreamNotFound: The stream does not exist.
        StreamFeatureDisabled: The stream does not allow direct gets (``allow_direct``).
        ResourceLimit: A single pattern matches more than 1024 subjects (naming it).
        DecodeError: A message's data is not a valid ``T`` (naming stream, subject
            and sequence).
        PermissionDenied: The server refused the request.
        TransportError: No answer in time, the connection failed, or a page the
            server said more were left for found nothing (messages removed meanwhile).
    """
    check_name("stream", stream)
    if isinstance(subjects, str):
        raise ValueError(f"subjects must be a list of subjects, not the string {subjects!r}")
    wanted = list(dict.fromkeys(subjects))
    if not wanted:
        raise ValueError(f"the last messages of stream {stream!r}: give at least one subject")
    for subject in wanted:
        validate_pattern(subject)
    _check_positive("max_bytes", max_bytes)
    shown = repr(wanted[0]) if len(wanted) == 1 else f"{wanted[0]!r} and {len(wanted) - 1} more"
    what = f"reading the last messages of {shown} in stream {stream!r}"
    replies = DirectReplies(js, stream, what, explain_missing(js, stream, what, wanted[0]))
    replies.check()
    # Before 2.12 a cut answer may say nothing is left with one subject to go.
    short_count = not connected_server(connection(js)).has(_PENDING_COUNTED)
    found: dict[str, StoredMessage[T]] = {}
    chunks = [wanted[i : i + MAX_SUBJECTS] for i in range(0, len(wanted), MAX_SUBJECTS)]
    up_to: int | None = None
    try:
        while chunks:
            if up_to is None and len(chunks) > 1:
                # A first chunk with nothing (404), or refused and halved (413), would
                # not say how far it read: every chunk reads up to where the stream is now.
                up_to = await _last_sequence(js, stream, what)
                if up_to == 0:  # nothing stored yet
                    return found
            chunk = chunks.pop(0)
            try:
                async for reply in last_replies(js, replies, chunk, max_bytes, up_to, short_count):
                    if isinstance(reply, EndOfBatch):  # later chunks read up to the first's end
                        up_to = reply.up_to_sequence if up_to is None else up_to
                    else:
                        message = stored_of(stream, codec, reply)
                        found[message.subject] = message
            except ResourceLimit as exc:
                if len(chunk) == 1:
                    raise ResourceLimit(
                        f"{what}: {chunk[0]!r} matches more than {MAX_SUBJECTS} subjects, "
                        "the most one read may match; ask for narrower subjects, or read "
                        "them with a consumer",
                        code=exc.code,
                    ) from exc
                half = len(chunk) // 2
                chunks[:0] = [chunk[:half], chunk[half:]]
    finally:
        await replies.close()
    return found


async def last_replies(
    js: JetStreamContext,
    replies: DirectReplies,
    subjects: list[str],
    max_bytes: int,
    up_to: int | None = None,
    short_count: bool = False,
) -> AsyncGenerator[Msg | EndOfBatch, None]:
    """The replies of one ``multi_last`` read of ``subjects``: its messages, each page's end.

    A page cut after about ``max_bytes`` is followed by the next, from the sequence
    after its last message, up to ``up_to`` (None: the first answer's). With
    ``short_count`` (a server counting one short, before 2.12) it asks again after
    every page that held messages, until one holds none. Nothing on the subjects
    (404) ends it. The caller closes ``replies``.

    Raises:
        ResourceLimit: The subjects match more than 1024 subjects (413).
        TransportError: A page the server said more were left for had none (their
            messages removed meanwhile: what was read would pass for the whole),
            another status, no answer in time, or the connection failed.
        PermissionDenied: The server refused the request.
        Exception: What ``replies``' missing callback gives, when nothing answers.
    """
    seq = received = 0
    more = False  # the last page's end said more are left
    while True:
        request: dict[str, Any] = {"multi_last": subjects, "max_bytes": max_bytes}
        if up_to is not None:
            request["up_to_seq"] = up_to
        if seq:
            request["seq"] = seq
        await _send(js, replies, request)
        page = 0
        while True:
            reply = await _receive(js, replies)
            if reply is None:  # 404: nothing (more) on the subjects
                if more:
                    raise TransportError(
                        f"{replies.what}: the server found nothing after {received} messages, "
                        "with more to come (their messages removed meanwhile?); nothing "
                        "more was read: read them again"
                    )
                return
            yield reply
            if isinstance(reply, EndOfBatch):
                break
            page += 1
        received += page
        up_to = reply.up_to_sequence if up_to is None else up_to
        more = reply.pending > 0
        # A server counting one short: go on until an answer holds nothing.
        if not more and not (short_count and page):
            return
        seq = reply.last_sequence + 1
