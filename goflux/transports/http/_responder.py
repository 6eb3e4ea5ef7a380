"""Answering typed requests over HTTP: :class:`Responder`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Generic, TypeVar

from opentelemetry.trace import SpanKind
from starlette.types import Receive, Scope, Send

from goflux._codecs import Codec, as_decode_error, content_type_of
from goflux._errors import EncodeError, ServiceError
from goflux._facts import Facts
from goflux._lifecycle import SubscriberLifecycle
from goflux._otel.semconv import (
    GOFLUX_REPLY_BODY_SIZE,
    HTTP_RESPONSE_STATUS_CODE,
)
from goflux._otel.telemetry import Telemetry
from goflux.transports.http._answers import send_error, send_reply
from goflux.transports.http._router import Router
from goflux.transports.http._served import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_MAX_BODY_SIZE,
    RouteOptions,
    RouteOwner,
    ServedRoute,
)
from goflux.transports.http._wire import incoming

__all__ = ("Responder", "ResponderRoute")

Req = TypeVar("Req")
Resp = TypeVar("Resp")

logger = logging.getLogger("goflux.transports.http")

_DEFAULT_REPLY_TYPE = "application/json"  # what Go goflux's responder always says


class ResponderRoute(ServedRoute, Generic[Req, Resp]):
    """A subject answered over HTTP: 200 with the encoded reply, or an error status.

    Attributes:
        answered: Requests answered 200.
        failed: Requests answered with an error (bad request, handler failure).
    """

    def __init__(
        self,
        router: Router,
        base_path: str,
        subject: str,
        request_codec: Codec[Req],
        reply_codec: Codec[Resp],
        handle: Callable[[Req], Awaitable[Resp]],
        options: RouteOptions,
        telemetry: Telemetry,
    ) -> None:
        super().__init__(router, base_path, subject, options, telemetry, SpanKind.SERVER)
        self._request_codec = request_codec
        self._reply_codec = reply_codec
        self._content_type = content_type_of(reply_codec) or _DEFAULT_REPLY_TYPE
        self._handle = handle
        self.answered = 0
        self.failed = 0

    async def _answer(
        self, scope: Scope, receive: Receive, send: Send, subject: str, body: bytes
    ) -> None:
        wire = incoming(scope["headers"])
        raw_id = wire.raw_message_id
        reply_headers = None if raw_id is None else [(b"x-message-id", raw_id)]
        with self._scope(scope, subject, wire, body) as span:
            status, text = 500, "internal server error"
            failure: BaseException | None
            try:
                request = self._request_codec.decode(body)
            except Exception as caught:  # noqa: BLE001 - any codec failure: undecodable
                exc = as_decode_error(caught, self._request_codec, body)
                logger.error("undecodable request on %r refused (400): %s", subject, exc)
                status, text, failure = 400, f"bad request: {exc}", exc
            else:
                failure = None
                try:
                    data = self._reply_codec.encode(await self._handle(request))
                except ServiceError as exc:
                    status, text, failure = exc.code, exc.description, exc
                except EncodeError as exc:
                    logger.error("cannot encode the reply on %r: %s", subject, exc)
                    failure = exc
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        self.failed += 1
                        raise  # the drain deadline or the server: answered 503 above
                    failure = asyncio.CancelledError("the handler was cancelled")
                    logger.error("handler for request on %r was cancelled", subject)
                except Exception as exc:
                    logger.exception(
                        "handler failed for request on %r: %s: %s",
                        subject,
                        type(exc).__name__,
                        exc,
                    )
                    failure = exc
                else:
                    status = 200
                    if span.recording:
                        span.set_attributes({GOFLUX_REPLY_BODY_SIZE: len(data)})
            if failure is not None:
                span.fail(failure)
            span.set_attributes({HTTP_RESPONSE_STATUS_CODE: status})
        if status == 200:
            self.answered += 1
            await send_reply(scope, receive, send, data, self._content_type, reply_headers)
        else:
            self.failed += 1
            await send_error(scope, receive, send, status, text, raw=reply_headers)


class Responder(RouteOwner, SubscriberLifecycle["ResponderRoute[Req, Resp]"], Generic[Req, Resp]):
    """Answers typed requests over HTTP: ``POST {base_path}/{subject}``, as Go goflux.

    The reply is 200 with the encoded reply and the reply codec's ``Content-Type``
    (``application/json`` for JSON), never a ``Content-Encoding``: a compressing reply
    codec's bytes are the body, labelled with its type (``application/gzip``), so no
    HTTP client undoes the compression before the codec does. A
    :class:`~goflux.ServiceError` raised by the handler answers with its code and
    message (the requester raises :class:`~goflux.RemoteError` with both); an
    undecodable request is 400; any other exception, or a reply that cannot be
    encoded, 500 (the exception is logged, not sent). 404, 405, 408, 413, 415 (a
    compressed body) and 503 (stopping) as for
    :class:`~goflux.transports.http.Subscriber`. The handler runs inside a SERVER
    span, child of the requester's. :attr:`app` is the ASGI application.

    Args:
        request_codec: Decodes the requests.
        reply_codec: Encodes the replies.
        base_path: Path prefix of every route (``""`` or ``/a/b``).
        max_body_size: Largest request body taken, in bytes (default 1 MiB).
        body_timeout: Seconds a request's body may take to arrive (then 408).
        drain_timeout: Seconds a stopping route waits for handlers.
        max_concurrency: Most requests a route handles at a time; one more is
            answered 503 with ``Retry-After: 1`` at once (default: no limit).
        telemetry: Tracing and metrics; default: OpenTelemetry globals.
        router: Serve the routes on this router; default: one of its own.

    Raises:
        ValueError: An option is out of range, or ``base_path`` is no path.
    """

    def __init__(
        self,
        request_codec: Codec[Req],
        reply_codec: Codec[Resp],
        *,
        base_path: str = "",
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        max_concurrency: int | None = None,
        telemetry: Telemetry | None = None,
        router: Router | None = None,
    ) -> None:
        options = RouteOptions(max_body_size, body_timeout, drain_timeout, max_concurrency)
        self._own_routes(base_path, options, telemetry, router)
        self._request_codec = request_codec
        self._reply_codec = reply_codec
        super().__init__()

    @property
    def request_codec(self) -> Codec[Req]:
        """The codec that decodes the requests."""
        return self._request_codec

    @property
    def response_codec(self) -> Codec[Resp]:
        """The codec that encodes the replies."""
        return self._reply_codec

    def _facts(self) -> Facts:
        return Facts(
            "http",
            codec=self._request_codec,
            reply_codec=self._reply_codec,
            http=self._http_facts(),
            app=self._router,
        )

    async def start(
        self,
        subject: str,
        handle: Callable[[Req], Awaitable[Resp]],
        *,
        endpoint: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ResponderRoute[Req, Resp]:
        """Answer requests to ``subject`` at ``{base_path}/{subject}`` from now on.

        ``endpoint`` and ``metadata`` are the NATS micro service options
        (:meth:`goflux.Group.respond` passes them on); an HTTP route has neither.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            ValueError: ``endpoint`` or ``metadata`` is given.
            SubscribeError: The responder is closed, or a running route already
                serves that path on the router.
        """
        if endpoint is not None or metadata is not None:
            raise ValueError(
                f"endpoint= and metadata= name NATS micro service endpoints; the HTTP "
                f"route of {subject!r} is served at {self._base_path}/{subject}"
            )

        async def open_route() -> ResponderRoute[Req, Resp]:
            route = ResponderRoute(
                self._router,
                self._base_path,
                subject,
                self._request_codec,
                self._reply_codec,
                handle,
                self._options,
                self._tel,
            )
            self._router.add(route)
            return route

        return await self._start_subscription(subject, open_route)

    async def serve(self, subject: str, handle: Callable[[Req], Awaitable[Resp]]) -> None:
        """Answer ``subject`` until cancelled or the responder is closed, then drain.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: As for :meth:`start`.
        """
        await self._run(await self.start(subject, handle))
