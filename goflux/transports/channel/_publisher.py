"""Publishing onto an in-process bus."""

from __future__ import annotations

from typing import Generic, TypeVar

from goflux._facts import Facts
from goflux._headers import Headers, HeadersLike, check_message_id
from goflux._lifecycle import CloseOnExit, closed_publisher_error
from goflux._otel.scopes import PublishScopes
from goflux._otel.telemetry import Telemetry
from goflux._subjects import validate_subject
from goflux.transports.channel._bus import Bus, Envelope
from goflux.transports.channel._system import SYSTEM

__all__ = ("Publisher",)

T = TypeVar("T")


class Publisher(CloseOnExit, Generic[T]):
    """Publishes values of type ``T`` onto a :class:`Bus`.

    ``publish`` returns once every matching subscription has the message in its inbox
    (waiting while an inbox is full). It returns None: there is no broker receipt.

    Args:
        bus: The bus to publish on.
        telemetry: Tracing and metrics; default: OpenTelemetry globals.
    """

    __slots__ = ("_bus", "_closed", "_scopes")

    def __init__(self, bus: Bus[T], *, telemetry: Telemetry | None = None) -> None:
        self._bus = bus
        self._scopes = PublishScopes(Telemetry.or_default(telemetry), SYSTEM)
        self._closed = False

    def _facts(self) -> Facts:
        return Facts("channel")

    async def publish(
        self,
        subject: str,
        value: T,
        /,
        *,
        headers: HeadersLike | None = None,
        message_id: str | None = None,
    ) -> None:
        """Publish ``value`` to ``subject``.

        Raises:
            InvalidSubject: ``subject`` is not a valid publish subject.
            InvalidHeader: A header or the message ID cannot travel on the wire.
            EncodeError: The bus has a codec and ``value`` cannot be encoded.
            PublishError: The publisher is closed.
        """
        if self._closed:
            raise closed_publisher_error(subject)
        validate_subject(subject)
        if message_id is not None:
            check_message_id(message_id)
        user_headers = Headers(headers) if headers else None
        trace: dict[str, str] = {}
        codec = self._bus.codec
        with self._scopes.open(subject, trace, message_id=message_id) as scope:
            data: bytes | None = None
            if codec is not None:
                data = codec.encode(value)
                scope.set_body_size(len(data))
            carried = value if data is None else data
            await self._bus.deliver(
                Envelope(subject, carried, data, user_headers, message_id, trace)
            )

    async def close(self) -> None:
        """Refuse further publishes. The bus itself stays usable by others."""
        self._closed = True
