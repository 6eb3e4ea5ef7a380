"""Publishing over HTTP: :class:`Publisher` POSTs each message, as Go goflux does."""

from __future__ import annotations

from typing import Generic, TypeVar

import httpx
from opentelemetry.trace import SpanKind

from goflux._codecs import Codec
from goflux._errors import PublishError
from goflux._facts import Facts
from goflux._headers import HeadersLike
from goflux._lifecycle import CloseOnExit, closed_publisher_error
from goflux._otel.telemetry import Telemetry
from goflux._urls import redact_url
from goflux._wire import outgoing
from goflux.transports.http._client import DEFAULT_TIMEOUT, Poster, Unsent
from goflux.transports.http._errors import StatusError

__all__ = ("Publisher",)

T = TypeVar("T")

_DRAINED = 4096  # bytes of a 2xx answer's body read (the rest is not waited for)


class Publisher(CloseOnExit, Generic[T]):
    """Publishes values of type ``T`` as ``POST {base_url}/{subject}``.

    The body is the codec's bytes; ``Content-Type`` the codec's (``application/json``
    for JSON, ``application/gzip`` for ``pipe(JsonCodec(T), Gzip())``: a codec's
    compression is never sent as ``Content-Encoding``); user headers travel as
    ``X-Goflux-{name}``, the message ID as ``X-Message-ID``, the trace context as
    ``traceparent``/``tracestate``: what a Go goflux HTTP subscriber reads.
    ``publish`` returns once the endpoint answered 2xx (its handler ran); any other
    answer raises :class:`StatusError`.

    Args:
        base_url: The endpoint root, e.g. ``"https://orders.internal/hooks"``.
        codec: Encodes the values.
        client: An ``httpx.AsyncClient`` to send with (pooled connections, TLS,
            auth, proxies as configured); the caller owns it and closes it. Default:
            a client of the publisher's own, closed by :meth:`close`.
        timeout: Seconds a publish may take in all (connect, send, answer); it
            applies to a given ``client`` too.
        telemetry: Tracing and metrics; default: OpenTelemetry globals.

    Raises:
        ValueError: ``base_url`` is no absolute http(s) URL (or has a query or
            fragment), or ``timeout`` is not positive.
    """

    def __init__(
        self,
        base_url: str,
        codec: Codec[T],
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._poster = Poster(base_url, codec, client, timeout)
        self._codec = codec
        self._scopes = self._poster.scopes(telemetry, SpanKind.PRODUCER)
        self._closed = False

    @property
    def base_url(self) -> str:
        """The endpoint root (without a trailing ``/``)."""
        return self._poster.base_url

    @property
    def client(self) -> httpx.AsyncClient:
        """The httpx client the publisher sends with."""
        return self._poster.client

    def _facts(self) -> Facts:
        return Facts("http", codec=self._codec, http={"baseUrl": self._poster.shown_base_url})

    async def publish(
        self,
        subject: str,
        value: T,
        /,
        *,
        headers: HeadersLike | None = None,
        message_id: str | None = None,
    ) -> None:
        """POST ``value`` to ``{base_url}/{subject}``; return once it was answered 2xx.

        Raises:
            InvalidSubject: ``subject`` is not a valid publish subject.
            InvalidHeader: A header or the message ID cannot travel on the wire.
            EncodeError: ``value`` cannot be encoded.
            StatusError: The endpoint answered with a status other than 2xx (naming
                the URL, the status and the answer's first line).
            PublishError: The publisher is closed, or no answer came: the endpoint
                refused the connection or is unreachable (at once, with the cause),
                or did not answer within the timeout (``may_be_stored``: its
                handler may have run).
        """
        if self._closed:
            raise closed_publisher_error(subject)
        wire = outgoing(subject, headers, message_id, jetstream=False)
        poster = self._poster
        url = poster.url(subject)
        with self._scopes.open(subject, wire, message_id=message_id) as scope:
            data = self._codec.encode(value)
            try:
                answer = await poster.post(url, data, wire, scope, None, _DRAINED)
            except Unsent as exc:
                raise PublishError(
                    f"publish to {subject!r} at {redact_url(url)} failed: {exc.reason}",
                    subject=subject,
                    may_be_stored=exc.may_be_stored,
                    permanent=exc.closed,
                ) from exc
            if not answer.ok:
                raise StatusError(
                    f"publish to {subject!r}: {redact_url(url)} answered {answer.why()}",
                    subject=subject,
                    url=redact_url(url),
                    status=answer.status,
                    detail=answer.detail,
                    retry_after=answer.retry_after,
                )

    async def close(self) -> None:
        """Refuse further publishes; close the httpx client if it is the publisher's own."""
        self._closed = True
        await self._poster.close()
