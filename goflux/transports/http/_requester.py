"""Typed request/reply over HTTP: the requesting side, :class:`Requester`."""

from __future__ import annotations

from typing import Generic, TypeVar

import httpx
from opentelemetry.trace import SpanKind

from goflux._codecs import Codec, decode_with
from goflux._errors import RemoteError, RequestError, RequestTimeout
from goflux._facts import Facts
from goflux._headers import HeadersLike
from goflux._lifecycle import CloseOnExit
from goflux._otel.semconv import GOFLUX_REPLY_BODY_SIZE
from goflux._otel.telemetry import Telemetry
from goflux._urls import redact_url
from goflux._wire import outgoing
from goflux.transports.http._client import DEFAULT_TIMEOUT, MAX_ANSWER, Poster, Unsent

__all__ = ("Requester",)

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class Requester(CloseOnExit, Generic[Req, Resp]):
    """Sends typed requests as ``POST {base_url}/{subject}`` and returns the typed replies.

    A 2xx answer's body is the reply. Any other answer raises
    :class:`~goflux.RemoteError` with the status as ``code`` and the answer's first
    line as ``remote_message``: a responder's :class:`~goflux.ServiceError` arrives
    as it was raised, 400 for a request it could not decode, 500 for a failure.

    Args:
        base_url: The endpoint root, e.g. ``"http://pricing.internal"``.
        request_codec: Encodes the requests.
        response_codec: Decodes the replies.
        client: An ``httpx.AsyncClient`` the caller owns; default: one of the
            requester's own, closed by :meth:`close`.
        timeout: Default seconds a request may take in all.
        max_reply_size: Largest reply body read, in bytes (default 1 MiB, as Go
            goflux reads); a larger one raises :class:`~goflux.RequestError`.
        telemetry: Tracing and metrics; default: OpenTelemetry globals.

    Raises:
        ValueError: ``base_url`` is no absolute http(s) URL, or ``timeout`` or
            ``max_reply_size`` is not positive.
    """

    def __init__(
        self,
        base_url: str,
        request_codec: Codec[Req],
        response_codec: Codec[Resp],
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_reply_size: int = MAX_ANSWER,
        telemetry: Telemetry | None = None,
    ) -> None:
        if not isinstance(max_reply_size, int) or max_reply_size < 1:
            raise ValueError(f"max_reply_size must be an int >= 1, got {max_reply_size!r}")
        self._poster = Poster(base_url, request_codec, client, timeout)
        self._request_codec = request_codec
        self._response_codec = response_codec
        self._max_reply_size = max_reply_size
        self._scopes = self._poster.scopes(telemetry, SpanKind.CLIENT)
        self._closed = False

    @property
    def base_url(self) -> str:
        """The endpoint root (without a trailing ``/``)."""
        return self._poster.base_url

    def _facts(self) -> Facts:
        return Facts(
            "http",
            codec=self._request_codec,
            reply_codec=self._response_codec,
            http={"baseUrl": self._poster.shown_base_url},
        )

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
        """POST ``request`` to ``{base_url}/{subject}`` and return the decoded reply.

        Raises:
            InvalidSubject: ``subject`` is not a valid publish subject.
            InvalidHeader: A header or the message ID cannot travel on the wire.
            ValueError: ``timeout`` is not positive.
            EncodeError: ``request`` cannot be encoded.
            RemoteError: The endpoint answered with a status other than 2xx.
            RequestTimeout: No answer within the timeout.
            DecodeError: The reply cannot be decoded.
            RequestError: The requester is closed, the endpoint refused the
                connection or is unreachable (at once, with the cause), or the reply
                is larger than ``max_reply_size``.
        """
        if self._closed:
            raise RequestError(f"cannot request {subject!r}: requester is closed", subject=subject)
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        wire = outgoing(subject, headers, message_id, jetstream=False)
        poster = self._poster
        url = poster.url(subject)
        shown = redact_url(url)
        with self._scopes.open(subject, wire, message_id=message_id) as scope:
            data = self._request_codec.encode(request)
            try:
                answer = await poster.post(url, data, wire, scope, timeout, self._max_reply_size)
            except Unsent as exc:
                if exc.timed_out:
                    wait = poster.seconds if timeout is None else timeout
                    raise RequestTimeout(
                        f"request to {subject!r} at {shown}: {exc.reason}",
                        subject=subject,
                        timeout=wait,
                    ) from exc
                raise RequestError(
                    f"request to {subject!r} at {shown} failed: {exc.reason}", subject=subject
                ) from exc
            if scope.recording:
                scope.set_attributes({GOFLUX_REPLY_BODY_SIZE: len(answer.body)})
            if not answer.ok:
                raise RemoteError(
                    f"request to {subject!r}: {shown} answered {answer.why()}",
                    subject=subject,
                    remote_message=answer.detail,
                    code=answer.status,
                )
            if not answer.complete:
                raise RequestError(
                    f"the reply from {shown} exceeds {self._max_reply_size} bytes (max_reply_size)",
                    subject=subject,
                )
            return decode_with(self._response_codec, answer.body)

    async def close(self) -> None:
        """Refuse further requests; close the httpx client if it is the requester's own."""
        self._closed = True
        await self._poster.close()
