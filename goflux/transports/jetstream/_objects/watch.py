"""Watching an Object store bucket: its objects' infos as they change.

An ordered consumer (nats-py's, push, with heartbeats and flow control: it restarts
itself after a gap) on ``$O.<bucket>.M.>`` delivers the meta messages: first the
latest of each object (or, with ``include_history``, every version; with
``updates_only``, none), then each new one as it is stored.
"""

from __future__ import annotations

import contextlib

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from nats.js.errors import APIError

from goflux._errors import TransportError
from goflux._lifecycle import CloseOnExit
from goflux.transports._natspy import connection
from goflux.transports.jetstream._api import ApiCall, api_error
from goflux.transports.jetstream._errors import BucketNotFound
from goflux.transports.jetstream._objects.info import ObjectInfo, info_from_json
from goflux.transports.jetstream._objects.names import all_meta, stream_name
from goflux.transports.jetstream._status import STREAM_NOT_FOUND

__all__ = ("ObjectWatch",)


class ObjectWatch(CloseOnExit):
    """The infos of a bucket's objects as they change: what :meth:`ObjectStore.watch` returns.

    Use it as ``async with store.watch() as watch: async for info in watch``; the
    consumer is removed on the way out. Deleted objects come as infos with
    ``deleted=True`` (unless ``ignore_deletes``).

    Raises (entering the block):
        BucketNotFound: The bucket does not exist.
        PermissionDenied: The server refused the consumer.
        TransportError: No answer in time, or the connection failed.

    Raises (while iterating):
        DecodeError: A meta message is not an object's meta JSON.
        TransportError: The connection failed.
    """

    __slots__ = ("_bucket", "_deliver", "_ignore_deletes", "_js", "_sub", "_what")

    def __init__(
        self,
        js: JetStreamContext,
        bucket: str,
        *,
        include_history: bool = False,
        updates_only: bool = False,
        ignore_deletes: bool = False,
    ) -> None:
        if include_history and updates_only:
            raise ValueError("watch: include_history and updates_only exclude each other")
        self._js = js
        self._bucket = bucket
        self._ignore_deletes = ignore_deletes
        self._deliver = (
            DeliverPolicy.NEW
            if updates_only
            else DeliverPolicy.ALL
            if include_history
            else DeliverPolicy.LAST_PER_SUBJECT
        )
        self._sub: JetStreamContext.PushSubscription | None = None
        self._what = f"watching bucket {bucket!r}"

    async def _open(self) -> None:
        stream = stream_name(self._bucket)
        with ApiCall(self._js, self._what, f"CONSUMER.CREATE.{stream}"):
            try:
                self._sub = await self._js.subscribe(
                    all_meta(self._bucket),
                    stream=stream,
                    ordered_consumer=True,
                    deliver_policy=self._deliver,
                )
            except APIError as exc:
                if exc.err_code == STREAM_NOT_FOUND:
                    raise BucketNotFound(
                        f"{self._what}: no such bucket", bucket=self._bucket
                    ) from exc
                raise

    async def next_with_pending(self) -> tuple[ObjectInfo, int]:
        """The next info, and how many meta messages the consumer has after it.

        Raises:
            TransportError: Not entered, or the connection failed.
            DecodeError: The meta message is not an object's meta JSON.
        """
        sub = self._sub
        if sub is None:
            raise TransportError(f"{self._what}: use the watch in 'async with'")
        try:
            msg = await sub.next_msg(timeout=None)
        except nats.errors.Error as exc:
            raise api_error(exc, self._what, self._js) from exc
        metadata = msg.metadata
        info = info_from_json(msg.data, bucket=self._bucket, mtime=metadata.timestamp)
        return info, metadata.num_pending

    def __aiter__(self) -> ObjectWatch:
        return self

    async def __anext__(self) -> ObjectInfo:
        """The next change: an object's new info (``deleted=True`` for a deletion)."""
        while True:
            info, _ = await self.next_with_pending()
            if not (info.deleted and self._ignore_deletes):
                return info

    async def close(self) -> None:
        """Remove the consumer (safe to call again)."""
        sub, self._sub = self._sub, None
        if sub is not None and not connection(self._js).is_closed:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
