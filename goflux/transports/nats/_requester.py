"""Typed request/reply on core NATS: the requesting side."""

from __future__ import annotations

from typing import Generic, TypeVar

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from opentelemetry.trace import SpanKind

from goflux._codecs import Codec, decode_with
from goflux._errors import NoResponders, PayloadTooLarge, RemoteError, RequestError, RequestTimeout
from goflux._headers import HeadersLike
from goflux._lifecycle import CloseOnExit
from goflux._otel.scopes import NullScope, PublishScope, PublishScopes
from goflux._otel.semconv import GOFLUX_REPLY_BODY_SIZE, GOFLUX_REPLY_SUBJECT
from goflux._otel.telemetry import Telemetry
from goflux._wire import check_size, outgoing
from goflux.transports._natspy import let_go
from goflux.transports._refusals import closed_reason, refusals
from goflux.transports.nats._system import SYSTEM

__all__ = ("ERROR_CODE_HEADER", "ERROR_HEADER", "Requester")

Req = TypeVar("Req")
Resp = TypeVar("Resp")

DEFAULT_TIMEOUT = 5.0
ERROR_HEADER = "Nats-Service-Error"
ERROR_CODE_HEADER = "Nats-Service-Error-Code"


class Requester(CloseOnExit, Generic[Req, Resp]):
    """Sends typed requests on core NATS and returns the typed replies.

    A responder's failure comes back as a reply with ``Nats-Service-Error`` /
    ``Nats-Service-Error-Code`` headers (the NATS services convention) and is raised
    as :class:`~goflux.RemoteError` at once, not after the timeout; a subject nobody
    serves raises :class:`~goflux.NoResponders` at once too.

    Args:
        nc: A connected nats-py client (the caller owns it).
        request_codec: Encodes the requests.
        response_codec: Decodes the replies.
        timeout: Default seconds to wait for a reply.
        telemetry: Tracing and metrics; default: OpenTelemetry globals.

    Raises:
        ValueError: ``timeout`` is not positive.
    """

    def __init__(
        self,
        nc: Client,
        request_codec: Codec[Req],
        response_codec: Codec[Resp],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        telemetry: Telemetry | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self._nc = nc
        self._refusals = refusals(nc)
        self._request_codec = request_codec
        self._response_codec = response_codec
        self._timeout = timeout
        self._scopes = PublishScopes(Telemetry.or_default(telemetry), SYSTEM, kind=SpanKind.CLIENT)
        self._closed = False

    async def request(
        self,
        subject: str,
        request: Req,
        /,
        *,
        headers: HeadersLike | None = None,
        timeout: float | None = None,
        message_id: str | None = None,
    ) -> Resp:
        """Send ``request`` to ``subject`` and return the decoded reply.

        Raises:
            InvalidSubject: ``subject`` is not a valid publish subject.
            InvalidHeader: A header or the message ID cannot travel on the wire.
            EncodeError: ``request`` cannot be encoded.
            NoResponders: Nobody serves ``subject`` (raised at once).
            PermissionDenied: The server refused the request (raised at once).
            RequestTimeout: No reply within the timeout.
            RemoteError: The responder failed; carries its message and code.
            DecodeError: The reply cannot be decoded.
            RequestError: The requester or the connection is closed.
        """
        if self._closed:
            raise RequestError(f"cannot request {subject!r}: requester is closed", subject=subject)
        wire = outgoing(subject, headers, message_id, jetstream=False)
        wait = self._timeout if timeout is None else timeout
        with self._scopes.open(subject, wire, message_id=message_id) as scope:
            data = self._request_codec.encode(request)
            scope.set_body_size(len(data))
            try:
                check_size(subject, wire, data, self._nc.max_payload)
            except PayloadTooLarge as exc:
                raise RequestError(str(exc), subject=subject) from exc
            try:
                with self._refusals.guard(
                    "publish", subject, f"request to {subject!r}", request=True
                ):
                    reply = await self._nc.request(
                        subject, data, timeout=wait, headers=wire or None
                    )
            except nats.errors.NoRespondersError as exc:
                raise NoResponders(f"no responder serves {subject!r}", subject=subject) from exc
            except nats.errors.TimeoutError as exc:
                if self._nc.is_closed:
                    raise RequestError(
                        f"request to {subject!r} failed: the connection closed before the reply"
                        f"{closed_reason(self._nc)}",
                        subject=subject,
                    ) from exc
                raise RequestTimeout(
                    f"no reply from {subject!r} within {wait}s", subject=subject, timeout=wait
                ) from exc
            except nats.errors.Error as exc:
                reason = closed_reason(self._nc) if self._nc.is_closed else ""
                raise RequestError(
                    f"request to {subject!r} failed: {exc}{reason}", subject=subject
                ) from exc
            try:
                return self._read(subject, reply, scope)
            finally:
                let_go(reply)  # (nats-py's reply task holds the last one until the next)

    def _read(self, subject: str, reply: Msg, scope: PublishScope | NullScope) -> Resp:
        """The decoded reply to a request to ``subject``.

        Raises:
            RemoteError: The reply is an error reply (Go goflux's error headers).
            DecodeError: The response codec cannot read it.
        """
        if scope.recording:  # Go goflux's reply attributes
            scope.set_attributes(
                {GOFLUX_REPLY_BODY_SIZE: len(reply.data), GOFLUX_REPLY_SUBJECT: reply.subject}
            )
        reply_headers = reply.headers
        if reply_headers and (ERROR_CODE_HEADER in reply_headers or ERROR_HEADER in reply_headers):
            description = reply_headers.get(ERROR_HEADER, "")
            try:
                code = int(reply_headers.get(ERROR_CODE_HEADER, "500"))
            except ValueError:
                code = 500
            raise RemoteError(
                f"{subject!r} replied with error {code}: {description}",
                subject=subject,
                remote_message=description,
                code=code,
            )
        return decode_with(self._response_codec, reply.data)

    async def close(self) -> None:
        """Refuse further requests. The caller owns the connection."""
        self._closed = True
