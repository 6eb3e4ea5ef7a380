"""Watching a bucket: its changes as a goflux subscriber of ``Entry[T]``.

A :class:`KeyWatcher` is an ordered JetStream subscriber on the bucket's stream
(no durable, no acks; it recreates its consumer after any gap), whose handler turns
each write into an :class:`~._kv_entry.Entry` and hands it on as the payload of a
message whose subject is the key. So everything that takes a
:class:`goflux.Subscriber` (``Group.subscribe``, ``process``, ``micro_batches``,
the Spark adapter's ``run_micro_batches``) works on a bucket's changes. The CONSUMER
span of each entry links to the span of the put that wrote it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from nats.js import JetStreamContext

from goflux._codecs import BytesCodec, Codec, JsonCodec
from goflux._errors import DecodeError, InvalidSubject, SubscribeError
from goflux._interfaces import Handler
from goflux._message import Message
from goflux._streams import MessageStream, Streaming
from goflux._subjects import validate_pattern
from goflux._telemetry import Telemetry
from goflux.transports.jetstream._kv_entry import (
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


class KeyWatcher(Streaming[Entry[T]], Generic[T]):
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
        """``Entry[V]`` for a ``JsonCodec(V)`` (the Spark adapter reads it), else None."""
        codec = self._codec
        return Entry[codec.type] if isinstance(codec, JsonCodec) else None  # type: ignore[name-defined]

    async def start(self, subject: str, handler: Handler[Entry[T]]) -> JetStreamSubscription[bytes]:
        """Watch the keys matching ``subject`` (a key pattern); return once watching.

        Raises:
            InvalidSubject: ``subject`` is not a valid key pattern.
            SubscribeError: The bucket does not exist, the watcher is closed, or the
                connection failed.
        """
        validate_pattern(subject)  # the same rules, and words, as any subscription
        try:
            check_key_pattern(subject)
        except ValueError as exc:
            raise InvalidSubject(str(exc), subject=subject) from exc
        bucket, codec, ignore_deletes = self._bucket, self._codec, self._ignore_deletes

        async def on_write(msg: Message[bytes]) -> None:
            delivery = msg.delivery
            assert delivery is not None  # a JetStream delivery
            # The headers as the subscription made them (None where none came): not
            # msg.headers or msg.wire_headers, which would make empty ones per write.
            headers, wire = msg._headers, msg._wire
            try:
                entry = entry_of(
                    bucket,
                    codec,
                    msg.subject,
                    msg.data or b"",
                    wire,
                    revision=delivery.stream_sequence,
                    created=delivery.timestamp,
                    delta=delivery.num_pending,
                )
            except DecodeError as exc:
                self.undecodable += 1
                logger.error("watching bucket %r: skipped an undecodable value: %s", bucket, exc)
                return
            if ignore_deletes and entry.operation != "put":
                return
            await handler(
                Message(
                    entry.key,
                    entry,
                    headers=headers,
                    id=msg.id,
                    delivery=delivery,
                    data=msg.data,
                    wire_headers=wire,
                )
            )

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

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class EntryFeed(Generic[T]):
    """A bucket's writes as an async iterator of :class:`Entry`; use in ``async with``.

    Made by :meth:`KeyValue.watch`. Leaving the ``async with`` block (or ``aclose``)
    stops the watch.
    """

    def __init__(self, watcher: KeyWatcher[T], pattern: str, buffer: int) -> None:
        self._watcher = watcher
        self._messages: MessageStream[Entry[T]] = watcher.stream(pattern, buffer=buffer)
        self._feed = self._messages._feed  # read directly: one coroutine less per entry

    async def __aenter__(self) -> Self:
        await self._messages.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncIterator[Entry[T]]:
        return self

    async def __anext__(self) -> Entry[T]:
        """The next write.

        Raises:
            StopAsyncIteration: The watch was stopped.
            SubscribeError: The watch failed.
        """
        entry = await self._feed.next_entry()
        assert entry is not None  # no deadline given
        return entry.message.payload

    async def aclose(self) -> None:
        """Stop the watch."""
        try:
            await self._messages.close()
        finally:
            await self._watcher.close()
