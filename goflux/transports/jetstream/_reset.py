"""Resetting a consumer's delivery state (nats-server 2.14+).

``$JS.API.CONSUMER.RESET.<stream>.<consumer>`` takes ``{"seq": N}`` (or nothing, for
the ack floor) and answers with the consumer's info plus ``reset_seq``: the stream
sequence it delivers next. The consumer's delivery state is forgotten (pending acks,
redelivery counts, naks waiting out a delay), so it delivers everything from there
again, acknowledged or not, to the clients already bound to it.

The consumer itself serves that subject, so a request about a stream or consumer that
does not exist goes unanswered: goflux asks ``CONSUMER.INFO`` first, which names the
missing one at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from nats.js import JetStreamContext
from nats.js.api import ConsumerInfo
from nats.js.errors import APIError

from goflux.transports._natspy import connection
from goflux.transports.jetstream._api import ApiCall, api_request, check_name, provisioning_error
from goflux.transports.jetstream._config import consumer_info_raw, info_from_raw
from goflux.transports.jetstream._errors import IncompatibleConfig
from goflux.transports.jetstream._features import CONSUMER_RESET, require
from goflux.transports.jetstream._status import CONSUMER_INVALID_RESET

__all__ = ("ConsumerReset", "reset_consumer")

_MAX_SEQUENCE: Final = 2**64 - 1


@dataclass(frozen=True, slots=True)
class ConsumerReset:
    """A consumer's state right after a reset, as the server reported it.

    Attributes:
        sequence: The stream sequence the consumer delivers next.
        delivered: The last stream sequence counted as delivered (``sequence - 1``).
        ack_floor: The stream sequence up to which everything counts as acknowledged
            (``sequence - 1``: what was pending, or acknowledged above it, is
            forgotten).
        num_pending: Messages of the stream left to deliver from ``sequence`` on.
        num_ack_pending: Messages delivered and not yet acknowledged (0 after a reset).
        info: The whole consumer info the server answered with.
    """

    sequence: int
    delivered: int
    ack_floor: int
    num_pending: int
    num_ack_pending: int
    info: ConsumerInfo


def _stream_seq(reply: Mapping[str, Any], field: str) -> int:
    part = reply.get(field)
    return int(part.get("stream_seq") or 0) if isinstance(part, Mapping) else 0


def _state(reply: Mapping[str, Any]) -> ConsumerReset:
    return ConsumerReset(
        sequence=int(reply.get("reset_seq") or 0),
        delivered=_stream_seq(reply, "delivered"),
        ack_floor=_stream_seq(reply, "ack_floor"),
        num_pending=int(reply.get("num_pending") or 0),
        num_ack_pending=int(reply.get("num_ack_pending") or 0),
        info=info_from_raw({k: v for k, v in reply.items() if k not in ("type", "reset_seq")}),
    )


def _check_sequence(sequence: int | None) -> None:
    if sequence is None:
        return
    if isinstance(sequence, bool) or not isinstance(sequence, int):
        raise TypeError(f"sequence must be an int or None, got {type(sequence).__name__}")
    if not 1 <= sequence <= _MAX_SEQUENCE:
        raise ValueError(
            f"sequence={sequence}: a stream sequence is 1 or more (None resets to the ack floor)"
        )


async def reset_consumer(
    js: JetStreamContext, stream: str, consumer: str, *, sequence: int | None = None
) -> ConsumerReset:
    """Reset the durable ``consumer`` of ``stream`` to deliver again (nats-server 2.14+).

    Without ``sequence`` the consumer goes back to its ack floor and delivers again
    from the sequence after it: every later message, acknowledged or not (one
    acknowledged out of order above the floor comes again too), at once, without
    waiting for ``ack_wait`` or a nak's delay. With ``sequence``, it delivers from that
    stream sequence on (earlier or later than where it was). Either way the
    consumer's delivery state is forgotten: delivery counts start again at 1, so each
    message has its whole ``max_deliver`` again, and subscribers bound to the consumer
    keep running: they receive the messages from the new position.

    The server allows a ``sequence`` for a consumer delivering ``all``, or one delivering
    from a start sequence or time when ``sequence`` is not before that start; it
    refuses it for the other deliver policies (``new``, ``last``, ...).

    Args:
        js: The JetStream context.
        stream: The consumer's stream.
        consumer: The durable consumer.
        sequence: The stream sequence to deliver next (1 or more), None for the ack floor.

    Returns:
        The consumer's state as the server confirmed it.

    Raises:
        ValueError: Invalid names, or ``sequence`` below 1.
        TypeError: ``sequence`` is not an int.
        StreamNotFound: The stream does not exist.
        ConsumerNotFound: The consumer does not exist.
        IncompatibleConfig: The server refuses ``sequence`` for this consumer (its
            deliver policy, or a sequence before its start).
        FeatureUnsupported: The server is older than 2.14 (nothing was sent).
        PermissionDenied: The server refused the request.
        ProvisioningError: Any other refusal by the server.
    """
    check_name("stream", stream)
    check_name("consumer", consumer)
    _check_sequence(sequence)
    what = f"consumer {consumer!r} on stream {stream!r}"
    target = "its ack floor" if sequence is None else f"stream sequence {sequence}"
    require(connection(js), CONSUMER_RESET, f"resetting {what} to {target}")
    tail = f"CONSUMER.RESET.{stream}.{consumer}"
    info_tail = f"CONSUMER.INFO.{stream}.{consumer}"
    body = None if sequence is None else {"seq": sequence}
    with ApiCall(js, what, tail, info_tail):
        try:
            # The consumer serves its reset subject itself: a request about a missing
            # stream or consumer goes unanswered (a timeout), so ask first.
            await consumer_info_raw(js, stream, consumer)
            reply = await api_request(js, tail, body)
        except APIError as exc:
            if exc.err_code == CONSUMER_INVALID_RESET:
                raise IncompatibleConfig(
                    f"{what}: the server refuses a reset to {target}: {exc.description} "
                    "(a sequence needs deliver policy 'all', or one not before the "
                    "consumer's start sequence or time)",
                    code=exc.code,
                    err_code=exc.err_code,
                ) from exc
            raise provisioning_error(exc, what) from exc
    return _state(reply)
