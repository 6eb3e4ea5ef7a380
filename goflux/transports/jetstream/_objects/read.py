"""Reading an object's chunks with bounded memory, and checking its digest.

The chunks are read with batched direct gets (``$JS.API.DIRECT.GET.<stream>`` with
``next_by_subj`` and ``batch``, nats-server 2.11+; the bucket's stream allows direct
gets): each request asks for the next chunks of the object up to about
``window_bytes``, and the request for the next batch goes out as soon as the
current one has arrived, so at most two batches are in memory while the caller
consumes one: the memory used does not grow with the object. The SHA-256 and the
size of what was read are checked against the meta message once the last chunk is
in: a mismatch raises :class:`~goflux.DigestMismatch`.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final

import nats.errors
from nats.js import JetStreamContext

from goflux._errors import GofluxError
from goflux._lifecycle import AcloseOnExit, CloseOnExit
from goflux.transports.jetstream._api import api_error
from goflux.transports.jetstream._batch_get import DirectReplies, EndOfBatch, explain_missing
from goflux.transports.jetstream._errors import BucketNotFound, DigestMismatch, ObjectNotFound
from goflux.transports.jetstream._objects.info import ObjectInfo
from goflux.transports.jetstream._objects.names import (
    chunk_subject,
    digest_bytes,
    digest_text,
    stream_name,
)

__all__ = ("DEFAULT_READ_WINDOW", "ChunkReader", "ObjectReader", "check_digest")

DEFAULT_READ_WINDOW: Final = 2 * 1024 * 1024  # bytes asked for per direct get batch
_SEQUENCE: Final = "Nats-Sequence"


def check_digest(info: ObjectInfo, size: int, sha256: bytes) -> None:
    """Raise DigestMismatch unless ``size`` bytes hashing to ``sha256`` are ``info``'s.

    Raises:
        DigestMismatch: The size or the digest differs from the meta message's.
    """
    expected = digest_bytes(info.digest)
    if size == info.size and (expected == sha256 or (not info.digest and size == 0)):
        return
    actual = digest_text(sha256)
    raise DigestMismatch(
        f"bucket {info.bucket!r}, object {info.name!r}: read {size} bytes with digest "
        f"{actual}, but the object is {info.size} bytes with digest {info.digest or '(none)'}",
        bucket=info.bucket,
        name=info.name,
        expected=info.digest,
        actual=actual,
    )


class ChunkReader(CloseOnExit):
    """The chunks of one object version, in order, then a digest check.

    Use it in ``async with`` (the reply subscription is removed on the way out,
    also after a ``break``), and iterate it for the chunks.

    Args:
        js: The JetStream context.
        info: The object to read.
        window_bytes: About how many bytes one direct get batch asks for.
    """

    __slots__ = (
        "_batch",
        "_closed",
        "_done",
        "_info",
        "_js",
        "_next_seq",
        "_ready",
        "_reload",
        "_replies",
        "_sha",
        "_size",
        "_verified",
        "_what",
    )

    def __init__(
        self,
        js: JetStreamContext,
        info: ObjectInfo,
        *,
        window_bytes: int,
        reload: Callable[[], Awaitable[ObjectInfo]] | None = None,
    ) -> None:
        self._js = js
        self._reload = reload
        self._info = info
        self._batch = max(1, window_bytes // max(1, info.chunk_size or 128 * 1024))
        self._next_seq = 1
        self._ready: deque[bytes] = deque()
        self._done = info.chunks == 0 and info.size == 0
        self._verified = False
        self._closed = False
        self._sha = hashlib.sha256()
        self._size = 0
        self._what = f"reading object {info.name!r} of bucket {info.bucket!r}"
        chunks = chunk_subject(info.bucket, info.nuid)
        stream = stream_name(info.bucket)
        missing = explain_missing(js, stream, self._what, chunks, not_found=self._gone)
        self._replies = DirectReplies(js, stream, self._what, missing)

    def _gone(self) -> GofluxError:
        return BucketNotFound(
            f"{self._what}: the bucket's stream is gone", bucket=self._info.bucket
        )

    async def open(self) -> None:
        """Subscribe the reply inbox and ask for the first batch.

        Raises:
            FeatureUnsupported: The server is older than 2.11 (no batched direct get).
            PermissionDenied: The server refused the inbox or the request.
            TransportError: The connection is closed or failed.
        """
        if self._replies.is_open or self._done or self._closed:
            return
        with self._replies.guard():
            try:
                await self._replies.open()
                await self._request()
            except nats.errors.Error as exc:
                raise api_error(exc, self._what, self._js) from exc

    async def _request(self) -> None:
        await self._replies.ask(
            {
                "seq": self._next_seq,
                "next_by_subj": chunk_subject(self._info.bucket, self._info.nuid),
                "batch": self._batch,
            }
        )

    async def next_chunk(self) -> bytes | None:
        """The next chunk, or None after the last one (once its digest checked out).

        Raises:
            DigestMismatch: All chunks are read and their size or digest is not the
                object's (a chunk is missing, changed or extra).
            BucketNotFound: The bucket's stream is gone.
            StreamFeatureDisabled: The bucket's stream does not allow direct gets
                (its ``allow_direct`` was turned off).
            PermissionDenied: The server refused a request.
            TransportError: No answer in time (after some chunks: naming the
                sequence it stopped at), or the connection failed.
        """
        if self._closed:
            return None
        while not self._ready:
            if self._done:
                if not self._verified:
                    self._verified = True
                    if self._size < self._info.size:
                        await self._check_current()
                    check_digest(self._info, self._size, self._sha.digest())
                return None
            await self.open()
            with self._replies.guard():
                try:
                    await self._receive_batch()
                except nats.errors.Error as exc:
                    raise api_error(exc, self._what, self._js) from exc
        return self._ready.popleft()

    async def _check_current(self) -> None:
        """A read that came up short: say so if the object was replaced or deleted.

        Raises:
            ObjectNotFound: The object is deleted, or another version replaced it
                (and its chunks are gone): read it again.
        """
        if self._reload is None:
            return
        info = self._info
        try:
            latest = await self._reload()
        except ObjectNotFound as exc:
            raise ObjectNotFound(
                f"{self._what}: it was deleted (or expired) while being read",
                bucket=info.bucket,
                name=info.name,
            ) from exc
        if latest.nuid != info.nuid:
            raise ObjectNotFound(
                f"{self._what}: it was replaced while being read; read it again",
                bucket=info.bucket,
                name=info.name,
            )

    async def _receive_batch(self) -> None:
        """Take one batch's replies; ask for the next batch at once if there is more."""
        while True:
            reply = await self._replies.next()
            if reply is None:  # 404: no (more) chunks
                self._done = True
                return
            if isinstance(reply, EndOfBatch):
                if reply.pending > 0:
                    await self._request()  # the next batch streams in meanwhile
                else:
                    self._done = True
                return
            headers = reply.headers or {}
            self._next_seq = int(headers[_SEQUENCE]) + 1
            self._sha.update(reply.data)
            self._size += len(reply.data)
            self._ready.append(reply.data)

    async def close(self) -> None:
        """Remove the reply subscription (safe to call again)."""
        self._closed = True
        self._ready.clear()
        await self._replies.close()

    async def _open(self) -> None:
        await self.open()


class ObjectReader(AcloseOnExit):
    """An object's bytes, chunk by chunk: what :meth:`ObjectStore.open` returns.

    Use it as ``async with store.open(name) as reader: async for chunk in reader``:
    leaving the block (also by ``break`` or an error) removes the subscription the
    chunks come on. Iterating it without ``async with`` works too, but a loop left
    early then leaves the subscription to the garbage collector.

    The chunks are the object's bytes as stored; once the last one is in, the size
    and SHA-256 of what was read are checked against the object's meta message, so
    a corrupt object raises :class:`~goflux.DigestMismatch` at the end of the loop
    (after its chunks were handed out: act on them only once the loop has ended).
    Memory stays bounded by about two batches of ``window_bytes``, whatever the
    object's size.

    Raises (entering the block, or on the first chunk):
        ObjectNotFound: No such object, or it was deleted.
        BucketNotFound: The bucket does not exist.
        FeatureUnsupported: The server is older than 2.11 (no batched direct get).

    Raises (while iterating):
        DigestMismatch: The bytes read are not the object's.
        StreamFeatureDisabled: The bucket's stream does not allow direct gets (its
            ``allow_direct`` was turned off).
        PermissionDenied: The server refused a request.
        TransportError: No answer in time, or the connection failed.
    """

    __slots__ = ("_info", "_js", "_load", "_reader", "_window")

    def __init__(
        self,
        js: JetStreamContext,
        load: Callable[[], Awaitable[ObjectInfo]],
        *,
        window_bytes: int = DEFAULT_READ_WINDOW,
    ) -> None:
        self._load = load
        self._window = window_bytes
        self._info: ObjectInfo | None = None
        self._reader: ChunkReader | None = None
        self._js = js

    @property
    def info(self) -> ObjectInfo:
        """The object being read (known once the block is entered).

        Raises:
            RuntimeError: Read before ``async with`` or the first chunk.
        """
        if self._info is None:
            raise RuntimeError("the object is looked up on entering 'async with' or iterating")
        return self._info

    async def _start(self) -> ChunkReader:
        if self._reader is None:
            self._info = await self._load()
            self._reader = ChunkReader(
                self._js, self._info, window_bytes=self._window, reload=self._load
            )
        await self._reader.open()
        return self._reader

    async def _open(self) -> None:
        await self._start()

    def __aiter__(self) -> ObjectReader:
        return self

    async def __anext__(self) -> bytes:
        """The next chunk of the object's bytes.

        Raises:
            StopAsyncIteration: After the last chunk, once the digest checked out.
            DigestMismatch: The bytes read are not the object's.
        """
        reader = await self._start()
        try:
            chunk = await reader.next_chunk()
        except BaseException:
            await reader.close()
            raise
        if chunk is None:
            await reader.close()
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        """Stop reading: remove the subscription (safe to call again)."""
        if self._reader is not None:
            await self._reader.close()
