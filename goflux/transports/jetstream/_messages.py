"""Reading stored messages: the last message on a subject, typed.

``$JS.API.STREAM.MSG.GET.<stream>`` with ``{"last_by_subj": subject}`` answers with
the stored message: subject, sequence, time, and base64 headers (a ``NATS/1.0``
header block) and data. It works on every stream (the stream's leader answers),
direct get or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TypeVar

from nats.js import JetStreamContext
from nats.js.errors import APIError

from goflux._codecs import Codec
from goflux._errors import DecodeError
from goflux._headers import Headers
from goflux._message import Delivery, Message
from goflux._subjects import validate_pattern
from goflux._wire import read_headers
from goflux.transports.jetstream._api import ApiCall
from goflux.transports.jetstream._provision import _check_name, _provisioning_error
from goflux.transports.jetstream._raw import Stored, message_get

__all__ = ("StoredMessage", "get_last")

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
    except DecodeError as exc:
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
    _check_name("stream", stream)
    validate_pattern(subject)
    what = f"last message on {subject!r} in stream {stream!r}"
    with ApiCall(js, what, f"STREAM.MSG.GET.{stream}"):
        try:
            stored = await message_get(js, stream, {"last_by_subj": subject})
        except APIError as exc:
            raise _provisioning_error(exc, what) from exc
    return None if stored is None else _stored(stream, codec, stored)
