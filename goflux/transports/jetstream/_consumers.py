"""The consumers a pull engine reads from: an acknowledged one, or ordered mode's.

The engine (:mod:`._pull`) asks its consumer two things: whether to take a delivery
(:meth:`admit`), and what to do when its pull requests are lost, JetStream is
unavailable, or the consumer was deleted (:meth:`recover`). An
:class:`AcknowledgedConsumer` takes everything and fails the subscription when it is
gone; an :class:`OrderedConsumer` takes only the next delivery in order, and on any
trouble replaces itself with a new consumer that starts after the last message seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from typing import Any, Literal, Protocol, TypeAlias

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, ConsumerInfo
from nats.js.errors import APIError, NotFoundError
from nats.nuid import NUID

from goflux._errors import PermissionDenied, SubscribeError
from goflux.transports._natspy import api_prefix
from goflux.transports.jetstream._api import api_guard
from goflux.transports.jetstream._delivery import ack_tokens
from goflux.transports.jetstream._options import EPHEMERAL_INACTIVE_THRESHOLD, SubscriberOptions

__all__ = (
    "AcknowledgedConsumer",
    "Admission",
    "Cause",
    "OrderedConsumer",
    "PulledConsumer",
    "Recovery",
    "create_consumer",
    "ordered_consumer_config",
)

logger = logging.getLogger("goflux.transports.jetstream")

# The server's error code when the stream itself is gone (else the consumer is).
_STREAM_NOT_FOUND = 10059
_NAMES = NUID()

Cause: TypeAlias = Literal["lost", "unavailable", "deleted"]
"""Why the engine asks for recovery: its pull requests were lost (reconnect, silence),
JetStream answered 503, or the server said the consumer was deleted."""


class Admission(enum.Enum):
    """What the engine does with one delivery."""

    TAKE = "take"
    SKIP = "skip"  # not for us (a late delivery of a replaced consumer): drop it
    GAP = "gap"  # a delivery is missing: drop this one and recover


class Recovery(enum.Enum):
    """What the engine does after a recovery."""

    PULL = "pull"  # ask for messages again now
    WAIT = "wait"  # JetStream is unavailable: the watchdog asks again later


class PulledConsumer(Protocol):
    """The consumer a pull engine reads from."""

    @property
    def name(self) -> str:
        """The consumer's current name."""

    @property
    def stream(self) -> str:
        """The stream it reads."""

    @property
    def next_subject(self) -> str:
        """The ``CONSUMER.MSG.NEXT`` subject pull requests go to."""

    @property
    def acknowledges(self) -> bool:
        """Whether its deliveries are acknowledged (received ones are handed back)."""

    @property
    def selective(self) -> bool:
        """Whether it may refuse a delivery: the engine asks :meth:`admit` only then."""

    def admit(self, msg: Msg) -> Admission:
        """Whether to take ``msg`` (a delivery, not a status message)."""

    async def recover(self, cause: Cause, why: str) -> Recovery | SubscribeError:
        """Recover after ``cause``; a :class:`SubscribeError` ends the subscription."""

    async def remove(self) -> None:
        """Delete the consumer at the server if the subscription created it."""


def _next_subject(js: JetStreamContext, stream: str, name: str) -> str:
    return f"{api_prefix(js)}.CONSUMER.MSG.NEXT.{stream}.{name}"


class AcknowledgedConsumer:
    """A consumer with explicit acknowledgement: a bound durable or a created ephemeral.

    Args:
        js: The JetStream context.
        stream: The stream it reads.
        name: The consumer's name.
        ephemeral: The subscription created it, and deletes it when it stops.
    """

    __slots__ = ("_js", "ephemeral", "name", "next_subject", "stream")

    acknowledges = True
    selective = False

    def __init__(self, js: JetStreamContext, stream: str, name: str, *, ephemeral: bool) -> None:
        self._js = js
        self.stream = stream
        self.name = name
        self.ephemeral = ephemeral
        self.next_subject = _next_subject(js, stream, name)

    def admit(self, msg: Msg) -> Admission:
        """Take every delivery."""
        return Admission.TAKE

    async def recover(self, cause: Cause, why: str) -> Recovery | SubscribeError:
        """Pull again after lost requests; after a 503, fail if the consumer is gone.

        A deleted consumer cannot come back by itself: the subscription ends.
        """
        if cause == "lost":
            return Recovery.PULL
        if cause == "deleted":
            return SubscribeError(f"consumer {self.name!r} was deleted")
        try:
            await self._js.consumer_info(self.stream, self.name)
        except NotFoundError as exc:
            what = "stream" if exc.err_code == _STREAM_NOT_FOUND else "consumer"
            return SubscribeError(f"{what} of {self.name!r} on {self.stream!r} is gone")
        except (nats.errors.Error, APIError, TimeoutError):
            pass  # JetStream unavailable for now
        return Recovery.WAIT

    async def remove(self) -> None:
        """Delete an ephemeral consumer (if this fails, the server removes it later)."""
        if self.ephemeral:
            with contextlib.suppress(nats.errors.Error, APIError, TimeoutError):
                await self._js.delete_consumer(self.stream, self.name)


async def create_consumer(
    js: JetStreamContext, stream: str, config: ConsumerConfig
) -> ConsumerInfo:
    """Create a consumer the subscription owns, named here so that it can be cleaned up.

    A consumer the server created must not outlive a start that did not finish: if
    the caller is cancelled while the request is out, the answer is still awaited
    and a created consumer deleted; if the answer times out, the consumer is deleted
    by its name, which the client chooses for that reason (unless ``config`` has
    one). Otherwise it would linger until its inactive threshold.

    Raises:
        PermissionDenied: The server refused the request (at once, not after a timeout).
        NotFoundError: The stream does not exist.
        APIError: The server refused the consumer.
        nats.errors.Error: The connection failed, or no answer came in time.
    """
    if not config.name and not config.durable_name:
        config.name = _NAMES.next().decode()
    name = config.name or config.durable_name or ""
    creating = asyncio.ensure_future(js.add_consumer(stream, config))
    refused = api_guard(
        js,
        f"creating consumer {name!r} on stream {stream!r}",
        f"CONSUMER.CREATE.{stream}.{name}",
        f"CONSUMER.DURABLE.CREATE.{stream}.{name}",
    )
    try:
        with refused:
            return await asyncio.shield(creating)
    except PermissionDenied:
        creating.cancel()  # refused: no answer comes, and nothing was created
        raise
    except asyncio.CancelledError:
        with contextlib.suppress(nats.errors.Error, APIError, TimeoutError):
            await creating  # the request is out: learn whether it was created
            await js.delete_consumer(stream, name)
        raise
    except TimeoutError:
        with contextlib.suppress(nats.errors.Error, APIError, TimeoutError):
            await js.delete_consumer(stream, name)
        raise


def ordered_consumer_config(
    subject: str, options: SubscriberOptions, start_sequence: int | None
) -> ConsumerConfig:
    """The AckNone, in-memory consumer of ordered mode, starting at ``start_sequence``.

    Raises:
        TypeError: ``options.consumer_config`` has a field ``ConsumerConfig`` lacks.
    """
    config: dict[str, Any] = {
        **options.consumer_config,
        "ack_policy": "none",
        "max_deliver": 1,
        "mem_storage": True,
        "num_replicas": 1,
    }
    config.setdefault("inactive_threshold", EPHEMERAL_INACTIVE_THRESHOLD)
    if not config.get("filter_subject") and not config.get("filter_subjects"):
        config["filter_subject"] = subject
    if start_sequence is not None:
        config["deliver_policy"] = "by_start_sequence"
        config["opt_start_seq"] = start_sequence
        config.pop("opt_start_time", None)
    return ConsumerConfig(**config)


class OrderedConsumer:
    """Ordered mode: an AckNone consumer replaced whenever a delivery goes missing.

    It takes only the next consumer sequence of the current consumer. On a gap, lost
    pull requests, a 503 or a deletion, it deletes itself and creates a new consumer
    that starts after the last stream sequence taken (or where the first one started).

    Args:
        js: The JetStream context.
        stream: The stream it reads.
        info: The first consumer, as created.
        subject: The subscribed subject (the filter of new consumers).
        options: The subscriber's options (consumer config for replacements).
    """

    __slots__ = (
        "_consumer_sequence",
        "_js",
        "_options",
        "_recreating",
        "_start_floor",
        "_stream_sequence",
        "_subject",
        "name",
        "next_subject",
        "pending_at_start",
        "stream",
    )

    acknowledges = False
    selective = True

    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        info: ConsumerInfo,
        *,
        subject: str,
        options: SubscriberOptions,
    ) -> None:
        self._js = js
        self.stream = stream
        self.name: str = info.name
        self.next_subject = _next_subject(js, stream, info.name)
        self._subject = subject
        self._options = options
        # The last sequences taken, and where the first consumer began.
        self._consumer_sequence = 0
        self._stream_sequence = 0
        self._start_floor = info.delivered.stream_seq if info.delivered is not None else 0
        self.pending_at_start = info.num_pending or 0  # what the first consumer had to deliver
        self._recreating = False

    def admit(self, msg: Msg) -> Admission:
        """Take the next delivery of the current consumer only."""
        if self._recreating:
            return Admission.SKIP
        try:
            tokens, offset = ack_tokens(msg.reply)
        except ValueError:
            return Admission.SKIP
        if tokens[offset + 1] != self.name:
            return Admission.SKIP  # a late delivery from a replaced consumer
        consumer_sequence = int(tokens[offset + 4])
        if consumer_sequence != self._consumer_sequence + 1:
            logger.info(
                "ordered consumer %r: gap, expected %d, got %d",
                self.name,
                self._consumer_sequence + 1,
                consumer_sequence,
            )
            return Admission.GAP
        self._consumer_sequence = consumer_sequence
        self._stream_sequence = int(tokens[offset + 3])
        return Admission.TAKE

    async def recover(self, cause: Cause, why: str) -> Recovery | SubscribeError:
        """Replace the consumer, resuming after the last message taken.

        A stream that is gone ends the subscription: a new stream of the same name
        has new sequences, so there is nothing to resume after.
        """
        if self._recreating:
            return Recovery.WAIT  # a replacement is under way; it pulls when done
        self._recreating = True
        old = self.name
        try:
            with contextlib.suppress(nats.errors.Error, APIError, TimeoutError):
                await self._js.delete_consumer(self.stream, old)
            seen = self._stream_sequence or self._start_floor
            # Resume right after what was taken, or after where the first consumer
            # stood (1 on an empty stream): its deliver policy again would skip or
            # collapse what was written meanwhile.
            config = ordered_consumer_config(self._subject, self._options, seen + 1)
            try:
                info = await create_consumer(self._js, self.stream, config)
            except PermissionDenied as exc:
                return exc  # waiting cannot help: the subscription ends with it
            except NotFoundError as exc:
                if exc.err_code == _STREAM_NOT_FOUND:  # nothing left to resume from
                    return SubscribeError(f"stream of {old!r} on {self.stream!r} is gone")
                logger.warning("could not recreate ordered consumer (%s); retrying", exc)
                return Recovery.WAIT
            except (nats.errors.Error, APIError, TimeoutError) as exc:
                logger.warning("could not recreate ordered consumer (%s); retrying", exc)
                return Recovery.WAIT  # the watchdog tries again
            self.name = info.name
            self.next_subject = _next_subject(self._js, self.stream, info.name)
            self._consumer_sequence = 0
            logger.info("ordered consumer %r replaced by %r (%s)", old, info.name, why)
            return Recovery.PULL
        finally:
            self._recreating = False

    async def remove(self) -> None:
        """Delete the current consumer (it is ephemeral)."""
        with contextlib.suppress(nats.errors.Error, APIError, TimeoutError):
            await self._js.delete_consumer(self.stream, self.name)
