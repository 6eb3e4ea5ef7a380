"""Reading what a stream stores: the last message on a subject, and a once-through scan.

:func:`get_last`: ``$JS.API.STREAM.MSG.GET.<stream>`` with ``{"last_by_subj":
subject}`` answers with the stored message: subject, sequence, time, and base64
headers (a ``NATS/1.0`` header block) and data. It works on every stream (the
stream's leader answers), direct get or not.

:func:`scan` reads what a stream holds on some subjects, once, up to now: a
short-lived consumer without acks (in memory, one replica) delivers what the subjects
hold; the read ends at the delivery whose pending count is 0, the last one there was
when it got to it. Used for a Key-Value bucket's keys (last write per key, headers
only) and a key's history (every write), and an Object store's list (the last meta
message of each object).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Final, Literal, TypeVar

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError

from goflux._codecs import Codec, as_decode_error
from goflux._errors import DecodeError, TransportError
from goflux._headers import Headers
from goflux._message import Delivery, Message
from goflux._subjects import validate_pattern
from goflux._wire import read_headers
from goflux.transports._natspy import api_prefix, api_timeout, connection
from goflux.transports.jetstream._acker import ack_tokens
from goflux.transports.jetstream._api import (
    ApiCall,
    Stored,
    check_name,
    message_get,
    provisioning_error,
)
from goflux.transports.jetstream._consumers import create_consumer
from goflux.transports.jetstream._status import CONFLICT, HEARTBEAT, REQUEST_TIMEOUT

__all__ = ("StoredMessage", "get_last", "scan")

_BATCH: Final = 1_000
_NS: Final = 1_000_000_000

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class StoredMessage(Message[T_co]):
    """A message read from a stream's storage rather than delivered by a consumer.

    A :class:`~goflux.Message` with the stream, sequence and store time of the
    stored message. No consumer delivered it, so :attr:`delivery` is None, and
    settling it (``ack``, ``nak``, ``term``) only records the outcome: nothing reaches
    the server.

    Attributes:
        stream: The stream that stores the message.
        sequence: Its sequence in the stream.
        time: When the stream stored it (timezone-aware, UTC).
    """

    __slots__ = ("_sequence", "_stream", "_time")

    def __init__(
        self,
        subject: str,
        payload: T_co,
        *,
        stream: str,
        sequence: int,
        time: datetime,
        headers: Headers | None = None,
        id: str | None = None,
        delivery: Delivery | None = None,
        data: bytes | None = None,
        wire_headers: Mapping[str, str] | Headers | None = None,
    ) -> None:
        super().__init__(
            subject,
            payload,
            headers=headers,
            id=id,
            delivery=delivery,
            data=data,
            wire_headers=wire_headers,
        )
        self._stream = stream
        self._sequence = sequence
        self._time = time

    @property
    def stream(self) -> str:
        """The stream that stores the message."""
        return self._stream

    @property
    def sequence(self) -> int:
        """The message's sequence in the stream."""
        return self._sequence

    @property
    def time(self) -> datetime:
        """When the stream stored the message (timezone-aware, UTC)."""
        return self._time

    def __repr__(self) -> str:
        return (
            f"StoredMessage(stream={self._stream!r}, sequence={self._sequence}, "
            f"subject={self._subject!r}, payload={self._payload!r}, id={self._id!r})"
        )


def _stored(stream: str, codec: Codec[T], stored: Stored) -> StoredMessage[T]:
    subject, sequence, raw = stored.subject, stored.sequence, stored.headers
    headers, message_id = read_headers(raw)
    lines = getattr(raw, "lines", None) if raw is not None else None
    try:
        payload = codec.decode(stored.data)
    except Exception as caught:  # noqa: BLE001 - any codec failure: undecodable
        exc = as_decode_error(caught, codec, stored.data)
        raise DecodeError(
            f"stream {stream!r}, subject {subject!r}, sequence {sequence}: {exc}",
            type_name=exc.type_name,
            size=exc.size,
        ) from exc
    if stored.time is None:
        raise ValueError(f"stream {stream!r}, sequence {sequence}: the server gave no time")
    return StoredMessage(
        subject,
        payload,
        stream=stream,
        sequence=sequence,
        time=stored.time,
        headers=headers,
        id=message_id,
        data=stored.data,
        wire_headers=Headers._trusted(lines) if lines is not None else None,
    )


async def get_last(
    js: JetStreamContext, codec: Codec[T], *, stream: str, subject: str
) -> StoredMessage[T] | None:
    """The last message ``stream`` stores on ``subject``, decoded, or None if it has none.

    ``subject`` may be a wildcard pattern: then the last message on any subject it
    matches. The message carries its user headers, message ID and every stored header
    line (:attr:`~goflux.Message.wire_headers`), and its stream, sequence and store
    time (:class:`~goflux.transports.jetstream.StoredMessage`).

    Raises:
        ValueError: Invalid stream name.
        InvalidSubject: Invalid subject.
        StreamNotFound: The stream does not exist.
        DecodeError: The stored data is not a valid ``T`` (the message names stream,
            subject and sequence).
        PermissionDenied: The server refused the request.
        ProvisioningError: Any other refusal by the server.
    """
    check_name("stream", stream)
    validate_pattern(subject)
    what = f"last message on {subject!r} in stream {stream!r}"
    with ApiCall(js, what, f"STREAM.MSG.GET.{stream}"):
        try:
            stored = await message_get(js, stream, {"last_by_subj": subject})
        except APIError as exc:
            raise provisioning_error(exc, what) from exc
    return None if stored is None else _stored(stream, codec, stored)


async def scan(
    js: JetStreamContext,
    stream: str,
    subject: str,
    *,
    deliver: Literal["all", "last_per_subject"],
    headers_only: bool = False,
) -> AsyncIterator[Msg]:
    """Yield what ``stream`` holds on ``subject`` (a pattern), oldest first, up to now.

    Raises:
        NotFoundError: The stream does not exist.
        APIError: The server refused the consumer.
        TransportError: The server stopped delivering before the end.
        nats.errors.Error: The connection failed.
    """
    config = ConsumerConfig(
        ack_policy=AckPolicy.NONE,
        deliver_policy=DeliverPolicy(deliver),
        filter_subject=subject,
        headers_only=headers_only,
        mem_storage=True,
        num_replicas=1,
        max_deliver=1,
        inactive_threshold=30.0,
    )
    info = await create_consumer(js, stream, config)
    nc = connection(js)
    sub: Subscription | None = None
    try:
        remaining = info.num_pending or 0
        if not remaining:
            return
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        next_subject = f"{api_prefix(js)}.CONSUMER.MSG.NEXT.{stream}.{info.name}"
        wait = api_timeout(js)
        asked = 0
        while True:
            if asked == 0:
                asked = min(remaining, _BATCH)
                request = {"batch": asked, "expires": int(wait * _NS)}
                await nc.publish(next_subject, json.dumps(request).encode(), reply=inbox)
            try:
                msg = await sub.next_msg(timeout=wait + 1.0)
            except nats.errors.TimeoutError as exc:
                raise TransportError(
                    f"reading {subject!r} of stream {stream!r}: the server stopped "
                    f"delivering with {remaining} messages to go"
                ) from exc
            if not msg.reply:  # a status
                headers = msg.headers or {}
                status = headers.get("Status")
                description = str(headers.get("Description", ""))
                if status == HEARTBEAT:  # the request is still open
                    continue
                if status not in (REQUEST_TIMEOUT, CONFLICT) or "Deleted" in description:
                    raise TransportError(  # 404, 503, consumer deleted: it is gone
                        f"reading {subject!r} of stream {stream!r}: the server answered "
                        f"{status} {description} with {remaining} messages to go"
                    )
                asked = 0  # the request ended: ask again
                continue
            asked -= 1
            yield msg
            tokens, offset = ack_tokens(msg.reply)
            remaining = int(tokens[offset + 6])
            if remaining == 0:
                return
    finally:
        if sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        with contextlib.suppress(nats.errors.Error, APIError, TimeoutError):
            await js.delete_consumer(stream, info.name)
