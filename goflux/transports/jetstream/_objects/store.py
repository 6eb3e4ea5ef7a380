"""A typed Object store on JetStream: large values in chunks, shared with nats.go/nats-py.

An object is written as chunk messages on ``$O.<bucket>.C.<nuid>`` and then one meta
message on ``$O.<bucket>.M.<base64url(name)>`` (rolled up: only the latest stays),
the protocol of ADR-20, so buckets are shared with nats.go, nats-py and the ``nats``
CLI. Writing streams (bounded memory, pipelined PubAcks), reading streams (batched
direct gets), and every read is checked against the stored SHA-256.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import nats.errors
from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError
from nats.nuid import NUID

from goflux._codecs import Codec, as_decode_error
from goflux._errors import DecodeError, GofluxError, PublishError
from goflux.transports._natspy import api_timeout, connection
from goflux.transports._refusals import refusals
from goflux.transports.jetstream._acker import delivery_of
from goflux.transports.jetstream._api import ApiCall, api_request, message_get
from goflux.transports.jetstream._errors import BucketNotFound, ExpectationFailed, ObjectNotFound
from goflux.transports.jetstream._objects.info import (
    InvalidObjectMeta,
    ObjectInfo,
    ObjectList,
    info_from_json,
    meta_json,
)
from goflux.transports.jetstream._objects.names import (
    all_chunks,
    all_meta,
    check_bucket,
    check_name,
    chunk_subject,
    digest_text,
    meta_subject,
    stream_name,
)
from goflux.transports.jetstream._objects.read import DEFAULT_READ_WINDOW, ObjectReader
from goflux.transports.jetstream._objects.watch import ObjectWatch
from goflux.transports.jetstream._objects.write import ObjectData, chunks_of, write_chunks
from goflux.transports.jetstream._provision import ensure_stream
from goflux.transports.jetstream._replies import receipt, send_error, timeout_error
from goflux.transports.jetstream._status import STREAM_NOT_FOUND
from goflux.transports.jetstream._stored import scan

__all__ = ("DEFAULT_CHUNK_SIZE", "DEFAULT_WINDOW", "ObjectStore", "object_store")

logger = logging.getLogger("goflux.transports.jetstream")

T = TypeVar("T")

DEFAULT_CHUNK_SIZE: Final = 128 * 1024
"""Bytes per chunk, as nats.go and nats-py write them."""
DEFAULT_WINDOW: Final = 32
"""Chunks awaiting their PubAck at a time while an object is written."""

_ROLLUP: Final = {"Nats-Rollup": "sub"}
_EXPECTED: Final = "Nats-Expected-Last-Subject-Sequence"
_RACES: Final = 10  # tries of a write that other writers of the same name keep beating


def _not_found(bucket: str, what: str, cause: BaseException | None = None) -> BucketNotFound:
    error = BucketNotFound(f"{what}: no such bucket {bucket!r}", bucket=bucket)
    error.__cause__ = cause
    return error


async def object_store(
    js: JetStreamContext,
    bucket: str,
    *,
    create: bool = True,
    description: str | None = None,
    ttl: float | None = None,
    max_bytes: int | None = None,
    storage: str | None = None,
    replicas: int | None = None,
    compression: bool | None = None,
    metadata: Mapping[str, str] | None = None,
    placement: Mapping[str, Any] | None = None,
) -> ObjectStore:
    """The Object store ``bucket``: created if missing, or bound to (idempotent).

    The bucket is the stream ``OBJ_<bucket>`` with the settings nats.go and nats-py
    give it (subjects ``$O.<bucket>.C.>`` and ``$O.<bucket>.M.>``, ``discard="new"``,
    rollups and direct gets allowed), so any of them can use it. Settings given are
    applied to an existing bucket too; settings not given keep their values.

    Args:
        js: A JetStream context of a connected nats-py client (the caller owns it).
        bucket: The bucket's name: letters, digits, ``-`` and ``_``.
        create: False binds to an existing bucket only (and then no setting may be
            given): a missing bucket raises :class:`~goflux.BucketNotFound`.
        description: The bucket's description.
        ttl: Seconds after which objects expire (the stream's ``max_age``).
        max_bytes: The bucket's size limit in bytes; a put beyond it fails.
        storage: ``"file"`` (default) or ``"memory"``.
        replicas: How many servers keep a copy (a cluster's).
        compression: Compress the stored chunks (S2).
        metadata: The stream's metadata.
        placement: Where to place the stream (``{"cluster": ..., "tags": [...]}``).

    Raises:
        InvalidKey: Invalid bucket name.
        ValueError: Settings given with ``create=False``.
        BucketNotFound: ``create=False`` and no such bucket.
        IncompatibleConfig: The existing bucket cannot be changed so (e.g. storage).
        SubjectOverlap: Another stream captures the bucket's subjects.
        PermissionDenied: The server refused a request.
        ProvisioningError: Any other refusal by the server.
    """
    check_bucket(bucket)
    stream = stream_name(bucket)
    settings: dict[str, Any] = {
        "description": description,
        "max_age": ttl,
        "max_bytes": max_bytes,
        "storage": storage,
        "num_replicas": replicas,
        "compression": None if compression is None else ("s2" if compression else "none"),
        "metadata": dict(metadata) if metadata is not None else None,
        "placement": dict(placement) if placement is not None else None,
    }
    given = {key: value for key, value in settings.items() if value is not None}
    if not create:
        if given:
            raise ValueError(f"bucket {bucket!r}: settings need create=True ({sorted(given)})")
        what = f"bucket {bucket!r}"
        with ApiCall(js, what, f"STREAM.INFO.{stream}"):
            try:
                await api_request(js, f"STREAM.INFO.{stream}")
            except NotFoundError as exc:
                raise _not_found(bucket, what, exc) from exc
        return ObjectStore(js, bucket)
    await ensure_stream(
        js,
        name=stream,
        subjects=[all_chunks(bucket), all_meta(bucket)],
        discard="new",
        allow_rollup_hdrs=True,
        allow_direct=True,
        **given,
    )
    return ObjectStore(js, bucket)


class ObjectStore:
    """An Object store bucket: named objects of any size, stored in chunks.

    Get one with :func:`~goflux.transports.jetstream.object_store`. Objects are
    written and read in chunks, so neither side holds a whole object in memory
    unless it asks for one (:meth:`get`). Every read checks the object's SHA-256.

    Args:
        js: A JetStream context of a connected nats-py client (the caller owns it).
        bucket: The bucket's name (no request is made: a missing bucket shows as
            :class:`~goflux.BucketNotFound` on first use).

    Raises:
        InvalidKey: Invalid bucket name.
    """

    __slots__ = ("_bucket", "_js", "_nuid", "_stream")

    def __init__(self, js: JetStreamContext, bucket: str) -> None:
        self._js = js
        self._bucket = check_bucket(bucket)
        self._stream = stream_name(bucket)
        self._nuid = NUID()

    @property
    def bucket(self) -> str:
        """The bucket's name."""
        return self._bucket

    def __repr__(self) -> str:
        return f"ObjectStore(bucket={self._bucket!r})"

    async def _lookup(self, name: str) -> ObjectInfo | None:
        """The latest info of ``name`` (deleted too), or None if it never existed."""
        return (await self._versioned(name))[0]

    async def _versioned(self, name: str) -> tuple[ObjectInfo | None, int]:
        """The latest info of ``name`` and the stream sequence of its meta (0: none)."""
        what = f"object {name!r} in bucket {self._bucket!r}"
        request = {"last_by_subj": meta_subject(self._bucket, name)}
        with ApiCall(self._js, what, f"STREAM.MSG.GET.{self._stream}"):
            try:
                stored = await message_get(self._js, self._stream, request)
            except APIError as exc:
                if exc.err_code == STREAM_NOT_FOUND:
                    raise _not_found(self._bucket, what, exc) from exc
                raise
        if stored is None:
            return None, 0
        mtime = stored.time or datetime.now(UTC)
        return info_from_json(stored.data, bucket=self._bucket, mtime=mtime), stored.sequence

    async def info(self, name: str, *, deleted: bool = False) -> ObjectInfo:
        """The info of object ``name``: size, chunks, digest, time, metadata.

        Args:
            name: The object's name.
            deleted: Also return the info of a deleted object (``deleted=True``).

        Raises:
            InvalidKey: Invalid name (empty).
            ObjectNotFound: No such object (or it was deleted, unless ``deleted``).
            BucketNotFound: The bucket does not exist.
            DecodeError: The meta message is not an object's meta JSON.
            PermissionDenied: The server refused the request.
            TransportError: No answer in time, or the connection failed.
        """
        check_name(name)
        info = await self._lookup(name)
        if info is None or (info.deleted and not deleted):
            raise ObjectNotFound(
                f"no object {name!r} in bucket {self._bucket!r}", bucket=self._bucket, name=name
            )
        return info

    async def _publish_meta(self, info: ObjectInfo, what: str, replaces: int) -> None:
        """Write ``info`` as the object's meta message, rolling up the earlier ones.

        Only if the meta message ``replaces`` (its sequence; 0: none) is still the
        latest: :class:`~goflux.ExpectationFailed` otherwise.
        """
        subject = meta_subject(self._bucket, info.name)
        nc = connection(self._js)
        timeout = api_timeout(self._js)
        headers = {**_ROLLUP, _EXPECTED: str(replaces)}
        with refusals(nc).guard("publish", subject, what, request=True):
            try:
                msg = await nc.request(subject, meta_json(info), timeout=timeout, headers=headers)
            except nats.errors.NoRespondersError as exc:
                raise _not_found(self._bucket, what, exc) from exc
            except nats.errors.TimeoutError:
                raise timeout_error(subject, timeout, nc) from None
            except nats.errors.Error as exc:
                raise send_error(subject, exc, nc) from exc
        receipt(msg.data, subject)

    async def _purge(self, subject: str, what: str) -> None:
        """Remove every message on ``subject`` from the bucket's stream."""
        tail = f"STREAM.PURGE.{self._stream}"
        with ApiCall(self._js, what, tail):
            try:
                await api_request(self._js, tail, {"filter": subject})
            except APIError as exc:
                if exc.err_code == STREAM_NOT_FOUND:
                    raise _not_found(self._bucket, what, exc) from exc
                raise

    async def put(
        self,
        name: str,
        data: ObjectData,
        *,
        meta: Mapping[str, str] | None = None,
        headers: Mapping[str, str | Sequence[str]] | None = None,
        description: str | None = None,
        chunk_size: int | None = None,
        window: int = DEFAULT_WINDOW,
    ) -> ObjectInfo:
        """Store ``data`` as object ``name``, replacing any object of that name.

        ``data`` is read chunk by chunk (a file object in a worker thread) and each
        chunk published as it is read, with up to ``window`` chunks awaiting their
        PubAck: memory stays about ``chunk_size * window``, whatever the size. The
        meta message (size, chunks, SHA-256) is written last, so readers see the
        old object, or nothing, until the new one is complete; then the chunks of
        the object it replaces are purged. A put that fails purges the chunks it
        wrote (unless its meta message may have been stored: then the object may
        be complete).

        Args:
            name: The object's name (any non-empty string).
            data: Bytes, a binary file object (read from its current position), or
                an async iterator of bytes.
            meta: Metadata, names to values (nats.go's ``Metadata``).
            headers: Headers, each name with a value or a list of values.
            description: The object's description.
            chunk_size: Bytes per chunk (at most the server's ``max_payload``; default
                128 KiB, or the server's ``max_payload`` if that is smaller).
            window: Chunks awaiting their PubAck at a time.

        Returns:
            The new object's info (``mtime`` from this machine's clock).

        Raises:
            InvalidKey: Invalid name (empty).
            ValueError: ``chunk_size`` or ``window`` out of range.
            TypeError: ``data`` is not bytes, a binary file or an async iterator of
                bytes, or yields something other than bytes.
            BucketNotFound: The bucket does not exist.
            PublishError: A chunk or the meta message was refused (the bucket is
                full, ...), or no PubAck came in time.
            PermissionDenied: The server refused a publish or a request.
            TransportError: No answer in time, or the connection failed.
        """
        check_name(name)
        max_payload = connection(self._js).max_payload
        if chunk_size is None:
            chunk_size = (
                min(DEFAULT_CHUNK_SIZE, max_payload) if max_payload > 0 else DEFAULT_CHUNK_SIZE
            )
        if not 1 <= chunk_size <= max_payload:
            raise ValueError(f"chunk_size must be 1 to {max_payload} bytes, got {chunk_size}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        chunks = chunks_of(data, chunk_size)  # a wrong type raises before anything is sent
        what = f"put of object {name!r} in bucket {self._bucket!r}"
        await self._lookup(name)  # a missing bucket fails here, before any chunk is sent
        nuid = self._nuid.next().decode()
        subject = chunk_subject(self._bucket, nuid)
        prefix = f"$O.{self._bucket}.C"
        guard = refusals(connection(self._js)).guard(
            "publish", prefix, what, accept=lambda refusal: refusal.about(prefix)
        )
        meta_sent = False
        try:
            with guard:
                written = await write_chunks(
                    self._js, subject, chunks, window=window, timeout=api_timeout(self._js)
                )
                info = ObjectInfo(
                    bucket=self._bucket,
                    name=name,
                    size=written.size,
                    chunks=written.chunks,
                    digest=digest_text(written.sha256),
                    mtime=datetime.now(UTC),
                    nuid=nuid,
                    description=description,
                    headers=_headers(headers),
                    meta=dict(meta or {}),
                    chunk_size=chunk_size,
                )
                meta_sent = True
                replaced = await self._replace_meta(info, what)
        except BaseException as exc:
            if not (meta_sent and isinstance(exc, PublishError) and exc.may_be_stored):
                await self._purge_quietly(subject, what)
            raise
        if replaced is not None and not replaced.deleted and replaced.nuid:
            await self._purge(chunk_subject(self._bucket, replaced.nuid), what)
        return info

    async def _replace_meta(self, info: ObjectInfo, what: str) -> ObjectInfo | None:
        """Write ``info`` over the latest version of its object; return that version.

        A writer that got there between the look and the write makes the write fail
        its expectation: the look is made again, so whoever replaces a version
        purges its chunks, and no version is left behind unreferenced.

        Raises:
            PublishError: The name kept changing under the write.
        """
        for _ in range(_RACES):
            current, sequence = await self._versioned(info.name)
            try:
                await self._publish_meta(info, what, sequence)
            except ExpectationFailed:
                continue  # another writer came between: replace its version
            return current
        raise PublishError(
            f"{what}: the object kept changing under the write ({_RACES} tries)",
            subject=meta_subject(self._bucket, info.name),
        )

    async def _purge_quietly(self, subject: str, what: str) -> None:
        with contextlib.suppress(GofluxError):
            await self._purge(subject, f"{what}: removing the chunks of the failed put")

    async def put_value(
        self,
        name: str,
        value: T,
        codec: Codec[T],
        *,
        meta: Mapping[str, str] | None = None,
        headers: Mapping[str, str | Sequence[str]] | None = None,
        description: str | None = None,
    ) -> ObjectInfo:
        """Store ``value``, encoded by ``codec``, as object ``name`` (see :meth:`put`).

        Raises:
            EncodeError: ``value`` cannot be encoded; nothing was written.
            InvalidKey: Invalid name (empty).
            BucketNotFound: The bucket does not exist.
            PublishError: A chunk or the meta message was refused.
            PermissionDenied: The server refused a publish or a request.
            TransportError: No answer in time, or the connection failed.
        """
        check_name(name)
        data = codec.encode(value)
        return await self.put(name, data, meta=meta, headers=headers, description=description)

    def open(self, name: str, *, window_bytes: int = DEFAULT_READ_WINDOW) -> ObjectReader:
        """Read object ``name`` chunk by chunk: ``async with store.open(name) as r``.

        Nothing is requested until the block is entered (or the first chunk asked
        for). See :class:`ObjectReader` for what it raises and when the digest is
        checked.

        Args:
            name: The object's name.
            window_bytes: About how many bytes one read request asks for; memory
                stays about twice this, whatever the object's size.

        Raises:
            InvalidKey: Invalid name (empty), at once.
            ValueError: ``window_bytes`` < 1.
        """
        check_name(name)
        if window_bytes < 1:
            raise ValueError(f"window_bytes must be >= 1, got {window_bytes}")

        async def load() -> ObjectInfo:
            return await self.info(name)

        return ObjectReader(self._js, load, window_bytes=window_bytes)

    async def get(self, name: str) -> bytes:
        """The bytes of object ``name``, checked against its digest (all in memory).

        Raises:
            InvalidKey: Invalid name (empty).
            ObjectNotFound: No such object (or it was deleted).
            BucketNotFound: The bucket does not exist.
            DigestMismatch: The bytes read are not the object's (it is corrupt).
            FeatureUnsupported: The server is older than 2.11: objects are read with
                batched direct gets.
            PermissionDenied: The server refused a request.
            TransportError: No answer in time, or the connection failed.
        """
        async with self.open(name) as reader:
            parts = [chunk async for chunk in reader]
        return b"".join(parts)

    async def get_value(self, name: str, codec: Codec[T]) -> T:
        """The value stored as object ``name``, decoded by ``codec``.

        Raises:
            DecodeError: The bytes are not a valid ``T`` (the message names bucket
                and object).
            InvalidKey: Invalid name (empty).
            ObjectNotFound: No such object (or it was deleted).
            BucketNotFound: The bucket does not exist.
            DigestMismatch: The bytes read are not the object's.
            PermissionDenied: The server refused a request.
            TransportError: No answer in time, or the connection failed.
        """
        data = await self.get(name)
        try:
            return codec.decode(data)
        except Exception as caught:  # noqa: BLE001 - any codec failure: undecodable
            exc = as_decode_error(caught, codec, data)
            raise DecodeError(
                f"bucket {self._bucket!r}, object {name!r}: {exc}",
                type_name=exc.type_name,
                size=exc.size,
            ) from exc

    async def delete(self, name: str) -> ObjectInfo:
        """Delete object ``name``: mark it deleted, then purge its chunks.

        Returns:
            The deleted object's info (``deleted=True``, size 0).

        Raises:
            InvalidKey: Invalid name (empty).
            ObjectNotFound: No such object (or it was deleted already).
            BucketNotFound: The bucket does not exist.
            PublishError: The meta message was refused.
            PermissionDenied: The server refused a publish or a request.
            TransportError: No answer in time, or the connection failed.
        """
        check_name(name)
        what = f"delete of object {name!r} in bucket {self._bucket!r}"
        for _ in range(_RACES):
            info, sequence = await self._versioned(name)
            if info is None or info.deleted:
                raise ObjectNotFound(
                    f"no object {name!r} in bucket {self._bucket!r}", bucket=self._bucket, name=name
                )
            try:
                return await self._mark_deleted(info, what, sequence)
            except ExpectationFailed:
                continue  # written meanwhile: delete the newer version
        raise PublishError(
            f"{what}: the object kept changing under the delete ({_RACES} tries)",
            subject=meta_subject(self._bucket, name),
        )

    async def _mark_deleted(self, info: ObjectInfo, what: str, sequence: int) -> ObjectInfo:
        """Write the delete marker over version ``sequence`` of ``info``; purge its chunks."""
        gone = ObjectInfo(
            bucket=self._bucket,
            name=info.name,
            size=0,
            chunks=0,
            digest="",
            mtime=datetime.now(UTC),
            nuid=info.nuid,
            deleted=True,
            description=info.description,
            headers=info.headers,
            meta=info.meta,
            chunk_size=info.chunk_size,
        )
        await self._publish_meta(gone, what, sequence)
        if info.nuid:
            await self._purge(chunk_subject(self._bucket, info.nuid), what)
        return gone

    async def list(self, *, deleted: bool = False, strict: bool = False) -> ObjectList:
        """The infos of the bucket's objects, sorted by name (a list, read at once).

        A meta message that is not an object's meta JSON (one written by another tool,
        say) does not hide the others: it is left out, logged as a warning and listed
        in the result's ``invalid``, unless ``strict``.

        Args:
            deleted: Include deleted objects (``deleted=True``).
            strict: Raise on the first meta message that does not read.

        Raises:
            BucketNotFound: The bucket does not exist.
            DecodeError: With ``strict``, a meta message is not an object's meta JSON.
            PermissionDenied: The server refused a request.
            TransportError: No answer in time, or the connection failed.
        """
        what = f"listing bucket {self._bucket!r}"
        found: dict[str, ObjectInfo] = {}
        invalid: list[InvalidObjectMeta] = []
        with ApiCall(self._js, what, f"CONSUMER.CREATE.{self._stream}"):
            try:
                async for msg in scan(
                    self._js, self._stream, all_meta(self._bucket), deliver="last_per_subject"
                ):
                    mtime = delivery_of(msg.reply).timestamp
                    try:
                        info = info_from_json(msg.data, bucket=self._bucket, mtime=mtime)
                    except DecodeError as exc:
                        if strict:
                            raise
                        logger.warning("%s: skipped %r: %s", what, msg.subject, exc)
                        invalid.append(InvalidObjectMeta(self._bucket, msg.subject, mtime, exc))
                        continue
                    found[info.name] = info
            except APIError as exc:
                if exc.err_code == STREAM_NOT_FOUND:
                    raise _not_found(self._bucket, what, exc) from exc
                raise
        return ObjectList(
            (found[name] for name in sorted(found) if deleted or not found[name].deleted),
            invalid,
        )

    def watch(
        self,
        *,
        include_history: bool = False,
        updates_only: bool = False,
        ignore_deletes: bool = False,
    ) -> ObjectWatch:
        """Watch the bucket's objects change: ``async with store.watch() as w``.

        First the latest info of each object (with ``include_history`` every
        version's; with ``updates_only`` none), then each change as it happens:
        a put's info, or a deleted object's info (``deleted=True``) unless
        ``ignore_deletes``. See :class:`ObjectWatch`.

        Raises:
            ValueError: Both ``include_history`` and ``updates_only``.
        """
        return ObjectWatch(
            self._js,
            self._bucket,
            include_history=include_history,
            updates_only=updates_only,
            ignore_deletes=ignore_deletes,
        )


def _headers(headers: Mapping[str, str | Sequence[str]] | None) -> dict[str, tuple[str, ...]]:
    if not headers:
        return {}
    return {
        key: (value,) if isinstance(value, str) else tuple(value) for key, value in headers.items()
    }
