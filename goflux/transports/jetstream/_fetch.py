"""One-shot reads from a durable consumer: ``fetch`` (up to N messages) and ``next``.

Each read is one pull request on an inbox of its own: the server delivers up to the
batch, then ends the request with a status (404 nothing there with ``no_wait``, 408
expired, 409 "Message Size Exceeds MaxBytes"), or the batch fills. What arrived is
returned decoded and unsettled: the caller acks, naks, terms or sends in-progress. An
undecodable message is terminated (dead-lettered first, if configured) and left out.
Each returned message gets a CONSUMER "receive" span linked to its producer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable
from typing import Final, Generic, TypeVar

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

from goflux._codecs import Codec, as_decode_error
from goflux._errors import SettlementError, SubscribeError
from goflux._message import Message, received
from goflux._otel.scopes import NULL_SCOPE, ProcessScopes
from goflux._otel.semconv import (
    MESSAGING_CONSUMER_GROUP_NAME,
    MESSAGING_NATS_DELIVERY_COUNT,
    MESSAGING_NATS_STREAM,
    MESSAGING_NATS_STREAM_SEQUENCE,
    MESSAGING_SYSTEM,
)
from goflux._otel.telemetry import Telemetry
from goflux._wire import read_headers
from goflux.transports._natspy import connection
from goflux.transports._refusals import refusals
from goflux.transports.jetstream._acker import JetStreamAcker, Ledger, hand_back
from goflux.transports.jetstream._api import api_guard
from goflux.transports.jetstream._confirm import Confirmations
from goflux.transports.jetstream._options import SubscriberOptions
from goflux.transports.jetstream._priority import Priority
from goflux.transports.jetstream._status import (
    BAD_REQUEST,
    CONFLICT,
    HEARTBEAT,
    NO_RESPONDERS,
    PIN_MISMATCH,
)
from goflux.transports.jetstream._system import SYSTEM
from goflux.transports.jetstream._undecodable import reject

__all__ = ("Fetcher", "check_fetch")

T = TypeVar("T")

logger = logging.getLogger("goflux.transports.jetstream")

_NS: Final = 1_000_000_000
# Beyond ``expires``, how long to wait for the server's end-of-request status before
# giving up on it (it may be lost with a reconnect).
_GRACE: Final = 2.0
# Status descriptions of a 409 that mean the fetch cannot work as asked.
_REFUSED: Final = ("Exceeded MaxRequest", "Exceeded MaxWaiting", "Consumer Deleted")


def check_fetch(max_messages: int, expires: float, max_bytes: int | None) -> None:
    """Check a fetch's arguments.

    Raises:
        ValueError: ``max_messages`` < 1, ``expires`` not positive, ``max_bytes`` < 1.
    """
    if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
        raise ValueError(f"max_messages must be an int >= 1, got {max_messages!r}")
    if not 0.001 <= expires < 1e9:  # also refuses NaN and inf; 0 ns would mean "never"
        raise ValueError(f"expires must be from 0.001 to 1e9 seconds, got {expires}")
    if max_bytes is not None and max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")


class Fetcher(Generic[T]):
    """Reads batches from one durable consumer on request.

    Args:
        js: The JetStream context.
        codec: Decodes the payloads.
        stream: The consumer's stream.
        consumer: The durable consumer's name.
        next_subject: Where its pull requests go.
        options: The subscriber's options (dead letter, confirmed acks).
        telemetry: Tracing and metrics.
        priority: The priority group to pull in (its pin is kept between reads).
        destination: The ``messaging.destination.name`` of the fetched messages'
            settlement counts: what the consumer delivers (its filter subject, or its
            filter subjects joined by commas; its stream's subjects if it has none).
    """

    def __init__(
        self,
        js: JetStreamContext,
        codec: Codec[T],
        *,
        stream: str,
        consumer: str,
        next_subject: str,
        options: SubscriberOptions,
        telemetry: Telemetry,
        priority: Priority | None = None,
        destination: str,
    ) -> None:
        self._js = js
        self._priority = priority
        self._nc = connection(js)
        self._codec = codec
        self.stream = stream
        self.consumer = consumer
        self.next_subject = next_subject
        self._options = options
        self._tel = telemetry
        self._confirmations = Confirmations(
            self._nc, timeout=options.confirm_timeout, where=consumer
        )
        attributes = {MESSAGING_SYSTEM: SYSTEM, MESSAGING_CONSUMER_GROUP_NAME: consumer}
        self._ledger = Ledger(
            telemetry,
            attributes,
            _nothing,  # no pull engine: nothing to give room back to
            self._confirmations,
            confirm_all=options.confirm_acks,
            destination=destination,
        )
        self._scopes = ProcessScopes(
            telemetry, SYSTEM, consumer_group=consumer, operation="receive"
        )
        self.undecodable = 0

    async def fetch(
        self, max_messages: int, *, expires: float, no_wait: bool, max_bytes: int | None
    ) -> list[Message[T]]:
        """Pull up to ``max_messages``; return what arrived by ``expires`` (maybe none).

        Raises:
            PermissionDenied: The server refused the pull request or its inbox.
            SubscribeError: The consumer refuses the request (too big, too long, too
                many waiting), was deleted, or JetStream did not answer; the
                connection is closed.
        """
        nc = self._nc
        where = f"fetching from consumer {self.consumer!r} on stream {self.stream!r}"
        request = self._request(max_messages, expires, no_wait, max_bytes)
        inbox = nc.new_inbox()
        taken: list[Msg] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (0 if no_wait else expires) + _GRACE
        sub: Subscription | None = None
        try:
            with (
                api_guard(self._js, where, f"CONSUMER.MSG.NEXT.{self.stream}.{self.consumer}"),
                refusals(nc).guard("subscribe", inbox, f"{where}: its inbox"),
            ):
                sub = await nc.subscribe(inbox)
                await nc.publish(self.next_subject, request, reply=inbox)
                await self._receive(sub, taken, max_messages, deadline, where)
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError) as exc:
            await self._hand_back(taken)
            raise SubscribeError(f"{where}: the connection is closed") from exc
        except BaseException:
            await self._hand_back(taken)  # not handed to the caller: redeliver at once
            raise
        finally:
            if sub is not None:
                with contextlib.suppress(nats.errors.Error):
                    await sub.unsubscribe()
        return await self._messages(taken, loop.time())

    def _request(
        self, max_messages: int, expires: float, no_wait: bool, max_bytes: int | None
    ) -> bytes:
        """The pull request's JSON."""
        request: dict[str, object] = {"batch": max_messages}
        if no_wait:
            request["no_wait"] = True
        else:
            request["expires"] = int(expires * _NS)
        if max_bytes is not None:
            request["max_bytes"] = max_bytes
        if self._priority is not None:
            request.update(self._priority.fields())
        return json.dumps(request).encode()

    async def _receive(
        self, sub: Subscription, taken: list[Msg], max_messages: int, deadline: float, where: str
    ) -> None:
        """Collect deliveries into ``taken`` until the request ends, fills, or ``deadline``."""
        loop = asyncio.get_running_loop()
        while len(taken) < max_messages:
            left = deadline - loop.time()
            if left <= 0:
                logger.info("%s: the server did not end the request in time", where)
                return
            try:
                msg = await sub.next_msg(timeout=left)
            except nats.errors.TimeoutError:
                return
            if msg.reply:
                taken.append(msg)
                if self._priority is not None:
                    self._priority.observe(msg.headers)
            elif self._ended(msg, where):
                if not taken and _too_big(msg):
                    raise SubscribeError(
                        f"{where}: the next message is larger than max_bytes; nothing can "
                        "be fetched with that limit"
                    )
                return

    def _ended(self, msg: Msg, where: str) -> bool:
        """Whether the status ``msg`` ends the request (raise if it fails it)."""
        headers = msg.headers or {}
        status = headers.get("Status")
        if status == HEARTBEAT:  # a heartbeat (not asked for)
            return False
        description = str(headers.get("Description", ""))
        if status == NO_RESPONDERS:
            raise SubscribeError(
                f"{where}: nothing answered the pull request (JetStream is unavailable, "
                "or the consumer is gone)"
            )
        if (status == CONFLICT and description.startswith(_REFUSED)) or status == BAD_REQUEST:
            raise SubscribeError(f"{where}: the server refused it: {description}")
        if status == PIN_MISMATCH and self._priority is not None:
            # Another client holds the pin now: the next read asks without ours.
            self._priority.unpinned()
        return True  # 404 no messages, 408 expired, 409 max bytes, leadership change

    async def _messages(self, taken: list[Msg], arrival: float) -> list[Message[T]]:
        """Decode what arrived; an undecodable one is rejected and left out."""
        out: list[Message[T]] = []
        tracing = self._tel.active
        for msg in taken:
            raw, data = msg.headers, msg.data
            acker = JetStreamAcker(
                self._nc, msg.reply, self._ledger, arrival, None, msg.subject, data, raw
            )
            headers, message_id = read_headers(raw) if raw else (None, None)
            scope = (
                self._scopes.open(
                    msg.subject,
                    raw,
                    message_id=message_id,
                    body_size=len(data),
                    attributes={
                        MESSAGING_NATS_STREAM: self.stream,
                        MESSAGING_NATS_STREAM_SEQUENCE: acker.stream_sequence,
                        MESSAGING_NATS_DELIVERY_COUNT: acker.num_delivered,
                    },
                )
                if tracing
                else NULL_SCOPE
            )
            try:
                with scope:
                    payload = self._codec.decode(data)
            except Exception as caught:  # noqa: BLE001 - any codec failure: undecodable
                exc = as_decode_error(caught, self._codec, data)
                self.undecodable += 1
                letter = received(msg.subject, data, headers, message_id, data, acker, raw)
                await reject(
                    letter,
                    acker,
                    exc,
                    dead_letter=self._options.dead_letter,
                    acknowledged=True,
                    settle=_settle,
                )
                continue
            out.append(received(msg.subject, payload, headers, message_id, data, acker, raw))
        return out

    async def _hand_back(self, taken: list[Msg]) -> None:
        """Nak messages that were received but will not reach the caller (counted as naks).

        A nak that cannot be sent is counted as a nak that failed; the server
        redelivers that message after ``ack_wait``.
        """
        ledger = self._ledger
        for msg in taken:
            if await hand_back(self._nc, msg.reply):
                ledger.record("nak")
            else:
                ledger.record_failed("nak")

    async def close(self) -> None:
        """Wait for confirmations still in flight, then stop their inbox."""
        await self._confirmations.settled()
        await self._confirmations.close()


def _too_big(msg: Msg) -> bool:
    """Whether ``msg`` ended the request because the next message exceeds max_bytes."""
    headers = msg.headers or {}
    return headers.get("Status") == CONFLICT and "MaxBytes" in str(headers.get("Description", ""))


def _nothing(count: int) -> None:
    """Nothing to release: a fetched message holds no room in a pull engine."""


async def _settle(acker: JetStreamAcker, sending: Awaitable[None]) -> None:
    """Send a settlement; if that fails, the server redelivers after ack_wait."""
    try:
        await sending
    except SettlementError as exc:
        logger.warning(
            "could not settle message %s (%s); the server redelivers it after ack_wait",
            acker.stream_sequence,
            exc,
        )
