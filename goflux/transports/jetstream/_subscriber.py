"""Consuming from JetStream: subscribers binding or creating pull consumers."""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar, Unpack

from nats.js import JetStreamContext

from goflux._codecs import Codec
from goflux._compose.streams import Streaming
from goflux._errors import RequestTimeout, SubscribeError
from goflux._facts import Facts
from goflux._interfaces import Handler
from goflux._lifecycle import SubscriberLifecycle
from goflux._message import Message
from goflux._otel.telemetry import Telemetry
from goflux.transports._natspy import connection, keep_header_lines
from goflux.transports.jetstream._consumers import bind_durable, create_ephemeral
from goflux.transports.jetstream._fetch import Fetcher, check_fetch
from goflux.transports.jetstream._options import (
    DEFAULT_FETCH_EXPIRES,
    SubscriberOptions,
    SubscriberSettings,
)
from goflux.transports.jetstream._subscription import JetStreamSubscription, started

__all__ = ("Subscriber",)

T = TypeVar("T")


class Subscriber(SubscriberLifecycle["JetStreamSubscription[T]"], Streaming[T], Generic[T]):
    """Consumes a JetStream stream with typed handlers, through a pull consumer.

    Without ``consumer``, each :meth:`start` creates an ephemeral consumer filtered on
    its subject (deleted when the subscription stops). With ``consumer``, it binds to
    that existing durable consumer (see :func:`ensure_consumer`), whose filter must lie
    within the subscribed subject.

    The subscription pulls continuously with its own pull requests (``batch``,
    ``expires``, ``idle_heartbeat``), never holding more than ``max_in_flight``
    unsettled messages; ``concurrency`` handlers run at a time. By default a handler
    that returns acks its message and one that raises naks it with a delay that grows
    with its delivery count (``redelivery_backoff``; retry middleware can choose
    other delays, attempt limits and dead letters); with ``manual_ack`` the handler
    settles. A handler that raises :class:`~goflux.NonRetryable` (or an error it
    caused) has its message dead-lettered (if ``dead_letter`` is given) and
    terminated: retrying cannot change the outcome. An undecodable payload is
    terminated and counted, never redelivered (after a copy is published to
    ``dead_letter``, if given). Handlers
    running longer than half the consumer's ``ack_wait`` get ``in_progress`` signals so
    the server does not redeliver them meanwhile.

    A message stream (:meth:`stream`) runs no handler per message: its subscription
    hands each message to the stream's buffer, in order, and holds it until the
    stream's consumer settles it; up to ``max_in_flight`` messages are out at a time,
    buffered or handed out, each kept alive past ``ack_wait`` like a running handler's.

    With ``confirm_acks``, every ack waits for the server's confirmation that it was
    applied (a "double ack"): the auto-ack does not hold up the worker (it takes the
    next message while confirmations are in flight), but the message keeps its
    in-flight room until it is confirmed; a manual ``await msg.ack()`` returns once
    confirmed. An ack with no reply within ``confirm_timeout`` is sent again, three
    times in all; then it is given up: ``msg.ack()`` raises
    :class:`~goflux.AckNotConfirmed`, and an auto-ack is logged as an error, counted
    (``JetStreamSubscription.unconfirmed``, and the settlements metric with outcome
    ``ack_unconfirmed``), and the subscription goes on. ``msg.ack(confirm=True)``
    confirms one ack without the option.

    A durable ``consumer`` with priority groups (see :func:`ensure_consumer`) needs a
    ``priority_group`` to pull in. With policy ``"pinned_client"`` one subscription at
    a time gets the messages (the server pins it; the others wait as standbys); when
    it stops gracefully it gives up its pin and a standby takes over at once. With
    ``"overflow"``, ``min_pending`` / ``min_ack_pending`` make a subscription get
    messages only while the consumer's backlog / unacknowledged count is at least
    that (one without them gets every message it can take). With ``"prioritized"``,
    subscriptions with a lower ``priority`` are served first.

    Args:
        js: A JetStream context of a connected nats-py client (the caller owns it).
        codec: Decodes the payloads.
        stream: The stream to consume.
        consumer: A durable consumer to bind to; None creates ephemeral ones.
        telemetry: Tracing and metrics; default: OpenTelemetry globals.
        **settings: :class:`SubscriberSettings`, each optional:

            - ``manual_ack``: Leave settlement to the handler (default False).
            - ``max_in_flight``: Most messages received and not yet settled (default
              512). Ephemeral consumers get it as their ``max_ack_pending`` too; give
              a durable the same ``max_ack_pending`` for a hard server-side bound
              (the server may otherwise count one more for a moment while an ack and
              the next pull cross). Within it, the pulls keep at most 4 MiB of
              messages and about a second of the handlers' work outstanding.
            - ``concurrency``: Handlers running at a time (default 1; messages beyond
              one are processed in parallel, so out of order).
            - ``batch``: Most messages asked for per pull request (default:
              ``max_in_flight``).
            - ``expires``: Seconds a pull request stays open at the server (default 30).
            - ``idle_heartbeat``: Seconds between server heartbeats on an idle pull
              request (default: ``min(expires / 2, 5)``); two missed ones trigger a
              new pull.
            - ``keep_alive``: Send ``in_progress`` for handlers outliving half the
              ack_wait (default True).
            - ``drain_timeout``: Seconds a drain may take to finish what was received
              (default 30).
            - ``consumer_config``: Settings for the ephemeral consumers (nats-py
              ``ConsumerConfig`` fields, such as ``deliver_policy`` or ``ack_wait``).
            - ``dead_letter``: Where undecodable payloads and messages whose
              handler raised :class:`~goflux.NonRetryable` are published (bytes
              unchanged, with failure headers) before they are terminated, and
              under ``goflux run --workers`` messages that crashed their workers
              (:class:`~goflux.PoisonMessage`); see
              :class:`goflux.middleware.DeadLetter`. Other handler failures are
              dead-lettered by :func:`goflux.middleware.retry_ack`.
            - ``redelivery_backoff``: How long a message whose handler raised waits
              before it is redelivered, by its delivery count: a
              :class:`goflux.middleware.Backoff` or a list of seconds (default
              :data:`goflux.middleware.REDELIVERY_BACKOFF`: 0.5 s doubling per
              delivery, at most 60 s).
              None redelivers at once (its error lines are then logged for deliveries
              1, 2, 4, 8, ... only, each with its count).
            - ``confirm_acks``: Confirm every ack with the server (see above; default
              False).
            - ``confirm_timeout``: Seconds to wait for an ack's confirmation before
              sending it again (default 2).
            - ``ordered``: Replay in stream order without acknowledgements, through an
              ephemeral consumer that is recreated after the last message seen
              whenever a gap, a missed heartbeat or a reconnect is detected (no
              durable needed; concurrency 1; settling is a no-op; default False).
            - ``priority_group``: The priority group of the bound ``consumer`` to pull
              in.
            - ``min_pending``: Pull only while the consumer has at least this many
              messages pending (``overflow`` policy).
            - ``min_ack_pending``: Pull only while at least this many messages of the
              consumer await acknowledgement (``overflow`` policy).
            - ``priority``: 0 (served first) to 9 (``prioritized`` policy).

    Raises:
        ValueError: A setting is out of range, or priority settings without a bound
            durable ``consumer`` (or thresholds without a ``priority_group``).
        TypeError: An unknown setting.
    """

    def __init__(
        self,
        js: JetStreamContext,
        codec: Codec[T],
        *,
        stream: str,
        consumer: str | None = None,
        telemetry: Telemetry | None = None,
        **settings: Unpack[SubscriberSettings],
    ) -> None:
        self._options = options = SubscriberOptions(**settings)
        if options.priority_group is not None and consumer is None:
            raise ValueError(
                "priority_group needs a bound durable consumer (consumer=...) with that "
                "group; ephemeral and ordered consumers have none"
            )
        if consumer is not None and (options.consumer_config or options.ordered):
            raise ValueError(
                "consumer_config and ordered apply to consumers the subscriber creates, "
                "not to a bound one"
            )
        self._js = js
        keep_header_lines(connection(js))  # Message.wire_headers keeps repeated lines
        self._codec = codec
        self._stream = stream
        self._consumer = consumer
        self._tel = Telemetry.or_default(telemetry)
        self._fetcher: Fetcher[T] | None = None
        self._binding: asyncio.Lock | None = None
        super().__init__()

    @property
    def codec(self) -> Codec[T]:
        """The codec that decodes the payloads."""
        return self._codec

    @property
    def connected(self) -> bool:
        """True while the NATS connection is up (False while it reconnects or is closed)."""
        return bool(connection(self._js).is_connected)

    def _facts(self) -> Facts:
        options = self._options
        described: dict[str, object] = {"stream": self._stream}
        if self._consumer is not None:
            described.update(consumer=self._consumer, durable=True)
        else:
            config = options.consumer_config
            described["durable"] = False
            described["ackPolicy"] = (
                "none" if options.ordered else config.get("ack_policy", "explicit")
            )
            for key, name in (("deliver_policy", "deliverPolicy"), ("ack_wait", "ackWait")):
                if key in config:
                    described[name] = config[key]
        described["ack"] = "manual" if options.manual_ack else "auto"
        if options.ordered:
            described["ordered"] = True
        if options.priority_group is not None:
            described["priorityGroup"] = options.priority_group
        described["maxInFlight"] = options.max_in_flight
        return Facts(
            "jetstream", codec=self._codec, client=connection(self._js), jetstream=described
        )

    async def start(self, subject: str, handler: Handler[T]) -> JetStreamSubscription[T]:
        """Start consuming ``subject``; return once the first pull request is at the server.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: The subscriber is closed, the stream or consumer does not
                exist, the consumer does not fit (its filter, or its priority groups:
                none named ``priority_group``, or some but no ``priority_group``
                given), or the connection failed.
            FeatureUnsupported: ``priority_group`` on a server older than 2.11
                (``priority`` older than 2.12).
            JetStreamUnavailable: The account has no JetStream.
        """
        options = self._options

        async def open_subscription() -> JetStreamSubscription[T]:
            if self._consumer is None:
                binding = await create_ephemeral(self._js, self._stream, subject, options)
            else:
                binding = await bind_durable(
                    self._js, self._stream, self._consumer, subject, options
                )
            subscription = JetStreamSubscription(
                self._js,
                self._codec,
                handler,
                pattern=subject,
                binding=binding,
                options=options,
                telemetry=self._tel,
            )
            return await started(subscription)

        return await self._start_subscription(subject, open_subscription)

    async def fetch(
        self,
        max_messages: int,
        *,
        expires: float = DEFAULT_FETCH_EXPIRES,
        no_wait: bool = False,
        max_bytes: int | None = None,
    ) -> list[Message[T]]:
        """Read up to ``max_messages`` from the durable consumer, once (a batch or cron job).

        One pull request: it returns when ``max_messages`` arrived, or when the
        request expires after ``expires`` seconds with what arrived by then (maybe
        fewer, maybe none), or at once with what is there when ``no_wait``. The
        messages are typed and unsettled: settle each (``ack``, ``nak``, ``term``;
        ``in_progress`` for long work), or the server redelivers it after the
        consumer's ``ack_wait``. An undecodable message is terminated (dead-lettered
        first, if configured) and left out. Each message gets a CONSUMER "receive"
        span linked to its producer.

        Args:
            max_messages: Most messages to return.
            expires: Seconds the pull request waits for messages at the server.
            no_wait: Return at once with what the consumer has now.
            max_bytes: Most payload bytes to return (the server stops before a
                message that would exceed it).

        Raises:
            ValueError: An argument is out of range.
            SubscribeError: The subscriber has no durable ``consumer`` (or is
                ordered), is closed, the consumer does not exist or refuses the
                request (a batch over its ``max_batch``, an ``expires`` over its
                ``max_expires``), or the connection is closed.
            PermissionDenied: The server refused the pull request or its inbox.
        """
        check_fetch(max_messages, expires, max_bytes)
        fetcher = await self._fetching("fetch")
        return await fetcher.fetch(
            max_messages, expires=expires, no_wait=no_wait, max_bytes=max_bytes
        )

    async def next(self, *, timeout: float = DEFAULT_FETCH_EXPIRES) -> Message[T]:
        """Read the next message from the durable consumer; wait up to ``timeout`` seconds.

        Like :meth:`fetch` with one message; undecodable ones are skipped while the
        time lasts.

        Raises:
            RequestTimeout: No message came within ``timeout``.
            ValueError: ``timeout`` is not positive.
            SubscribeError: As for :meth:`fetch`.
            PermissionDenied: As for :meth:`fetch`.
        """
        check_fetch(1, timeout, None)
        fetcher = await self._fetching("next")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) >= 0.001:
            messages = await fetcher.fetch(1, expires=left, no_wait=False, max_bytes=None)
            if messages:
                return messages[0]
        raise RequestTimeout(
            f"no message from consumer {fetcher.consumer!r} on stream {fetcher.stream!r} "
            f"within {timeout}s",
            subject=fetcher.next_subject,
            timeout=timeout,
        )

    async def _fetching(self, what: str) -> Fetcher[T]:
        """The fetcher of the durable consumer, checked against the server once."""
        if self._consumer is None or self._options.ordered:
            raise SubscribeError(
                f"{what}() reads from a durable consumer: create one with "
                "ensure_consumer() and pass consumer= (an ordered or ephemeral subscriber "
                "has no consumer to read from between calls)"
            )
        self._refuse_if_closed(f"{what}() on stream {self._stream!r}")
        if self._fetcher is not None:
            return self._fetcher
        if self._binding is None:
            self._binding = asyncio.Lock()
        async with self._binding:
            if self._fetcher is None:
                binding = await bind_durable(
                    self._js, self._stream, self._consumer, ">", self._options
                )
                self._fetcher = Fetcher(
                    self._js,
                    self._codec,
                    stream=self._stream,
                    consumer=self._consumer,
                    next_subject=binding.consumer.next_subject,
                    options=self._options,
                    telemetry=self._tel,
                    priority=binding.priority,
                    destination=",".join(binding.filters),
                )
        return self._fetcher

    async def close(self) -> None:
        """Stop every subscription (draining it), and refuse new ones and reads.

        Confirmed acks of fetched messages still in flight are waited for.
        """
        await super().close()
        if self._fetcher is not None:
            await self._fetcher.close()

    async def subscribe(self, subject: str, handler: Handler[T]) -> None:
        """Consume until cancelled or the subscriber is closed, then drain.

        Raises:
            InvalidSubject: ``subject`` is not a valid pattern.
            SubscribeError: The subscription could not start, or failed.
        """
        await self._run(await self.start(subject, handler))
