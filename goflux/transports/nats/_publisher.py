"""Fire-and-forget publishing on core NATS."""

from __future__ import annotations

import contextlib
from typing import Generic, TypeVar

import nats.errors
from nats.aio.client import Client

from goflux._codecs import Codec
from goflux._errors import PublishError
from goflux._headers import HeadersLike
from goflux._lifecycle import CloseOnExit, closed_publisher_error
from goflux._scopes import PublishScopes
from goflux._telemetry import Telemetry
from goflux._wire import check_size, outgoing
from goflux.transports._natspy import flush
from goflux.transports.nats._system import SYSTEM

__all__ = ("Publisher",)

T = TypeVar("T")

FLUSH_TIMEOUT = 5  # seconds (nats-py takes an int)


class Publisher(CloseOnExit, Generic[T]):
    """Publishes values of type ``T`` on core NATS (fire and forget, no persistence).

    Messages carry the goflux wire format: the bare encoded body, ``X-Message-ID``,
    ``X-Goflux-<key>`` user headers and the trace context. Core NATS delivers to the
    subscribers present at publish time; use JetStream when messages must persist.

    Args:
        nc: A connected nats-py client (the caller owns it).
        codec: Encodes the values.
        telemetry: Tracing and metrics; default: OpenTelemetry globals.
    """

    def __init__(self, nc: Client, codec: Codec[T], *, telemetry: Telemetry | None = None) -> None:
        self._nc = nc
        self._codec = codec
        self._scopes = PublishScopes(Telemetry.or_default(telemetry), SYSTEM)
        self._closed = False

    async def publish(
        self,
        subject: str,
        value: T,
        /,
        *,
        headers: HeadersLike | None = None,
        message_id: str | None = None,
    ) -> None:
        """Publish ``value`` to ``subject``; returns once the client has queued it.

        Raises:
            InvalidSubject: ``subject`` is not a valid publish subject.
            InvalidHeader: A header or the message ID cannot travel on the wire.
            EncodeError: ``value`` cannot be encoded.
            PublishError: The publisher or connection is closed, the payload exceeds
                the server's ``max_payload``, or the client's reconnect buffer is full.
        """
        if self._closed:
            raise closed_publisher_error(subject)
        wire = outgoing(subject, headers, message_id, jetstream=False)
        with self._scopes.open(subject, wire, message_id=message_id) as scope:
            data = self._codec.encode(value)
            scope.set_body_size(len(data))
            check_size(subject, wire, data, self._nc.max_payload)
            try:
                await self._nc.publish(subject, data, headers=wire or None)
            except nats.errors.MaxPayloadError as exc:
                raise PublishError(
                    f"publish to {subject!r}: {len(data)} bytes exceed the server's "
                    f"max_payload of {self._nc.max_payload} bytes",
                    subject=subject,
                    permanent=True,
                ) from exc
            except nats.errors.Error as exc:
                raise PublishError(
                    f"publish to {subject!r} failed: {exc}",
                    subject=subject,
                    permanent=isinstance(exc, nats.errors.ConnectionClosedError),
                ) from exc

    async def close(self) -> None:
        """Refuse further publishes and flush what the client still buffers.

        The caller owns the connection; it is flushed (if connected), not closed.
        """
        self._closed = True
        if self._nc.is_connected:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await flush(self._nc, FLUSH_TIMEOUT)
