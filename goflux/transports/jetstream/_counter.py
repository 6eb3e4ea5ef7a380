"""Distributed counters (ADR-49): streams whose subjects each hold a running total.

A stream with ``allow_msg_counter`` (nats-server 2.12) is a set of counters, one per
subject. A publish carries no body and a ``Nats-Incr`` header (``+5``, ``-3``, ``+0``);
the stream's leader adds it to the subject's last value and stores a message whose
body is ``{"val":"<decimal>"}``, and the PubAck carries the new total as ``"val"``.
The server keeps arbitrary-precision integers, written in decimal, so goflux parses
them as Python ints: exact at any size (never floats).

A counter stream that sources other counter streams (with a subject transform onto
one subject) holds their sum: the server keeps the last value seen of each source in
a ``Nats-Counter-Sources`` header (``{"<stream>": {"<subject>": "<val>"}}``), so the
aggregate stays exact whatever order and however often the sourced messages arrive.
A mirror of a counter stream holds the same values (a mirror cannot count itself).

Reads: :meth:`Counter.get` asks for the last message on a subject (a direct get
where the stream allows it, else the API's message get); :meth:`Counter.entries`
and :meth:`Counter.totals` read the last value of every subject of a pattern with one
batched direct get (``multi_last``) where the stream has ``allow_direct``, else with
a short-lived consumer delivering the last message per subject.
"""

from __future__ import annotations

import asyncio
import contextlib
import decimal
import operator
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, SupportsIndex, cast

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import APIError
from pydantic_core import from_json

from goflux._codecs import BytesCodec
from goflux._errors import DecodeError, PublishError, TransportError
from goflux._otel.telemetry import Telemetry
from goflux._subjects import matches, validate_pattern, validate_subject
from goflux.transports._natspy import api_prefix, api_timeout, connection
from goflux.transports.jetstream._acker import delivery_of
from goflux.transports.jetstream._api import (
    ApiCall,
    api_error,
    api_guard,
    api_request,
    check_name,
    message_get,
    provisioning_error,
)
from goflux.transports.jetstream._batch_get import DirectReplies, last_replies
from goflux.transports.jetstream._errors import (
    DuplicateMessageId,
    ResourceLimit,
    StreamFeatureDisabled,
    StreamNotFound,
    SubjectOutsideStream,
)
from goflux.transports.jetstream._features import BATCH_DIRECT_GET, COUNTERS, require
from goflux.transports.jetstream._publisher import DEFAULT_TIMEOUT, Publisher
from goflux.transports.jetstream._replies import counter_value
from goflux.transports.jetstream._server import connected_server
from goflux.transports.jetstream._status import NO_MESSAGES, STREAM_NOT_FOUND
from goflux.transports.jetstream._stored import scan

__all__ = ("Counter", "CounterEntry")

_INCR: Final = "Nats-Incr"
_SOURCES: Final = "Nats-Counter-Sources"
_VALUE_TYPE: Final = "CounterValue"
_SUBJECT: Final = "Nats-Subject"
_SEQUENCE: Final = "Nats-Sequence"
# The bytes one batched direct get sends before it ends a batch (and the next goes on
# from there): bounds what waits in the client's queue, ~25 counters of 20,000 digits.
_BATCH_BYTES: Final = 1 << 20
# Ints of fewer bits than this have fewer than 640 digits: str() writes them whatever
# Python's limit on int/str conversion (sys.set_int_max_str_digits, never below 640).
_SHORT_BITS: Final = 2_000


def _decimal(value: int) -> str:
    """``value`` in decimal, at any size (through Decimal above Python's int/str limit)."""
    if value.bit_length() < _SHORT_BITS:
        return str(value)
    return str(decimal.Decimal(value))  # exact: Decimal(int) keeps every digit


@dataclass(frozen=True, slots=True)
class CounterEntry:
    """A counter's last stored value, with what the server notes beside it.

    Attributes:
        subject: The counter's subject.
        value: Its total (an exact int of any size).
        sequence: The stream sequence of the message holding it (purge up to it to
            reset a standalone counter after publishing its negative).
        increment: The increment that message stored (its ``Nats-Incr``); for a
            sourced message, the change the source brought.
        sources: For a counter that sums other streams' counters: the last value
            seen of each, by source stream and its original subject
            (``{"EU": {"hits.eu": 12}}``); empty otherwise.
    """

    subject: str
    value: int
    sequence: int
    increment: int | None = None
    sources: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def __repr__(self) -> str:
        # Written out here: repr() of an int beyond Python's int/str limit raises.
        increment = None if self.increment is None else _decimal(self.increment)
        sources = ", ".join(
            f"{origin!r}: {{"
            + ", ".join(f"{name!r}: {_decimal(value)}" for name, value in subjects.items())
            + "}"
            for origin, subjects in self.sources.items()
        )
        return (
            f"CounterEntry(subject={self.subject!r}, value={_decimal(self.value)}, "
            f"sequence={self.sequence}, increment={increment}, sources={{{sources}}})"
        )


class _NoDirectGets(Exception):
    """Nothing answered a direct get: the stream is gone, or no longer allows them."""


@dataclass(frozen=True, slots=True)
class _Config:
    """What a Counter needs of its stream's config."""

    subjects: tuple[str, ...]
    counts: bool  # allow_msg_counter
    direct: bool  # allow_direct
    mirror: str | None


class Counter:
    """The counters of a stream with ``allow_msg_counter`` (nats-server 2.12, ADR-49).

    Every subject of the stream is a counter. :meth:`add` changes one and returns its
    new total; :meth:`get` reads one; :meth:`totals` reads all of a pattern. Values are
    Python ints, exact at any size. A counter stream that sources other counter
    streams sums them (the server tracks each source), and :meth:`entry` shows the
    parts; reading works on such an aggregate and on a mirror alike.

    The stream's config is read once, at the first call (subjects, whether it
    counts, whether it allows direct gets), and again when a subject is not one of
    its subjects.

    Args:
        js: A JetStream context of a connected nats-py client (the caller owns it).
        stream: The counter stream.
        timeout: Seconds to wait for each PubAck of :meth:`add`.
        telemetry: Tracing and metrics of :meth:`add` (a publish span and the
            publish metrics, like :meth:`Publisher.publish`); default: the
            OpenTelemetry globals. Reads record none, like ``get_last``.

    Raises:
        ValueError: Invalid stream name, or ``timeout`` not positive.
    """

    __slots__ = ("_config", "_js", "_loading", "_nc", "_publisher", "_stream")

    def __init__(
        self,
        js: JetStreamContext,
        *,
        stream: str,
        timeout: float = DEFAULT_TIMEOUT,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._stream = check_name("stream", stream)
        self._js = js
        self._nc = connection(js)
        self._publisher = Publisher(js, BytesCodec(), timeout=timeout, telemetry=telemetry)
        self._config: _Config | None = None
        self._loading = asyncio.Lock()

    @property
    def stream(self) -> str:
        """The counter stream."""
        return self._stream

    def __repr__(self) -> str:
        return f"Counter(stream={self._stream!r})"

    # ------------------------------------------------------------------ the stream

    async def _load(self, *, again: bool = False) -> _Config:
        """The stream's config (read once; again when ``again``)."""
        seen = self._config
        if seen is not None and not again:
            return seen
        async with self._loading:
            if self._config is not None and self._config is not seen:
                return self._config  # read by another call meanwhile
            what = f"counter stream {self._stream!r}"
            with ApiCall(self._js, what, f"STREAM.INFO.{self._stream}"):
                try:
                    reply = await api_request(self._js, f"STREAM.INFO.{self._stream}")
                except APIError as exc:
                    raise provisioning_error(exc, what) from exc
            config: dict[str, Any] = reply.get("config") or {}
            mirror = config.get("mirror")
            self._config = _Config(
                subjects=tuple(config.get("subjects") or ()),
                counts=bool(config.get("allow_msg_counter")),
                direct=bool(config.get("allow_direct")),
                mirror=mirror.get("name") if isinstance(mirror, dict) else None,
            )
            return self._config

    def _gone(self, what: str) -> StreamNotFound:
        self._config = None  # read it again if it comes back
        return StreamNotFound(f"{what}: stream {self._stream!r} not found")

    async def _check_counts(self, subject: str) -> None:
        """Raise unless the stream counts and ``subject`` is one of its subjects."""
        config = await self._load()
        what = f"counter add to {subject!r}"
        if not config.counts:
            if config.mirror is not None:
                detail = (
                    f"it mirrors {config.mirror!r} (a mirror cannot count): add to "
                    f"{config.mirror!r} instead"
                )
            else:
                detail = (
                    "it is not a counter stream; the setting can only be given when a "
                    f"stream is created: ensure_stream(js, name={self._stream!r}, ..., "
                    "allow_msg_counter=True)"
                )
            raise StreamFeatureDisabled(
                f"{what} refused, nothing sent: stream {self._stream!r} does not allow "
                f"counters (allow_msg_counter); {detail}",
                subject=subject,
                stream=self._stream,
                setting="allow_msg_counter",
            )
        if not any(matches(pattern, subject) for pattern in config.subjects):
            config = await self._load(again=True)  # subjects may have been added
            if not any(matches(pattern, subject) for pattern in config.subjects):
                held = ", ".join(config.subjects) or "none: it only sums its sources"
                raise SubjectOutsideStream(
                    f"{what}: {subject!r} is not a subject of counter stream "
                    f"{self._stream!r} (its subjects: {held}); nothing sent",
                    subject=subject,
                    stream=self._stream,
                    subjects=tuple(config.subjects),
                )

    # ------------------------------------------------------------------ counting

    async def add(
        self, subject: str, delta: SupportsIndex, *, message_id: str | None = None
    ) -> int:
        """Add ``delta`` (negative to subtract, 0 to read-and-create) and return the new total.

        The total comes from the PubAck: no read follows. ``delta`` is any integer
        (an ``int``, a NumPy integer: whatever ``operator.index`` takes), of any size.

        Without ``message_id`` an add whose PubAck does not come (a timeout, a lost
        connection) may or may not have been counted, and adding again may count it
        twice. ``message_id`` makes a retry safe: the server counts an increment
        with the same ID once within the stream's duplicate window. For a duplicate
        the total is the one the ID's first add returned (read from the message it
        stored; if that message is gone, the subject's current total). An ID is one
        increment: reused for another subject it raises :class:`DuplicateMessageId`.

        Raises:
            TypeError: ``delta`` is not an integer (a bool, float or str is refused).
            InvalidSubject: ``subject`` is invalid, or not one of the stream's
                subjects (:class:`SubjectOutsideStream`, a subclass); nothing sent.
            InvalidHeader: ``message_id`` cannot travel on the wire.
            FeatureUnsupported: The server is older than 2.12; nothing sent.
            StreamFeatureDisabled: The stream does not have ``allow_msg_counter``
                (or is a mirror); nothing sent.
            StreamNotFound: The stream does not exist.
            DuplicateMessageId: ``message_id`` was counted before, for another
                subject (or for a message that is gone, on a subject with no counter);
                nothing added.
            PublishError: The server refused the increment, no PubAck came in time
                (``may_be_stored``), the connection is closed, or the increment was
                stored in another stream than this counter's.
        """
        if isinstance(delta, bool):
            raise TypeError(f"a counter delta is an int, got {delta!r} (bool)")
        try:
            amount = operator.index(delta)
        except TypeError as exc:
            raise TypeError(
                f"a counter delta is an int, got {delta!r} ({type(delta).__name__})"
            ) from exc
        validate_subject(subject)
        require(self._nc, COUNTERS, f"counter add to {subject!r}", subject=subject)
        await self._check_counts(subject)
        increment = _decimal(amount)
        try:
            receipt = await self._publisher.publish(
                subject,
                b"",
                message_id=message_id,
                server_headers={_INCR: increment if amount < 0 else f"+{increment}"},
            )
        except PublishError as exc:
            if message_id is not None or type(exc) is not PublishError or not exc.may_be_stored:
                raise
            # What happened, not what to do (that differs without a message ID).
            happened = str(exc).split(";", 1)[0].removeprefix(f"publish to {subject!r}: ")
            raise PublishError(
                f"counter add to {subject!r} of stream {self._stream!r}: {happened}; the "
                "increment may or may not have been counted. Without a message_id, adding "
                "again may count it twice; add(..., message_id=...) makes retries safe (the "
                "server counts an ID once)",
                subject=subject,
                may_be_stored=True,
            ) from exc
        if receipt.stream != self._stream:
            raise PublishError(
                f"counter add to {subject!r}: stream {receipt.stream!r} counted it, not "
                f"stream {self._stream!r} (their subjects overlap?)",
                subject=subject,
                may_be_stored=True,
                permanent=True,
            )
        if receipt.value is not None:
            return receipt.value
        if receipt.duplicate:
            return await self._counted_before(subject, message_id or "", receipt.sequence)
        raise PublishError(
            f"counter add to {subject!r}: the PubAck of stream {self._stream!r} carries no total",
            subject=subject,
            may_be_stored=True,
        )

    async def _counted_before(self, subject: str, message_id: str, sequence: int) -> int:
        """The total of a duplicate add: what the message ID's first add stored.

        Raises:
            DuplicateMessageId: The ID counted another subject, or its message is gone
                and ``subject`` has no counter.
        """
        what = f"counter add to {subject!r}"
        with ApiCall(self._js, what, f"STREAM.MSG.GET.{self._stream}"):
            try:
                stored = await message_get(self._js, self._stream, {"seq": sequence})
            except APIError as exc:
                raise provisioning_error(exc, f"{what}: counter stream {self._stream!r}") from exc
        if stored is not None:
            if stored.subject != subject:
                raise DuplicateMessageId(
                    f"{what} of stream {self._stream!r}: nothing added: message_id "
                    f"{message_id!r} was already counted for {stored.subject!r} (sequence "
                    f"{sequence}); a message ID stands for one increment, give this one "
                    "its own",
                    subject=subject,
                    stream=self._stream,
                    message_id=message_id,
                    counted_subject=stored.subject,
                    sequence=sequence,
                )
            return self._entry(stored.subject, stored.sequence, stored.data, stored.headers).value
        # The message is gone (purged, or over a limit): the subject's total now.
        total = await self.get(subject)
        if total is not None:
            return total
        raise DuplicateMessageId(
            f"{what} of stream {self._stream!r}: nothing added: message_id {message_id!r} "
            f"was already counted (sequence {sequence}, a message since removed), and "
            f"{subject!r} has no counter: the ID counted another subject, or this "
            "counter was removed since",
            subject=subject,
            stream=self._stream,
            message_id=message_id,
            counted_subject=None,
            sequence=sequence,
        )

    # ------------------------------------------------------------------ reading

    async def get(self, subject: str) -> int | None:
        """The total of the counter ``subject``, or None if the stream has none on it.

        Raises:
            InvalidSubject: ``subject`` is invalid or a wildcard.
            StreamNotFound: The stream does not exist.
            DecodeError: The last message on ``subject`` is not a counter value.
            TransportError: No answer in time, or the connection failed.
        """
        entry = await self.entry(subject)
        return None if entry is None else entry.value

    async def entry(self, subject: str) -> CounterEntry | None:
        """The counter ``subject`` with its last increment and its sources, or None.

        Raises:
            InvalidSubject: ``subject`` is invalid or a wildcard.
            StreamNotFound: The stream does not exist.
            DecodeError: The last message on ``subject`` is not a counter value.
            TransportError: No answer in time, or the connection failed.
        """
        validate_subject(subject)
        config = await self._load()
        what = f"counter {subject!r} of stream {self._stream!r}"
        if config.direct:
            try:
                return await self._direct_get(subject, what)
            except _NoDirectGets:
                await self._direct_gone(what)  # read the other way if no longer direct
        with ApiCall(self._js, what, f"STREAM.MSG.GET.{self._stream}"):
            try:
                stored = await message_get(self._js, self._stream, {"last_by_subj": subject})
            except APIError as exc:
                if exc.err_code == STREAM_NOT_FOUND:
                    raise self._gone(what) from exc
                raise provisioning_error(exc, what) from exc
        if stored is None:
            return None
        return self._entry(stored.subject, stored.sequence, stored.data, stored.headers)

    async def _direct_gone(self, what: str) -> None:
        """After a direct get nothing answered: return if the stream no longer allows them.

        Raises:
            StreamNotFound: The stream is gone (its info says so).
            TransportError: It still allows direct gets, yet none answered (no leader
                at the moment, in a cluster).
        """
        config = await self._load(again=True)  # raises StreamNotFound if it is gone
        if config.direct:
            raise TransportError(
                f"{what}: no direct get answered, though stream {self._stream!r} allows them "
                "(no leader at the moment?)"
            )

    async def _direct_get(self, subject: str, what: str) -> CounterEntry | None:
        """The last message on ``subject`` by direct get.

        Raises:
            _NoDirectGets: Nothing answered.
        """
        tail = f"DIRECT.GET.{self._stream}.{subject}"
        wait = api_timeout(self._js)
        try:
            with api_guard(self._js, what, tail):
                reply = await self._nc.request(f"{api_prefix(self._js)}.{tail}", b"", timeout=wait)
        except nats.errors.NoRespondersError as exc:
            raise _NoDirectGets from exc
        except (nats.errors.Error, TimeoutError) as exc:
            raise api_error(exc, what, self._js) from exc
        headers = reply.headers or {}
        status = _status_of(headers)
        if status == NO_MESSAGES:
            return None
        if status is not None:
            description = headers.get("Description", "")
            raise TransportError(f"{what}: the server answered {status} {description}")
        return self._entry(
            headers.get(_SUBJECT, subject),
            int(headers.get(_SEQUENCE, "0")),
            reply.data,
            headers,
        )

    async def totals(self, pattern: str = ">") -> dict[str, int]:
        """The total of every counter whose subject matches ``pattern``, by subject.

        Read as :meth:`entries` reads them: one batched direct get where the stream
        allows direct gets, else a short-lived consumer.

        Raises:
            InvalidSubject: ``pattern`` is invalid.
            StreamNotFound: The stream does not exist.
            DecodeError: A subject's last message is not a counter value.
            TransportError: No answer in time, or the connection failed.
        """
        return {entry.subject: entry.value async for entry in self.entries(pattern)}

    async def entries(self, pattern: str = ">") -> AsyncGenerator[CounterEntry, None]:
        """Yield the counter of every subject matching ``pattern`` (a wildcard or not).

        With ``allow_direct`` on the stream (and nats-server 2.11+), one batched
        direct get (``multi_last``) reads the last message of every subject at one
        point of the stream, as the messages arrive (a stream whose pattern matches
        more than 1,024 subjects, the server's limit, is read the other way). Without
        it, a short-lived consumer delivers the last message per subject (ordered by
        sequence; works on every stream). Memory stays bounded either way. Leave it
        early inside ``contextlib.aclosing(...)`` so its consumer goes at once.

        Raises:
            InvalidSubject: ``pattern`` is invalid.
            StreamNotFound: The stream does not exist.
            DecodeError: A subject's last message is not a counter value.
            TransportError: No answer in time, the connection failed, or the
                messages of a batched read were removed while it read them.
        """
        validate_pattern(pattern)
        config = await self._load()
        if config.direct and connected_server(self._nc).has(BATCH_DIRECT_GET.since):
            what = f"counters {pattern!r} of stream {self._stream!r}"
            read = 0
            async with contextlib.aclosing(self._multi_last(pattern, what)) as many:
                try:
                    async for entry in many:
                        read += 1
                        yield entry
                except ResourceLimit:
                    pass  # refused at once (later pages match no more): read the other way
                except _NoDirectGets as exc:
                    await self._direct_gone(what)  # raises unless no longer direct
                    if read:  # read the other way, the entries read would come twice
                        raise TransportError(
                            f"{what}: stream {self._stream!r} stopped allowing direct gets "
                            f"after {read} counters; nothing more was read: read them again"
                        ) from exc
                else:
                    return
        async with contextlib.aclosing(self._scan(pattern)) as scanned:
            async for entry in scanned:
                yield entry

    async def _multi_last(self, pattern: str, what: str) -> AsyncGenerator[CounterEntry, None]:
        """The last message of each subject of ``pattern``, by batched direct get.

        Raises:
            ResourceLimit: The pattern matches more subjects than one batch answers.
            _NoDirectGets: Nothing answered the request.
            TransportError: The server failed the read after some entries (their
                messages removed meanwhile), or the request failed.
        """
        replies = DirectReplies(self._js, self._stream, what, _no_direct_gets)
        try:
            read = last_replies(self._js, replies, [pattern], _BATCH_BYTES)
            async with contextlib.aclosing(read):
                async for msg in read:
                    if isinstance(msg, Msg):
                        headers = msg.headers or {}
                        sequence = int(headers.get(_SEQUENCE, "0"))
                        yield self._entry(headers.get(_SUBJECT, ""), sequence, msg.data, headers)
        finally:
            await replies.close()

    async def _scan(self, pattern: str) -> AsyncGenerator[CounterEntry, None]:
        """The last message of each subject of ``pattern``, by a short-lived consumer."""
        what = f"counters {pattern!r} of stream {self._stream!r}"
        # scan() is an async generator: closed, it deletes its consumer at once.
        messages = cast(
            "AsyncGenerator[Msg, None]",
            scan(self._js, self._stream, pattern, deliver="last_per_subject"),
        )
        try:
            async with contextlib.aclosing(messages):
                async for msg in messages:
                    sequence = delivery_of(msg.reply).stream_sequence
                    yield self._entry(msg.subject, sequence, msg.data, msg.headers)
        except APIError as exc:
            if exc.err_code == STREAM_NOT_FOUND:
                raise self._gone(what) from exc
            raise api_error(exc, what, self._js) from exc
        except (nats.errors.Error, TimeoutError) as exc:
            raise api_error(exc, what, self._js) from exc

    def _entry(
        self, subject: str, sequence: int, data: bytes, headers: Mapping[str, str] | None
    ) -> CounterEntry:
        """The counter a stored message holds.

        Raises:
            DecodeError: Its body is not ``{"val": "<decimal>"}``, or its counter
                headers cannot be read.
        """
        headers = headers or {}
        try:
            body = from_json(data)
            value = counter_value(body["val"])
            incr = headers.get(_INCR)
            increment = None if incr is None else counter_value(incr)
            sources: dict[str, dict[str, int]] = {}
            if (noted := headers.get(_SOURCES)) is not None:
                for origin, subjects in from_json(noted).items():
                    sources[origin] = {name: counter_value(v) for name, v in subjects.items()}
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise DecodeError(
                f"stream {self._stream!r}, subject {subject!r}, sequence {sequence}: not a "
                f"counter value: {bytes(data[:100])!r} ({exc})",
                type_name=_VALUE_TYPE,
                size=len(data),
            ) from exc
        return CounterEntry(
            subject=subject, value=value, sequence=sequence, increment=increment, sources=sources
        )


async def _no_direct_gets() -> Exception:
    """What a batched read raises when nothing answers it (see :meth:`Counter._direct_gone`)."""
    return _NoDirectGets()


def _status_of(headers: dict[str, str]) -> str | None:
    """The server's status of a direct get reply; None for a stored message.

    A stored message carries ``Nats-Sequence`` (the server adds it) and may carry a
    ``Status`` header of its own, written by another client: only a reply without
    ``Nats-Sequence`` is a status.
    """
    if _SEQUENCE in headers:
        return None
    return headers.get("Status")
