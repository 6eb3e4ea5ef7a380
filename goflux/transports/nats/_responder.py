"""Typed request/reply on core NATS: the serving side."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from opentelemetry.trace import SpanKind

from goflux._codecs import Codec
from goflux._errors import DecodeError, EncodeError, PayloadTooLarge, ServiceError
from goflux._lifecycle import SubscriberLifecycle
from goflux._scopes import ProcessScopes
from goflux._subjects import is_wildcard
from goflux._telemetry import Telemetry
from goflux._wire import MESSAGE_ID_HEADER, check_size, read_headers
from goflux.transports._refusals import Refusal, refusals
from goflux.transports.nats._requester import ERROR_CODE_HEADER, ERROR_HEADER
from goflux.transports.nats._subscription import (
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_PENDING_BYTES,
    DEFAULT_PENDING_MESSAGES,
    CoreSubscription,
    DispatchOptions,
)
from goflux.transports.nats._system import SYSTEM

__all__ = ("Responder", "ResponderSubscription")

Req = TypeVar("Req")
Resp = TypeVar("Resp")

logger = logging.getLogger("goflux.transports.nats")

_MAX_ERROR_TEXT = 1024
_REMEMBERED_REPLIES = 4096  # recent reply subjects matched against refusals


class ResponderSubscription(CoreSubscription, Generic[Req, Resp]):
    """A running responder: each request gets the handler's reply, or an error reply.

    Attributes:
        answered: Requests answered with a reply.
        failed: Requests answered with an error reply (handler failure or bad request),
            or whose reply the server refused (the credentials may not publish to the
            reply subject; logged once per subscription).
        unanswerable: Messages without a reply subject (published, not requested).
    """

    def __init__(
        self,
        nc: Client,
        request_codec: Codec[Req],
        response_codec: Codec[Resp],
        pattern: str,
        handle: Callable[[Req], Awaitable[Resp]],
        options: DispatchOptions,
        telemetry: Telemetry,
    ) -> None:
        super().__init__(nc, pattern, self._answer, options, telemetry)
        self._request_codec = request_codec
        self._response_codec = response_codec
        self._handle = handle
        self._scopes = ProcessScopes(
            telemetry,
            SYSTEM,
            template=pattern if is_wildcard(pattern) else None,
            consumer_group=options.queue,
            kind=SpanKind.SERVER,
            parented=True,  # the caller waits: the span is its child, not a link
        )
        self.answered = 0
        self.failed = 0
        self.unanswerable = 0
        # Replies sent lately, to recognise the server's refusal of one (it comes later).
        self._replied: OrderedDict[str, None] = OrderedDict()
        self._refusals_logged = False
        self._unobserve = refusals(nc).observe(self._on_refusal)

    async def _answer(self, msg: Msg) -> None:
        if not msg.reply:
            self.unanswerable += 1
            logger.warning("message on %r has no reply subject; nothing to answer", msg.subject)
            return
        _, message_id = read_headers(msg.headers)
        reply_headers = {MESSAGE_ID_HEADER: message_id} if message_id is not None else {}
        try:
            with self._scopes.open(
                msg.subject, msg.headers, message_id=message_id, body_size=len(msg.data)
            ) as scope:
                failure = await self._serve(msg, reply_headers)
                if failure is not None:
                    scope.fail(failure)
        except asyncio.CancelledError:
            self.failed += 1
            task = asyncio.current_task()
            stopping = task is not None and task.cancelling() > 0
            why = "the responder is stopping" if stopping else "the handler was cancelled"
            await self._reply_error(msg, 503 if stopping else 500, why, reply_headers)
            if stopping:
                raise  # the responder is being stopped (drain deadline)
            return
        if failure is None:
            self.answered += 1
        else:
            self.failed += 1

    async def _leftover(self, msg: Msg) -> None:
        """Answer a request the drain deadline left unprocessed: 503, not silence."""
        self.received += 1
        self.failed += 1
        if msg.reply:
            _, message_id = read_headers(msg.headers)
            headers = {MESSAGE_ID_HEADER: message_id} if message_id is not None else {}
            await self._reply_error(msg, 503, "the responder is stopping", headers)

    async def _serve(self, msg: Msg, reply_headers: dict[str, str]) -> BaseException | None:
        """Answer one request; return the failure that got an error reply, if any."""
        try:
            request = self._request_codec.decode(msg.data)
        except DecodeError as exc:
            logger.error("undecodable request on %r: %s", msg.subject, exc)
            await self._reply_error(msg, 400, f"bad request: {exc}", reply_headers)
            return exc
        try:
            response = await self._handle(request)
            data = self._response_codec.encode(response)
        except ServiceError as exc:
            await self._reply_error(msg, exc.code, exc.description, reply_headers)
            return exc
        except EncodeError as exc:
            logger.error("cannot encode the reply on %r: %s", msg.subject, exc)
            await self._reply_error(msg, 500, f"cannot encode the reply: {exc}", reply_headers)
            return exc
        except Exception as exc:
            logger.exception(
                "handler failed for request on %r: %s: %s", msg.subject, type(exc).__name__, exc
            )
            await self._reply_error(msg, 500, f"{type(exc).__name__}: {exc}", reply_headers)
            return exc
        try:
            check_size(msg.reply, reply_headers, data, self._nc.max_payload)
        except PayloadTooLarge as exc:
            logger.error("the reply on %r is too large: %s", msg.subject, exc)
            await self._reply_error(msg, 500, f"the reply is too large: {exc}", reply_headers)
            return exc
        await self._reply(msg, data, reply_headers or None)
        return None

    async def _reply(self, msg: Msg, data: bytes, headers: dict[str, str] | None) -> None:
        try:
            await self._nc.publish(msg.reply, data, headers=headers)
        except nats.errors.Error as exc:
            logger.warning("could not reply on %r: %s", msg.subject, exc)
            return
        replied = self._replied
        replied[msg.reply] = None
        if len(replied) > _REMEMBERED_REPLIES:
            replied.popitem(last=False)

    def _on_refusal(self, refusal: Refusal) -> None:
        """The server refused a reply sent lately: it counts as failed, not answered."""
        if refusal.operation != "publish":
            return
        subject = refusal.subject
        if refusal.folded:  # the case was lost: only an unambiguous match counts
            matches = [reply for reply in self._replied if reply.lower() == subject]
            subject = matches[0] if len(matches) == 1 else ""
        if subject not in self._replied:
            return
        del self._replied[subject]
        if self.answered > 0:
            self.answered -= 1
        self.failed += 1
        if not self._refusals_logged:  # once: every reply is likely refused alike
            self._refusals_logged = True
            logger.error(
                "the server refuses replies of the responder on %r (%s); "
                "each refused reply counts as failed",
                self._pattern,
                refusal.reason,
            )

    async def _finish(self, failure: BaseException | None) -> None:
        self._unobserve()
        await super()._finish(failure)

    async def _reply_error(
        self, msg: Msg, code: int, description: str, headers: dict[str, str]
    ) -> None:
        text = " ".join(description.split())[:_MAX_ERROR_TEXT]  # one header line
        await self._reply(msg, b"", {**headers, ERROR_HEADER: text, ERROR_CODE_HEADER: str(code)})


class Responder(SubscriberLifecycle["ResponderSubscription[Req, Resp]"], Generic[Req, Resp]):
    """Serves typed requests on core NATS subjects.

    Every request gets an answer: the handler's reply, or an error reply with
    ``Nats-Service-Error`` / ``Nats-Service-Error-Code`` headers, 400 when the request
    cannot be decoded, 500 when the handler raises (a :class:`~goflux.ServiceError`
    chooses its own code). Responders sharing a ``queue`` split the requests, each
    answered once. The handler runs inside a SERVER span, child of the requester's.

    Args:
        nc: A connected nats-py client (the caller owns it).
        request_codec: Decodes the requests.
        response_codec: Encodes the replies.
        queue: Queue group name for load-balanced responders.
        concurrency: Requests handled at a time per subscription.
        pending_messages: Most requests buffered per subscription.
        pending_bytes: Most bytes buffered per subscription.
        drain_timeout: Seconds a drain waits for handlers.
        telemetry: Tracing and metrics; default: OpenTelemetry globals.

    Raises:
        ValueError: An option is out of range or the queue name is invalid.
    """

    def __init__(
        self,
        nc: Client,
        request_codec: Codec[Req],
        response_codec: Codec[Resp],
        *,
        queue: str | None = None,
        concurrency: int = 1,
        pending_messages: int = DEFAULT_PENDING_MESSAGES,
        pending_bytes: int = DEFAULT_PENDING_BYTES,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._options = DispatchOptions(
            queue=queue,
            concurrency=concurrency,
            pending_messages=pending_messages,
            pending_bytes=pending_bytes,
            drain_timeout=drain_timeout,
        )
        self._nc = nc
        self._request_codec = request_codec
        self._response_codec = response_codec
        self._tel = Telemetry.or_default(telemetry)
        super().__init__()

    async def start(
        self, subject: str, handle: Callable[[Req], Awaitable[Resp]]
    ) -> ResponderSubscription[Req, Resp]:
        """Start serving ``subject``; return once the server has the subscription.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: The responder is closed or the connection failed.
        """

        async def open_subscription() -> ResponderSubscription[Req, Resp]:
            subscription = ResponderSubscription(
                self._nc,
                self._request_codec,
                self._response_codec,
                subject,
                handle,
                self._options,
                self._tel,
            )
            await subscription._begin()
            return subscription

        return await self._start_subscription(subject, open_subscription)

    async def serve(self, subject: str, handle: Callable[[Req], Awaitable[Resp]]) -> None:
        """Serve ``subject`` until cancelled or the responder is closed, then drain.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: The subscription could not start, or failed.
        """
        await self._run(await self.start(subject, handle))
