"""The consumer a subscription reads from: how it is created or bound, and its kinds.

A subscription starts by creating its consumer (:func:`create_ephemeral`: an
ephemeral one, or ordered mode's) or by binding to a durable one that exists
(:func:`bind_durable`: it must be a pull consumer whose filter lies within the
subscribed subject). Either gives a :class:`Binding`: the consumer, its ``ack_wait``,
the :class:`PullLimits` its settings allow, and the subscription's place in its
priority group.

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
import json
import logging
import secrets
import string
from typing import Any, Literal, NamedTuple, Protocol, TypeAlias

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, ConsumerInfo
from nats.js.errors import APIError, NotFoundError

from goflux._errors import PermissionDenied, SubscribeError
from goflux._subjects import covers
from goflux.transports._natspy import api_prefix, api_timeout, connection
from goflux.transports.jetstream._acker import ack_tokens
from goflux.transports.jetstream._api import api_error, api_guard, known_refusal
from goflux.transports.jetstream._features import PRIORITIZED, PRIORITY_GROUPS, require
from goflux.transports.jetstream._options import EPHEMERAL_INACTIVE_THRESHOLD, SubscriberOptions
from goflux.transports.jetstream._priority import Priority, check_ungrouped
from goflux.transports.jetstream._status import STREAM_NOT_FOUND

__all__ = (
    "AcknowledgedConsumer",
    "Admission",
    "Binding",
    "Cause",
    "OrderedConsumer",
    "PullLimits",
    "PulledConsumer",
    "Recovery",
    "bind_durable",
    "create_consumer",
    "create_ephemeral",
    "new_consumer_name",
    "ordered_consumer_config",
)
logger = logging.getLogger("goflux.transports.jetstream")

# The names the client gives the consumers it creates: 12 random characters of 62
# (71 bits). Every delivery's reply subject carries the name, and nats-py's parser
# pays per character: a 22-character NUID cost about 800 CPU instructions a message
# more than 8 characters (as long as the names nats-server makes up), a third of a
# 100-byte message's whole goflux overhead. Two live consumers of one stream
# colliding would need about 2**35 of them at once.
_NAME_ALPHABET = string.digits + string.ascii_letters
_NAME_LENGTH = 12


def new_consumer_name() -> str:
    """A fresh random name for a consumer the client creates (12 characters, [0-9A-Za-z])."""
    choice = secrets.choice
    return "".join([choice(_NAME_ALPHABET) for _ in range(_NAME_LENGTH)])


Cause: TypeAlias = Literal["lost", "unavailable", "deleted"]
"""Why the engine asks for recovery: its pull requests were lost (reconnect, silence),
JetStream answered 503, or the server said the consumer was deleted."""


class Admission(enum.Enum):
    """What the engine does with one delivery."""

    TAKE = "take"
    SKIP = "skip"  # not for us (a late delivery of a replaced consumer): drop it
    GAP = "gap"  # a delivery is missing: drop this one and recover


# Read once: an enum member's lookup costs as much as a function call, per delivery.
_TAKE, _SKIP, _GAP = Admission.TAKE, Admission.SKIP, Admission.GAP


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

    def admit(self, reply: str) -> Admission:
        """Whether to take the delivery with this ``$JS.ACK`` ``reply`` subject."""

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

    def admit(self, reply: str) -> Admission:
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
            what = "stream" if exc.err_code == STREAM_NOT_FOUND else "consumer"
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
        config.name = new_consumer_name()
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
        "_delivery_head",
        "_delivery_tail",
        "_js",
        "_options",
        "_recreating",
        "_start_floor",
        "_stream_token",
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
        self._stream_token = "0"  # the stream sequence taken last, as in its reply subject
        self._start_floor = info.delivered.stream_seq if info.delivered is not None else 0
        self.pending_at_start = info.num_pending or 0  # what the first consumer had to deliver
        self._recreating = False
        # How the current consumer's reply subjects start, up to the delivery count of 1
        # (learnt from its first one), and how many tokens follow: the stream and
        # consumer sequences, the timestamp, the pending count, and on newer servers a
        # token more. rsplit by that many dots splits off exactly those.
        self._delivery_head = "\0"
        self._delivery_tail = 4

    def admit(self, reply: str) -> Admission:
        """Take the next delivery of the current consumer only."""
        if self._recreating:
            return _SKIP
        # (rsplit, then the head compared: about 800 CPU instructions fewer than
        # startswith, a slice and a split)
        tokens = reply.rsplit(".", self._delivery_tail)
        if tokens[0] == self._delivery_head:  # the current consumer's: sequences split off
            stream_token, consumer_token = tokens[1], tokens[2]
        else:
            try:
                tokens, offset = ack_tokens(reply)
            except ValueError:
                return _SKIP
            if tokens[offset + 1] != self.name:
                return _SKIP  # a late delivery from a replaced consumer
            stream_token, consumer_token = tokens[offset + 3], tokens[offset + 4]
            if tokens[offset + 2] == "1":
                self._delivery_head = ".".join(tokens[: offset + 3])
                self._delivery_tail = len(tokens) - offset - 3
        consumer_sequence = int(consumer_token)
        if consumer_sequence != self._consumer_sequence + 1:
            logger.info(
                "ordered consumer %r: gap, expected %d, got %d",
                self.name,
                self._consumer_sequence + 1,
                consumer_sequence,
            )
            return _GAP
        self._consumer_sequence = consumer_sequence
        self._stream_token = stream_token  # read as a number only to resume after it
        return _TAKE

    async def recover(self, cause: Cause, why: str) -> Recovery | SubscribeError:
        """Replace the consumer, resuming after the last message taken.

        A stream that is gone ends the subscription: a new stream of the same name
        has new sequences, so there is nothing to resume after.
        """
        if self._recreating:
            return Recovery.WAIT  # a replacement is under way; it pulls when done
        self._recreating = True
        self._delivery_head = "\0"  # no late delivery of the old consumer passes as current
        old = self.name
        try:
            with contextlib.suppress(nats.errors.Error, APIError, TimeoutError):
                await self._js.delete_consumer(self.stream, old)
            token = self._stream_token
            seen = (int(token) if token.isdigit() else 0) or self._start_floor
            # Resume right after what was taken, or after where the first consumer
            # stood (1 on an empty stream): its deliver policy again would skip or
            # collapse what was written meanwhile.
            config = ordered_consumer_config(self._subject, self._options, seen + 1)
            try:
                info = await create_consumer(self._js, self.stream, config)
            except PermissionDenied as exc:
                return exc  # waiting cannot help: the subscription ends with it
            except NotFoundError as exc:
                if exc.err_code == STREAM_NOT_FOUND:  # nothing left to resume from
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


# ---------------------------------------------------------------- binding


def _filters(info: ConsumerInfo) -> list[str]:
    config = info.config
    if config.filter_subjects:
        return list(config.filter_subjects)
    if config.filter_subject:
        return [config.filter_subject]
    return []


class PullLimits:
    """Pull request sizes for one subscription, within what its consumer accepts.

    Args:
        options: The subscriber's options (batch, expires, heartbeat).
        max_batch: The consumer's ``max_batch``, if it sets one.
        max_expires: The consumer's ``max_expires`` in seconds, if it sets one.
        max_ack_pending: The consumer's ``max_ack_pending`` (acknowledged consumers).

    Attributes:
        server_bounded: The server holds the in-flight bound itself: the consumer
            delivers at most ``max_in_flight`` unacknowledged messages (its
            ``max_ack_pending`` is no larger), so a pull may ask beyond the bound and
            the server sends the next message as soon as an ack frees room, without
            waiting for a new pull request. Given only for an ephemeral consumer the
            subscription made, acked message by message (and not confirmed), with
            keep-alive on.
    """

    __slots__ = ("batch", "expires", "heartbeat", "server_bounded")

    def __init__(
        self,
        options: SubscriberOptions,
        *,
        max_batch: int | None = None,
        max_expires: float | None = None,
        max_ack_pending: int | None = None,
    ) -> None:
        self.batch = min(options.batch, max_batch) if max_batch else options.batch
        self.expires = min(options.expires, max_expires) if max_expires else options.expires
        self.heartbeat = min(options.heartbeat, self.expires / 2)
        # Not with confirmed acks: the server frees an ack's room (and may deliver the
        # next message) before its confirmation gives the room back here.
        self.server_bounded = (
            max_ack_pending is not None
            and 0 < max_ack_pending <= options.max_in_flight
            and not options.confirm_acks
        )


class Binding(NamedTuple):
    """The consumer a subscription reads from, and what the subscription needs of it."""

    consumer: PulledConsumer
    ack_wait: float  # seconds the server waits for an acknowledgement
    limits: PullLimits
    priority: Priority | None = None  # its place in the consumer's priority group
    # What the consumer delivers: its filter subjects, else its stream's subjects
    # (known for a durable consumer that was bound; empty otherwise).
    filters: tuple[str, ...] = ()


async def create_ephemeral(
    js: JetStreamContext, stream: str, subject: str, options: SubscriberOptions
) -> Binding:
    """Create the ephemeral (or ordered) consumer for a subscription to ``subject``.

    Raises:
        SubscribeError: The stream does not exist, the server refused the consumer,
            ``consumer_config`` is invalid, or the connection failed.
        PermissionDenied: The server refused the request.
    """
    what = f"creating a consumer on stream {stream!r}"
    try:
        if options.ordered:
            consumer_config = ordered_consumer_config(subject, options, None)
        else:
            config = {
                "ack_policy": "explicit",
                "inactive_threshold": EPHEMERAL_INACTIVE_THRESHOLD,
                # The server enforces the in-flight bound too.
                "max_ack_pending": options.max_in_flight,
                **options.consumer_config,
            }
            if not config.get("filter_subject") and not config.get("filter_subjects"):
                config["filter_subject"] = subject
            consumer_config = ConsumerConfig(**config)
        info = await create_consumer(js, stream, consumer_config)
    except NotFoundError as exc:
        raise SubscribeError(f"cannot subscribe: stream {stream!r} not found") from exc
    except APIError as exc:
        raise known_refusal(exc, what) or SubscribeError(
            f"cannot create a consumer on stream {stream!r}: {exc.description}"
        ) from exc
    except TypeError as exc:
        raise SubscribeError(f"invalid consumer_config: {exc}") from exc
    except (nats.errors.Error, TimeoutError) as exc:
        raise SubscribeError(f"cannot subscribe: {api_error(exc, what, js)}") from exc
    consumer: PulledConsumer
    if options.ordered:
        consumer = OrderedConsumer(js, stream, info, subject=subject, options=options)
    else:
        consumer = AcknowledgedConsumer(js, stream, info.name, ephemeral=True)
    # The server holds the in-flight bound where each message is acked on its own
    # (not AckAll, which settles a held message with a later one) and keep-alive
    # stops a held message from being redelivered meanwhile. A durable's is left to
    # the client: anyone may raise its max_ack_pending while the subscription runs.
    bounded_by_server = (
        not options.ordered and options.keep_alive and info.config.ack_policy == "explicit"
    )
    limits = PullLimits(
        options,
        max_ack_pending=info.config.max_ack_pending if bounded_by_server else None,
    )
    return Binding(consumer, info.config.ack_wait or 30.0, limits)


async def bind_durable(
    js: JetStreamContext, stream: str, name: str, subject: str, options: SubscriberOptions
) -> Binding:
    """Check that the durable consumer ``name`` exists and fits ``subject``.

    Raises:
        SubscribeError: The stream or consumer does not exist, it is a push consumer,
            it delivers outside ``subject``, its priority groups do not fit the
            options, or the connection failed.
        PermissionDenied: The server refused a request.
    """
    if options.priority_group is not None:
        feature = PRIORITIZED if options.priority is not None else PRIORITY_GROUPS
        require(connection(js), feature, f"subscribing to consumer {name!r} of {stream!r}")
    # The raw reply also carries max_batch / max_expires and the priority groups,
    # which nats-py drops.
    what = f"reading consumer {name!r} on stream {stream!r}"
    try:
        with api_guard(js, what, f"CONSUMER.INFO.{stream}.{name}"):
            reply = await connection(js).request(
                f"{api_prefix(js)}.CONSUMER.INFO.{stream}.{name}", b"", timeout=api_timeout(js)
            )
        raw = json.loads(reply.data)
        if "error" in raw:
            raise APIError.from_error(raw["error"])
    except NotFoundError as exc:
        missing = "stream" if exc.err_code == STREAM_NOT_FOUND else "consumer"
        raise SubscribeError(
            f"cannot subscribe: {missing} not found ({stream!r}/{name!r}); "
            "create it with ensure_consumer()"
        ) from exc
    except APIError as exc:
        raise known_refusal(exc, what) or SubscribeError(
            f"cannot read consumer {name!r} on {stream!r}: {exc}"
        ) from exc
    except ValueError as exc:
        raise SubscribeError(f"cannot read consumer {name!r} on {stream!r}: {exc}") from exc
    except (nats.errors.Error, TimeoutError) as exc:
        raise SubscribeError(f"cannot subscribe: {api_error(exc, what, js)}") from exc
    limits_config = dict(raw.get("config", {}))  # from_response converts in place
    info = ConsumerInfo.from_response(raw)
    if info.config.deliver_subject:
        raise SubscribeError(f"consumer {name!r} is a push consumer; goflux needs a pull consumer")
    filters = _filters(info)
    if not filters:
        what = f"reading stream {stream!r}"
        try:
            with api_guard(js, what, f"STREAM.INFO.{stream}"):
                stream_info = await js.stream_info(stream)
        except (nats.errors.Error, APIError, TimeoutError) as exc:
            raise SubscribeError(f"cannot subscribe: {api_error(exc, what, js)}") from exc
        filters = list(stream_info.config.subjects or [])
    outside = [f for f in filters if not covers(subject, f)]
    if outside:
        raise SubscribeError(
            f"consumer {name!r} delivers {outside}, outside the subscribed subject {subject!r}"
        )
    max_expires = limits_config.get("max_expires")
    limits = PullLimits(
        options,
        max_batch=limits_config.get("max_batch") or None,
        max_expires=max_expires / 1e9 if max_expires else None,
    )
    priority = options.priority_of()
    if priority is None:
        check_ungrouped(name, limits_config)
    else:
        priority.check(name, limits_config)
    consumer = AcknowledgedConsumer(js, stream, info.name, ephemeral=False)
    return Binding(consumer, info.config.ack_wait or 30.0, limits, priority, tuple(filters))
