"""Writing an object's chunks: read the data chunk by chunk, publish with a window.

Memory stays bounded by the chunk size times the window, never the object size: a
file is read one chunk at a time (in a worker thread, so the event loop keeps
running), an async iterator's pieces are cut or gathered into chunks, and at most
``window`` chunks await their PubAck at a time (the pipelining of
:meth:`goflux.transports.jetstream.Publisher.publish_many`). The SHA-256 is computed
on the way.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import BinaryIO, TypeAlias

import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux._receipt import PublishReceipt
from goflux.transports._natspy import connection
from goflux.transports._refusals import Refusal, refusals
from goflux.transports.jetstream._replies import PubAcks, send_error, timeout_error

__all__ = ("ObjectData", "Written", "chunks_of", "write_chunks")

ObjectData: TypeAlias = bytes | bytearray | memoryview | BinaryIO | AsyncIterable[bytes]
"""What ``put`` stores: bytes, a binary file object, or an async iterator of bytes."""


@dataclass(frozen=True)
class Written:
    """What :func:`write_chunks` wrote: bytes, chunks and the SHA-256 of the bytes."""

    size: int
    chunks: int
    sha256: bytes


async def _from_bytes(data: bytes | bytearray | memoryview, size: int) -> AsyncIterator[bytes]:
    view = memoryview(data).cast("B")
    for start in range(0, len(view), size):
        yield bytes(view[start : start + size])


async def _from_file(file: BinaryIO, size: int) -> AsyncIterator[bytes]:
    in_memory = isinstance(file, io.BytesIO)
    while True:
        chunk = file.read(size) if in_memory else await asyncio.to_thread(file.read, size)
        if not chunk:
            return
        if not isinstance(chunk, bytes | bytearray):
            raise TypeError(f"put reads bytes from a file object, got {type(chunk).__name__}")
        yield bytes(chunk)


async def _from_pieces(pieces: AsyncIterable[bytes], size: int) -> AsyncIterator[bytes]:
    buffer = bytearray()
    async for piece in pieces:
        if not isinstance(piece, bytes | bytearray | memoryview):
            raise TypeError(f"put takes bytes from an async iterator, got {type(piece).__name__}")
        buffer += piece
        while len(buffer) >= size:
            yield bytes(buffer[:size])
            del buffer[:size]
    if buffer:
        yield bytes(buffer)


def chunks_of(data: ObjectData, size: int) -> AsyncIterator[bytes]:
    """``data`` in chunks of ``size`` bytes (the last one may be shorter).

    Raises:
        TypeError: ``data`` is none of bytes, a binary file object or an async
            iterator of bytes (raised at once), or the file or iterator yields
            something other than bytes (raised where it is met).
    """
    if isinstance(data, bytes | bytearray | memoryview):
        return _from_bytes(data, size)
    if isinstance(data, AsyncIterable):
        return _from_pieces(data, size)
    if not callable(getattr(data, "read", None)):
        raise TypeError(
            "put stores bytes, a binary file object or an async iterator of bytes, "
            f"got {type(data).__name__}"
        )
    return _from_file(data, size)


async def write_chunks(
    js: JetStreamContext,
    subject: str,
    chunks: AsyncIterator[bytes],
    *,
    window: int,
    timeout: float,
) -> Written:
    """Publish ``chunks`` to ``subject``, at most ``window`` awaiting their PubAck.

    Raises:
        PublishError: A chunk was refused, its PubAck did not come in ``timeout``
            seconds, or the connection failed (chunks before it may be stored).
        PermissionDenied: The server refused the inbox for the PubAcks.
        TypeError: The data yields something other than bytes.
    """
    nc = connection(js)
    acks = PubAcks(nc)
    sha = hashlib.sha256()
    size = count = 0
    pending: deque[tuple[asyncio.Future[PublishReceipt], str]] = deque()

    def refused(refusal: Refusal) -> None:
        # A refused chunk gets no PubAck: fail those awaited, so nothing waits them out.
        for _, reply in pending:
            acks.fail(reply, refusal.error(f"publish to {subject!r}"))

    unlisten = refusals(nc).listen("publish", subject, refused)
    try:
        await acks.open()
        async for chunk in chunks:
            sha.update(chunk)
            reply, future = acks.expect(subject)
            pending.append((future, reply))
            try:
                await nc.publish(subject, chunk, reply=reply)
            except nats.errors.Error as exc:
                raise send_error(subject, exc, nc) from exc
            size += len(chunk)
            count += 1
            while len(pending) >= window:
                await _await_ack(nc, pending.popleft()[0], subject, timeout)
        while pending:
            await _await_ack(nc, pending.popleft()[0], subject, timeout)
    except nats.errors.Error as exc:  # the inbox could not be opened
        raise send_error(subject, exc, nc) from exc
    finally:
        unlisten()
        await _drain(nc, pending, timeout)  # what was sent is stored or not before we return
        await acks.close()
    return Written(size=size, chunks=count, sha256=sha.digest())


async def _await_ack(
    nc: Client, future: asyncio.Future[PublishReceipt], subject: str, timeout: float
) -> None:
    """Wait for one PubAck; a refusal raises its PublishError as it is."""
    try:
        await asyncio.wait_for(future, timeout)
    except TimeoutError:
        raise timeout_error(subject, timeout, nc) from None


async def _drain(
    nc: Client, pending: deque[tuple[asyncio.Future[PublishReceipt], str]], timeout: float
) -> None:
    """Wait for the PubAcks still due after a failure (their outcome no longer matters).

    The caller purges the chunks next: a chunk stored after the purge would stay.
    """
    if not pending or nc.is_closed:
        for future, _ in pending:
            future.cancel()
        return
    futures = [future for future, _ in pending]
    pending.clear()
    done, late = await asyncio.wait(futures, timeout=timeout)
    for future in late:
        future.cancel()
    for future in done:
        if not future.cancelled():
            future.exception()  # retrieved: nobody else will
