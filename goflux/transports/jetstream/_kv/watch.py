"""Watching a bucket: its changes as a goflux subscriber of ``Entry[T]``.

A :class:`KeyWatcher` is an ordered JetStream subscriber on the bucket's stream
(no durable, no acks; it recreates its consumer after any gap), whose handler turns
each write into an :class:`~.entry.Entry` and hands it on as the payload of a
message whose subject is the key. So everything that takes a
:class:`goflux.Subscriber` (``Group.subscribe``, ``process``, ``micro_batches``,
the Spark adapter's ``run_micro_batches``) works on a bucket's changes. The CONSUMER
span of each entry links to the span of the put that wrote it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, Self, TypeVar

from nats.js import JetStreamContext

from goflux._codecs import BytesCodec, Codec
from goflux._compose.streams import Streaming
from goflux._errors import DecodeError, GofluxError, InvalidSubject, SubscribeError
from goflux._interfaces import Handler
from goflux._lifecycle import AcloseOnExit, CloseOnExit
from goflux._message import Message
from goflux._otel.telemetry import Telemetry
from goflux._subjects import validate_pattern
from goflux.transports._natspy import received_headers
from goflux.transports.jetstream._acker import JetStreamAcker, write_facts
from goflux.transports.jetstream._kv.entry import (
    Entry,
    check_key_pattern,
    entry_of,
    key_subject,
    stream_of,
)
from goflux.transports.jetstream._subscriber import Subscriber
from goflux.transports.jetstream._subscription import JetStreamSubscription

__all__ = ("EntryFeed", "KeyWatcher")

T = TypeVar("T")

logger = logging.getLogger("goflux.transports.jetstream")

_RAW = BytesCodec()


class KeyWatcher(CloseOnExit, Streaming[Entry[T]], Generic[T]):
    """A :class:`goflux.Subscriber` of a bucket's writes, as ``Message[Entry[T]]``.

    ``start(pattern, handler)`` watches the keys matching ``pattern`` (``">"``: all;
    ``"user.*"``: one token after ``user.``). Each message's subject is the key and
    its payload the :class:`Entry`. By default a watch starts with the latest write of
    each key, then follows every change; ``include_history`` starts with every write
    the bucket keeps, ``updates_only`` with the first change after the start.
    ``ignore_deletes`` leaves out deletes and purges. A value that does not decode is
    logged once, counted in :attr:`undecodable`, and skipped; the watch goes on.

    Made by :meth:`KeyValue.watcher`.
    """

    def __init__(
        self,
        js: JetStreamContext,
        bucket: str,
        codec: Codec[T],
        *,
        include_history: bool = False,
        ignore_deletes: bool = False,
        updates_only: bool = False,
        telemetry: Telemetry | None = None,
    ) -> None:
        if include_history and updates_only:
            raise ValueError("include_history and updates_only exclude each other")
        deliver = "all" if include_history else "new" if updates_only else "last_per_subject"
        self._bucket = bucket
        self._codec = codec
        self._ignore_deletes = ignore_deletes
        self._inner = Subscriber(
            js,
            _RAW,
            stream=stream_of(bucket),
            ordered=True,
            consumer_config={"deliver_policy": deliver},
            telemetry=telemetry,
        )
        self.undecodable = 0

    @property
    def codec(self) -> Codec[T]:
        """The codec of the bucket's values."""
        return self._codec

    @property
    def payload_type(self) -> Any:
        """``Entry[V]`` for a codec that states ``V`` as its ``.type``, else None.

        ``JsonCodec(V)``, ``MsgpackCodec(V)``, a pipe starting with one. The Spark
        adapter reads it (``run_micro_batches``).
        """
        value_type = getattr(self._codec, "type", None)
        return None if value_type is None else Entry[value_type]  # type: ignore[valid-type]

    async def start(self, subject: str, handler: Handler[Entry[T]]) -> JetStreamSubscription[bytes]:
        """Watch the keys matching ``subject`` (a key pattern); return once watching.

        Raises:
            InvalidSubject: ``subject`` is not a valid key pattern.
            SubscribeError: The bucket does not exist, the watcher is closed, or the
                connection failed.
        """

        async def hand_on(entry: Entry[T] | None, msg: Message[bytes], last: bool) -> None:
            if entry is None:
                return  # an entry left out (a delete, an undecodable value)
            await handler(
                Message(
                    entry.key,
                    entry,
                    headers=msg._headers,  # as received: not msg.headers, which makes
                    id=msg.id,  # empty ones where none came
                    delivery=msg.delivery,
                    data=msg.data,
                    wire_headers=msg._wire,
                )
            )

        return await self._start_entries(subject, hand_on)

    async def _start_entries(
        self,
        subject: str,
        take: Callable[[Entry[T] | None, Message[bytes], bool], Awaitable[None]],
    ) -> JetStreamSubscription[bytes]:
        """Watch ``subject``; hand each write's entry (with its message) to ``take``.

        ``take`` also learns whether the write was the last one pending (delta 0).

        A write left out (a delete with ``ignore_deletes``, an undecodable value) is
        handed on as None when it was the last one pending (delta 0), so a reader
        still learns that it has caught up.
        """
        validate_pattern(subject)  # the same rules, and words, as any subscription
        try:
            check_key_pattern(subject)
        except ValueError as exc:
            raise InvalidSubject(str(exc), subject=subject) from exc
        bucket, codec, ignore_deletes = self._bucket, self._codec, self._ignore_deletes
        prefix = len(bucket) + 5  # "$KV.<bucket>."

        async def on_write(msg: Message[bytes]) -> None:
            lazy = msg._delivery
            if isinstance(lazy, JetStreamAcker):  # read the facts without a Delivery
                revision, created, delta = write_facts(lazy.reply)
            else:
                delivery = msg.delivery
                assert delivery is not None  # a JetStream delivery
                revision, created = delivery.stream_sequence, delivery.timestamp
                delta = delivery.num_pending
            try:
                entry = entry_of(
                    bucket,
                    codec,
                    msg.subject,
                    msg.data or b"",
                    received_headers(msg._wire),  # (a header block, read now)
                    revision=revision,
                    created=created,
                    delta=delta,
                    key=msg.subject[prefix:],
                )
            except DecodeError as exc:
                self.undecodable += 1
                logger.error("watching bucket %r: skipped an undecodable value: %s", bucket, exc)
                if delta == 0:
                    await take(None, msg, True)
                return
            if ignore_deletes and entry.operation != "put":
                if delta == 0:
                    await take(None, msg, True)
                return
            await take(entry, msg, delta == 0)

        try:
            return await self._inner.start(key_subject(bucket, subject), on_write)
        except SubscribeError as exc:
            if "not found" in str(exc):
                raise SubscribeError(f"cannot watch bucket {bucket!r}: it does not exist") from exc
            raise

    async def subscribe(self, subject: str, handler: Handler[Entry[T]]) -> None:
        """Watch until cancelled or the watcher is closed, then stop.

        Raises:
            InvalidSubject: ``subject`` is not a valid key pattern.
            SubscribeError: The watch could not start, or failed.
        """
        subscription = await self.start(subject, handler)
        try:
            await subscription.wait()
        finally:
            await subscription.stop()

    async def close(self) -> None:
        """Stop every watch of this watcher; later ``start`` calls raise."""
        await self._inner.close()


class EntryFeed(AcloseOnExit, Generic[T]):
    """A bucket's writes as an async iterator of :class:`Entry`; use in ``async with``.

    Made by :meth:`KeyValue.watch`. The watch starts on entering (or on the first
    step) and stops on leaving (or ``aclose``). Entries wait in a buffer of
    ``buffer``; when it is full the watch takes no more from the server until the
    reader catches up.
    """

    def __init__(self, watcher: KeyWatcher[T], pattern: str, buffer: int) -> None:
        if buffer < 1:
            raise ValueError(f"buffer must be >= 1, got {buffer}")
        self._watcher = watcher
        self._pattern = pattern
        self._buffer = buffer
        self._entries: deque[tuple[Entry[T] | None, bool]] = deque()  # (entry, caught up)
        self._caught_up = False
        self._reader: asyncio.Future[None] | None = None  # the reader waiting for an entry
        self._writer: asyncio.Future[None] | None = None  # the watch waiting for room
        self._subscription: JetStreamSubscription[bytes] | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._ended = False
        self._failure: BaseException | None = None

    async def start(self) -> Self:
        """Start watching (once); return when the watch is live.

        Raises:
            SubscribeError: The bucket does not exist, or the connection failed.
        """
        if self._subscription is None and not self._ended:
            self._subscription = await self._watcher._start_entries(self._pattern, self._take)
            if self._subscription.pending_at_start == 0:
                self._caught_up = True  # nothing old to deliver (empty, or updates only)
            self._monitor = asyncio.get_running_loop().create_task(
                self._watch_end(self._subscription)
            )
        return self

    @property
    def caught_up(self) -> bool:
        """Whether every write the watch started with has been returned.

        True at once when there were none (an empty bucket, or ``updates_only``);
        else once the last of them has come out of :meth:`__anext__` (what is
        returned after that is a change). Check it after each entry to learn that a
        state loaded from the watch is complete. With ``ignore_deletes``, when the
        last old write is a delete (or an undecodable value), it turns True with the
        entry before it if the watch has received the delete by then, else with the
        next entry.
        """
        return self._caught_up

    async def _take(self, entry: Entry[T] | None, msg: Message[bytes], last: bool) -> None:
        entries = self._entries
        while len(entries) >= self._buffer and not self._ended:
            self._writer = asyncio.get_running_loop().create_future()
            await self._writer
        if self._ended:
            return
        entries.append((entry, last))
        reader = self._reader
        if reader is not None and not reader.done():
            reader.set_result(None)

    async def _watch_end(self, subscription: JetStreamSubscription[bytes]) -> None:
        try:
            await subscription.wait()
        except GofluxError as exc:  # the failure the reader gets after the buffered entries
            self._failure = exc
        self._end()

    def _end(self) -> None:
        self._ended = True
        for waiter in (self._reader, self._writer):
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def _open(self) -> None:
        await self.start()

    def __aiter__(self) -> AsyncIterator[Entry[T]]:
        return self

    async def __anext__(self) -> Entry[T]:
        """The next write.

        Raises:
            StopAsyncIteration: The watch was stopped.
            SubscribeError: The watch failed (after the entries received before).
        """
        if self._subscription is None and not self._ended:
            await self.start()
        entries = self._entries
        while True:
            if entries:
                entry, last = entries.popleft()
                writer = self._writer
                if writer is not None and not writer.done():
                    writer.set_result(None)
                if last:
                    self._caught_up = True
                if entry is None:
                    continue  # the last old write was left out: caught up all the same
                if entries and entries[0] == (None, True):
                    entries.popleft()  # the last old write came right after, left out
                    self._caught_up = True
                return entry
            if self._ended:
                if self._failure is not None:
                    raise self._failure
                raise StopAsyncIteration
            self._reader = asyncio.get_running_loop().create_future()
            await self._reader

    async def aclose(self) -> None:
        """Stop the watch; entries not read yet are dropped."""
        self._end()
        self._entries.clear()
        try:
            if self._subscription is not None:
                await self._subscription.stop()
        finally:
            await self._watcher.close()
            if self._monitor is not None:
                self._monitor.cancel()
