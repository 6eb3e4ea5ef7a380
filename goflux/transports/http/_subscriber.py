"""Taking messages in over HTTP: :class:`Subscriber` and its :class:`HttpSubscription`."""

from __future__ import annotations

import asyncio
import logging
from typing import Final, Generic, TypeVar

from opentelemetry.trace import SpanKind
from starlette.types import Receive, Scope, Send

from goflux._codecs import Codec, as_decode_error
from goflux._compose.streams import Streaming
from goflux._errors import is_non_retryable
from goflux._facts import Facts
from goflux._interfaces import Handler
from goflux._lifecycle import SubscriberLifecycle
from goflux._message import Delivery, Message, Outcome, received
from goflux._otel.semconv import HTTP_RESPONSE_STATUS_CODE
from goflux._otel.telemetry import Telemetry
from goflux.transports.http._answers import send_empty, send_error
from goflux.transports.http._router import Router
from goflux.transports.http._served import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_MAX_BODY_SIZE,
    RouteOptions,
    RouteOwner,
    ServedRoute,
)
from goflux.transports.http._wire import incoming, retry_after

__all__ = ("HttpSubscription", "Subscriber")

T = TypeVar("T")

logger = logging.getLogger("goflux.transports.http")

TERM_STATUS: Final = 422
"""The answer to a message the handler terminated (``term``, or a non-retryable failure)."""
NAK_STATUS: Final = 503
"""The answer to a message the handler gave back (``nak``): the caller may send it again."""


class _Answer:
    """Settlement over HTTP: it chooses the answer's status, sent when the handler returns.

    ``ack`` is 204, ``nak`` 503 (with ``Retry-After`` for a delay), ``term`` 422.
    """

    __slots__ = ("delay", "outcome", "reason")

    sender_retries = True  # a nak is a 503: the sender sends the message again

    def __init__(self) -> None:
        self.outcome: Outcome | None = None
        self.delay: float | None = None
        self.reason: str | None = None

    async def ack(self) -> None:
        self.outcome = "ack"

    async def nak(self, delay: float | None) -> None:
        self.outcome = "nak"
        self.delay = delay

    async def term(self, reason: str | None) -> None:
        self.outcome = "term"
        self.reason = reason

    async def in_progress(self) -> None:
        """Nothing to tell: the caller waits for the answer anyway."""

    @property
    def delivery(self) -> Delivery | None:
        return None


class HttpSubscription(ServedRoute, Generic[T]):
    """A subject served over HTTP: each POST is decoded and handed to the handler.

    Answers: 204 the handler returned (or acked), 400 the body does not decode, 408
    the body did not arrive in time, 413 the body is too large, 415 the body came
    with a ``Content-Encoding`` other than ``identity``, 422 the handler terminated
    the message (``term``, or raised :class:`~goflux.NonRetryable`), 500 the handler
    raised, 503 the handler asked for a retry (``nak``; ``Retry-After`` with a
    delay) or the subscription is stopping.

    Attributes:
        handled: Messages whose handler returned.
        failed: Messages whose handler raised.
        undecodable: Requests whose body did not decode (400).
    """

    def __init__(
        self,
        router: Router,
        base_path: str,
        subject: str,
        codec: Codec[T],
        handler: Handler[T],
        options: RouteOptions,
        telemetry: Telemetry,
    ) -> None:
        super().__init__(router, base_path, subject, options, telemetry, SpanKind.CONSUMER)
        self._codec = codec
        self._handler = handler
        self.handled = 0
        self.failed = 0
        self.undecodable = 0

    async def _answer(
        self, scope: Scope, receive: Receive, send: Send, subject: str, body: bytes
    ) -> None:
        wire = incoming(scope["headers"])
        answer = _Answer()
        status = 204
        failure: BaseException | None = None
        with self._scope(scope, subject, wire, body) as span:
            try:
                payload = self._codec.decode(body)
            except Exception as caught:  # noqa: BLE001 - any codec failure: undecodable
                exc = as_decode_error(caught, self._codec, body)
                self.undecodable += 1
                span.fail(exc)
                span.set_attributes({HTTP_RESPONSE_STATUS_CODE: 400})
                logger.error("undecodable message on %r refused (400): %s", subject, exc)
                await send_error(scope, receive, send, 400, f"bad request: {exc}")
                return
            message: Message[T] = received(
                subject, payload, wire.headers, wire.message_id, body, answer, wire.wire
            )
            try:
                await self._handler(message)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    self.failed += 1
                    raise  # the drain deadline or the server: not the handler's doing
                failure = asyncio.CancelledError("the handler was cancelled")
            except Exception as exc:  # noqa: BLE001 - every failure gets an answer
                failure = exc
            if failure is None:
                self.handled += 1
            else:
                self.failed += 1
                span.fail(failure)
                logger.error(
                    "handler failed for message on %r: %s: %s",
                    subject,
                    type(failure).__name__,
                    failure,
                    exc_info=failure,
                )
            status = _status(answer, failure)
            span.set_attributes({HTTP_RESPONSE_STATUS_CODE: status})
        if status == 204:
            await send_empty(scope, receive, send)
        elif status == NAK_STATUS:
            headers = None if answer.delay is None else {"retry-after": retry_after(answer.delay)}
            await send_error(scope, receive, send, status, "try again later", headers)
        elif status == TERM_STATUS:
            await send_error(scope, receive, send, status, _term_text(answer.reason))
        else:
            await send_error(scope, receive, send, 500, "internal server error")


def _status(answer: _Answer, failure: BaseException | None) -> int:
    """The answer's status: the settlement if the handler settled, else its outcome."""
    outcome = answer.outcome
    if outcome == "ack":
        return 204
    if outcome == "nak":
        return NAK_STATUS
    if outcome == "term":
        return TERM_STATUS
    if failure is None:
        return 204
    if isinstance(failure, Exception) and is_non_retryable(failure):
        answer.reason = "goflux: non-retryable failure"
        return TERM_STATUS
    return 500


def _term_text(reason: str | None) -> str:
    """What a 422 says: the handler's own ``term`` reason, or only the kind of a failure.

    Reasons goflux writes (``goflux: max_attempts: RuntimeError: ...``) carry the
    exception's text, which may hold what the sender must not see; they are logged,
    and the sender gets ``not processable (max_attempts)``.
    """
    if not reason:
        return "not processable"
    if reason.startswith("goflux: "):
        kind = reason[len("goflux: ") :].split(":", 1)[0].strip()
        return f"not processable ({kind})"
    return reason


class Subscriber(RouteOwner, SubscriberLifecycle["HttpSubscription[T]"], Streaming[T], Generic[T]):
    """Takes typed messages in over HTTP: ``POST {base_path}/{subject}``, as Go goflux.

    The subscriber owns no listener: :attr:`app` is an ASGI application serving every
    subject started; serve it with uvicorn, mount it in FastAPI or Starlette, or run
    it with ``goflux run --http-port``. Handlers, middleware and streams are those of
    every transport; the handler's outcome is the answer:

    ====================  =====================================================
    204                   the handler returned (or acked)
    400                   the body does not decode
    404 / 405             no route for the path / a method other than POST
    408 / 413             the body did not arrive in time / is too large
    415                   the body came with a ``Content-Encoding`` other than
                          ``identity`` (``Accept-Encoding: identity`` says so):
                          compression is the codec's (``pipe(codec, Gzip())``)
    422                   the handler terminated the message (``term``, or raised
                          :class:`~goflux.NonRetryable`)
    500                   the handler raised
    503                   the handler asked for a retry (``nak``; ``Retry-After``
                          with a delay), or the subscription is stopping
    ====================  =====================================================

    ``X-Goflux-*`` headers reach the handler without the prefix, named in Go's
    canonical form (``Tenant-Id``); ``X-Message-ID`` is the message's ID; the
    handler's span is a child of the sender's (``traceparent``).

    Args:
        codec: Decodes the bodies.
        base_path: Path prefix of every route (``""`` or ``/a/b``).
        max_body_size: Largest body taken, in bytes (default 1 MiB, as Go goflux);
            a larger one is refused (413) before it is read whole.
        body_timeout: Seconds a request's body may take to arrive (then 408).
        drain_timeout: Seconds a stopping subscription waits for handlers.
        max_concurrency: Most requests a route handles at a time; one more is
            answered 503 with ``Retry-After: 1`` at once (default: no limit).
        telemetry: Tracing and metrics; default: OpenTelemetry globals.
        router: Serve the routes on this router (shared with other subscribers and
            responders); default: one of its own.

    Raises:
        ValueError: An option is out of range, or ``base_path`` is no path.
    """

    def __init__(
        self,
        codec: Codec[T],
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
        self._codec = codec
        super().__init__()

    @property
    def codec(self) -> Codec[T]:
        """The codec that decodes the bodies."""
        return self._codec

    def _facts(self) -> Facts:
        return Facts("http", codec=self._codec, http=self._http_facts(), app=self._router)

    async def start(self, subject: str, handler: Handler[T]) -> HttpSubscription[T]:
        """Serve ``subject`` at ``{base_path}/{subject}`` from now on.

        A wildcard subject (``orders.*``) serves every path it matches and hands the
        handler the concrete subject.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: The subscriber is closed, or a running route already
                serves that path on the router.
        """

        async def open_subscription() -> HttpSubscription[T]:
            subscription = HttpSubscription(
                self._router,
                self._base_path,
                subject,
                self._codec,
                handler,
                self._options,
                self._tel,
            )
            self._router.add(subscription)
            return subscription

        return await self._start_subscription(subject, open_subscription)

    async def subscribe(self, subject: str, handler: Handler[T]) -> None:
        """Serve ``subject`` until cancelled or the subscriber is closed, then drain.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: As for :meth:`start`.
        """
        await self._run(await self.start(subject, handler))
