"""Subscribing on core NATS."""

from __future__ import annotations

import asyncio
import logging
from typing import Generic, TypeVar

from nats.aio.client import Client
from nats.aio.msg import Msg

from goflux._codecs import Codec, as_decode_error
from goflux._compose.streams import Streaming
from goflux._errors import DecodeError
from goflux._facts import Facts
from goflux._interfaces import Handler
from goflux._lifecycle import SubscriberLifecycle
from goflux._message import received
from goflux._otel.scopes import ProcessScopes
from goflux._otel.telemetry import Telemetry
from goflux._subjects import is_wildcard
from goflux._wire import read_headers
from goflux.transports._natspy import keep_header_lines, widen_reads
from goflux.transports.nats._subscription import (
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_PENDING_BYTES,
    DEFAULT_PENDING_MESSAGES,
    CoreSubscription,
    DispatchOptions,
)
from goflux.transports.nats._system import SYSTEM

__all__ = ("NatsSubscription", "Subscriber")

T = TypeVar("T")

logger = logging.getLogger("goflux.transports.nats")


class NatsSubscription(CoreSubscription, Generic[T]):
    """A running core NATS subscription delivering typed messages to a handler.

    Attributes:
        handled: Messages whose handler returned.
        failed: Messages whose handler raised.
        undecodable: Messages that could not be decoded (skipped, handler not called).
    """

    def __init__(
        self,
        nc: Client,
        codec: Codec[T],
        pattern: str,
        handler: Handler[T],
        options: DispatchOptions,
        telemetry: Telemetry,
    ) -> None:
        super().__init__(nc, pattern, self._handle, options, telemetry)
        self._codec = codec
        self._handler = handler
        self._scopes = ProcessScopes(
            telemetry,
            SYSTEM,
            template=pattern if is_wildcard(pattern) else None,
            consumer_group=options.queue,
        )
        self.handled = 0
        self.failed = 0
        self.undecodable = 0

    async def _handle(self, msg: Msg) -> None:
        headers, message_id = read_headers(msg.headers)
        data = msg.data
        try:
            with self._scopes.open(
                msg.subject, msg.headers, message_id=message_id, body_size=len(data)
            ):
                try:
                    payload = self._codec.decode(data)
                except Exception as caught:  # noqa: BLE001 - any codec failure: undecodable
                    self.undecodable += 1
                    error = as_decode_error(caught, self._codec, data)
                    raise error  # noqa: B904 - its cause is set
                await self._handler(
                    received(msg.subject, payload, headers, message_id, data, None, msg.headers)
                )
        except DecodeError as exc:
            logger.error("undecodable message on %r skipped: %s", msg.subject, exc)
        except asyncio.CancelledError:
            self.failed += 1
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the subscription is being stopped (drain deadline)
            logger.error("handler for message on %r was cancelled", msg.subject)
        except Exception as exc:
            self.failed += 1
            logger.exception(
                "handler failed for message on %r: %s: %s", msg.subject, type(exc).__name__, exc
            )
        else:
            self.handled += 1


class Subscriber(SubscriberLifecycle["NatsSubscription[T]"], Streaming[T], Generic[T]):
    """Delivers typed messages from core NATS subjects to handlers.

    Wildcard subscriptions hand each handler the concrete subject. Subscribers with the
    same ``queue`` compete: each message reaches one of them. Each subscription
    buffers at most ``pending_messages`` / ``pending_bytes``; beyond that NATS drops
    messages (a slow consumer), which are counted, logged and recorded as
    ``goflux.consumer.dropped``. Core NATS has no acknowledgement: settling a message
    is a no-op.

    Args:
        nc: A connected nats-py client (the caller owns it).
        codec: Decodes the payloads.
        queue: Queue group name for competing consumers.
        concurrency: Handlers running at a time per subscription (1 keeps order).
        pending_messages: Most messages buffered per subscription.
        pending_bytes: Most bytes buffered per subscription.
        drain_timeout: Seconds a drain waits for handlers.
        telemetry: Tracing and metrics; default: OpenTelemetry globals.

    Raises:
        ValueError: An option is out of range or the queue name is invalid.
    """

    def __init__(
        self,
        nc: Client,
        codec: Codec[T],
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
        keep_header_lines(nc)  # Message.wire_headers keeps repeated lines
        widen_reads(nc)  # large messages in fewer reads (see widen_reads)
        self._codec = codec
        self._tel = Telemetry.or_default(telemetry)
        super().__init__()

    @property
    def codec(self) -> Codec[T]:
        """The codec that decodes the payloads."""
        return self._codec

    @property
    def connected(self) -> bool:
        """True while the NATS connection is up (False while it reconnects or is closed)."""
        return bool(self._nc.is_connected)

    def _facts(self) -> Facts:
        return Facts("nats", codec=self._codec, client=self._nc, queue=self._options.queue)

    async def start(self, subject: str, handler: Handler[T]) -> NatsSubscription[T]:
        """Subscribe; return once the server has the subscription (flushed).

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: The subscriber is closed or the connection failed.
        """

        async def open_subscription() -> NatsSubscription[T]:
            subscription = NatsSubscription(
                self._nc, self._codec, subject, handler, self._options, self._tel
            )
            await subscription._begin()
            return subscription

        return await self._start_subscription(subject, open_subscription)

    async def subscribe(self, subject: str, handler: Handler[T]) -> None:
        """Subscribe and run until cancelled or the subscriber is closed, then drain.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: The subscription could not start, or failed.
        """
        await self._run(await self.start(subject, handler))
