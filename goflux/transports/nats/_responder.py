"""Typed request/reply on core NATS: the serving side."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Generic, TypeVar

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from opentelemetry.trace import SpanKind

from goflux._codecs import Codec, as_decode_error
from goflux._errors import EncodeError, PayloadTooLarge, ServiceError
from goflux._facts import Facts
from goflux._lifecycle import SubscriberLifecycle
from goflux._otel.scopes import NullScope, ProcessScope, ProcessScopes
from goflux._otel.semconv import GOFLUX_REPLY_BODY_SIZE
from goflux._otel.telemetry import Telemetry
from goflux._subjects import is_wildcard
from goflux._wire import MESSAGE_ID_HEADER, check_size, read_headers
from goflux.transports._refusals import Refusal, refusals
from goflux.transports.nats._micro import MicroEndpoint, MicroService
from goflux.transports.nats._micro_types import DEFAULT_QUEUE_GROUP
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
_STOPPING = "the responder is stopping"
_NO_REPLY = "no reply subject: not a request"


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
        endpoint: MicroEndpoint | None = None,
    ) -> None:
        # Only a micro service endpoint pays for timing and counting each request.
        process = self._answer if endpoint is None else self._answer_counted
        super().__init__(nc, pattern, process, options, telemetry)
        self._endpoint = endpoint
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
        self._replied: OrderedDict[str, bool] = OrderedDict()  # reply -> an answer?
        self._refusals_logged = False
        self._unobserve = refusals(nc).observe(self._on_refusal)

    @property
    def endpoint(self) -> str | None:
        """The micro service endpoint name of this subscription (None without a service)."""
        return None if self._endpoint is None else self._endpoint.name

    async def _answer(self, msg: Msg) -> str | None:
        """Answer one request; return the error sent as ``code:description``, if any."""
        if not msg.reply:
            self.unanswerable += 1
            logger.warning("message on %r has no reply subject; nothing to answer", msg.subject)
            return _NO_REPLY
        _, message_id = read_headers(msg.headers)
        reply_headers = {MESSAGE_ID_HEADER: message_id} if message_id is not None else {}
        try:
            with self._scopes.open(
                msg.subject, msg.headers, message_id=message_id, body_size=len(msg.data)
            ) as scope:
                failure = await self._serve(msg, reply_headers, scope)
                if failure is not None:
                    scope.fail(failure[0])
        except asyncio.CancelledError:
            self.failed += 1
            task = asyncio.current_task()
            stopping = task is not None and task.cancelling() > 0
            why = _STOPPING if stopping else "the handler was cancelled"
            error = await self._reply_error(msg, 503 if stopping else 500, why, reply_headers)
            if stopping:
                raise  # the responder is being stopped (drain deadline)
            return error
        if failure is None:
            self.answered += 1
            return None
        self.failed += 1
        return failure[1]

    async def _answer_counted(self, msg: Msg) -> None:
        """:meth:`_answer`, counted in the micro service endpoint's stats."""
        endpoint = self._endpoint
        assert endpoint is not None
        began = time.perf_counter_ns()
        try:
            error = await self._answer(msg)
        except asyncio.CancelledError:  # only a stopping responder's 503 gets here
            endpoint.record(time.perf_counter_ns() - began, f"503:{_STOPPING}")
            raise
        endpoint.record(time.perf_counter_ns() - began, error)

    async def _leftover(self, msg: Msg) -> None:
        """Answer a request the drain deadline left unprocessed: 503, not silence."""
        began = time.perf_counter_ns()
        self.received += 1
        self.failed += 1
        error = _NO_REPLY
        if msg.reply:
            _, message_id = read_headers(msg.headers)
            headers = {MESSAGE_ID_HEADER: message_id} if message_id is not None else {}
            error = await self._reply_error(msg, 503, _STOPPING, headers)
        if self._endpoint is not None:
            self._endpoint.record(time.perf_counter_ns() - began, error)

    async def _serve(
        self, msg: Msg, reply_headers: dict[str, str], scope: ProcessScope | NullScope
    ) -> tuple[BaseException, str] | None:
        """Answer one request; return the failure that got an error reply, and that error."""
        try:
            request = self._request_codec.decode(msg.data)
        except Exception as caught:  # noqa: BLE001 - any codec failure: undecodable
            exc = as_decode_error(caught, self._request_codec, msg.data)
            logger.error("undecodable request on %r: %s", msg.subject, exc)
            return exc, await self._reply_error(msg, 400, f"bad request: {exc}", reply_headers)
        try:
            response = await self._handle(request)
            data = self._response_codec.encode(response)
        except ServiceError as exc:
            return exc, await self._reply_error(msg, exc.code, exc.description, reply_headers)
        except EncodeError as exc:
            logger.error("cannot encode the reply on %r: %s", msg.subject, exc)
            why = f"cannot encode the reply: {exc}"
            return exc, await self._reply_error(msg, 500, why, reply_headers)
        except Exception as exc:
            logger.exception(
                "handler failed for request on %r: %s: %s", msg.subject, type(exc).__name__, exc
            )
            why = f"{type(exc).__name__}: {exc}"
            return exc, await self._reply_error(msg, 500, why, reply_headers)
        try:
            check_size(msg.reply, reply_headers, data, self._nc.max_payload)
        except PayloadTooLarge as exc:
            logger.error("the reply on %r is too large: %s", msg.subject, exc)
            why = f"the reply is too large: {exc}"
            return exc, await self._reply_error(msg, 500, why, reply_headers)
        if scope.recording:
            scope.set_attributes({GOFLUX_REPLY_BODY_SIZE: len(data)})  # Go goflux's
        await self._reply(msg, data, reply_headers or None)
        return None

    async def _reply(
        self, msg: Msg, data: bytes, headers: dict[str, str] | None, *, answer: bool = True
    ) -> None:
        try:
            await self._nc.publish(msg.reply, data, headers=headers)
        except nats.errors.Error as exc:
            logger.warning("could not reply on %r: %s", msg.subject, exc)
            return
        replied = self._replied
        replied[msg.reply] = answer
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
        if self._replied.pop(subject):  # an error reply counted as failed already
            if self.answered > 0:
                self.answered -= 1
            self.failed += 1
            if self._endpoint is not None:
                self._endpoint.fail(f"the server refused the reply: {refusal.reason}")
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
        if self._endpoint is not None:
            self._endpoint.leave()
        await super()._finish(failure)

    async def _reply_error(
        self, msg: Msg, code: int, description: str, headers: dict[str, str]
    ) -> str:
        """Send an error reply; return it as micro stats tell it: ``code:description``."""
        text = " ".join(description.split())[:_MAX_ERROR_TEXT]  # one header line
        error_headers = {**headers, ERROR_HEADER: text, ERROR_CODE_HEADER: str(code)}
        await self._reply(msg, b"", error_headers, answer=False)
        return f"{code}:{text}"


class Responder(SubscriberLifecycle["ResponderSubscription[Req, Resp]"], Generic[Req, Resp]):
    """Serves typed requests on core NATS subjects.

    Every request gets an answer: the handler's reply, or an error reply with
    ``Nats-Service-Error`` / ``Nats-Service-Error-Code`` headers, 400 when the request
    cannot be decoded, 500 when the handler raises (a :class:`~goflux.ServiceError`
    chooses its own code). Responders sharing a ``queue`` split the requests, each
    answered once. The handler runs inside a SERVER span, child of the requester's.

    With a ``service`` (a :class:`MicroService`), every subscription started is an
    endpoint of that NATS micro service, listed by ``$SRV.INFO`` and counted by
    ``$SRV.STATS`` until it stops. Its queue group is ``queue``, or the micro
    standard's ``"q"`` when ``queue`` is None: instances of a service split the
    requests, as services written with nats.go or nats.js do.

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
        service: Register the subscriptions as endpoints of this micro service.

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
        service: MicroService | None = None,
    ) -> None:
        if queue is None and service is not None:
            queue_group: str | None = DEFAULT_QUEUE_GROUP
        else:
            queue_group = queue
        self._options = DispatchOptions(
            queue=queue_group,
            concurrency=concurrency,
            pending_messages=pending_messages,
            pending_bytes=pending_bytes,
            drain_timeout=drain_timeout,
        )
        self._nc = nc
        self._request_codec = request_codec
        self._response_codec = response_codec
        self._queue = queue
        self._service = service
        self._tel = Telemetry.or_default(telemetry)
        super().__init__()

    @property
    def request_codec(self) -> Codec[Req]:
        """The codec that decodes the requests."""
        return self._request_codec

    @property
    def response_codec(self) -> Codec[Resp]:
        """The codec that encodes the replies."""
        return self._response_codec

    @property
    def queue(self) -> str | None:
        """The queue group as given (a service's endpoints use ``"q"`` when None)."""
        return self._queue

    @property
    def service(self) -> MicroService | None:
        """The micro service whose endpoints the subscriptions are, if any."""
        return self._service

    def _facts(self) -> Facts:
        service = self._service
        queue = self._queue or (DEFAULT_QUEUE_GROUP if service is not None else None)
        micro = {} if service is None else {"service": service.name, "version": service.version}
        return Facts(
            "nats",
            codec=self._request_codec,
            reply_codec=self._response_codec,
            client=self._nc,
            queue=queue,
            micro=micro,
        )

    async def start(
        self,
        subject: str,
        handle: Callable[[Req], Awaitable[Resp]],
        *,
        endpoint: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ResponderSubscription[Req, Resp]:
        """Start serving ``subject``; return once the server has the subscription.

        With a micro service, the subscription is its endpoint named ``endpoint``
        (default: the subject with ``-`` for the characters a name cannot have:
        ``pricing.quote`` is ``pricing-quote``), with ``metadata``; it is listed, and
        the service answers discovery, by the time this returns.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            ValueError: The endpoint name is invalid or taken in the service, the
                metadata does not map str to str, or either is given without a service.
            SubscribeError: The responder or its service is closed, or the
                connection failed.
        """
        service = self._service
        if service is None and (endpoint is not None or metadata is not None):
            raise ValueError(
                f"endpoint= and metadata= need a Responder with service= (serving {subject!r})"
            )

        async def open_subscription() -> ResponderSubscription[Req, Resp]:
            registered = None
            if service is not None:
                queue = self._options.queue or DEFAULT_QUEUE_GROUP
                registered = service._reserve(endpoint, subject, queue, metadata)
            subscription = ResponderSubscription(
                self._nc,
                self._request_codec,
                self._response_codec,
                subject,
                handle,
                self._options,
                self._tel,
                registered,
            )
            try:
                await subscription._begin()
            except BaseException:
                if registered is not None:
                    registered.leave()  # (a failed start has left already, mostly)
                raise
            if registered is not None:
                try:
                    await registered.join()
                except BaseException:
                    await subscription.stop()
                    raise
            return subscription

        return await self._start_subscription(subject, open_subscription)

    async def serve(
        self,
        subject: str,
        handle: Callable[[Req], Awaitable[Resp]],
        *,
        endpoint: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """Serve ``subject`` until cancelled or the responder is closed, then drain.

        ``endpoint`` and ``metadata`` are as for :meth:`start`.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            ValueError: As for :meth:`start`.
            SubscribeError: The subscription could not start, or failed.
        """
        await self._run(await self.start(subject, handle, endpoint=endpoint, metadata=metadata))
