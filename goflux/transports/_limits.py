"""A ``max_payload`` the server lowered under a running client: the errors publishes raise.

The server tells no client when a config reload lowers its ``max_payload``; it closes
the connection of one that sends a larger message (``-ERR 'Maximum Payload
Violation'``). goflux makes the client reconnect (:mod:`goflux.transports._natspy`),
which learns the new limit from the server's INFO, and hears of it as an
:class:`~goflux.transports._refusals.Overflow`. A publish in flight then, or the next
core publish of a publisher whose earlier ones may have been lost, waits for that
reconnection (briefly) so that its error names the new limit.
"""

from __future__ import annotations

from collections.abc import Mapping

from nats.aio.client import Client

from goflux._errors import MaxPayloadLowered, PayloadTooLarge, PublishError
from goflux._wire import check_size
from goflux.transports._natspy import reconnected
from goflux.transports._refusals import Overflow

__all__ = ("in_flight_error", "lost_before_error", "new_limit")


async def new_limit(nc: Client, timeout: float) -> int:
    """The ``max_payload`` the server announced on reconnecting (0 if not in ``timeout``)."""
    return nc.max_payload if await reconnected(nc, timeout) else 0


def _limit_text(limit: int, overflow: Overflow) -> str:
    if limit:
        return f"which it lowered to {limit} bytes from the {overflow.announced} it had announced"
    return f"which it lowered below the {overflow.announced} bytes it had announced"


async def lost_before_error(
    nc: Client, overflow: Overflow, subject: str, timeout: float
) -> MaxPayloadLowered:
    """The error for a core publish to ``subject`` after earlier ones may have been lost.

    Nothing of this publish was sent.
    """
    limit = await new_limit(nc, timeout)
    again = "the client has reconnected" if limit else "the client is reconnecting"
    return MaxPayloadLowered(
        f"publish to {subject!r} not sent: the server closed the connection for an earlier "
        f"message over its max_payload, {_limit_text(limit, overflow)} "
        f"({overflow.reason}); that message, and what was sent after it before the "
        f"connection dropped, were lost; {again}: publish again",
        subject=subject,
        limit=limit,
        announced=overflow.announced,
    )


async def in_flight_error(
    nc: Client,
    overflow: Overflow,
    subject: str,
    headers: Mapping[str, str] | None,
    data: bytes,
    *,
    waiting_for: str,
    retry: str,
    timeout: float,
) -> PublishError:
    """The error for a publish to ``subject`` in flight when the server closed the connection.

    If the message itself is over the new limit, the server refused it:
    :class:`~goflux.PayloadTooLarge`, nothing delivered or stored. Otherwise it may
    have gone through before the connection dropped, or been lost after the one that
    was over: :class:`~goflux.MaxPayloadLowered` with ``may_be_stored``.
    ``waiting_for`` names what did not come ("its PubAck"); ``retry`` says how to
    publish it again.
    """
    limit = await new_limit(nc, timeout)
    try:
        check_size(subject, headers, data, limit)
    except PayloadTooLarge as over:
        return PayloadTooLarge(
            f"publish to {subject!r}: {over.size} bytes of headers and body exceed the "
            f"server's max_payload, {_limit_text(limit, overflow)}; the server closed the "
            f"connection for it ({overflow.reason}): nothing was delivered or stored",
            subject=subject,
            size=over.size,
            limit=limit,
        )
    return MaxPayloadLowered(
        f"publish to {subject!r}: the server closed the connection before {waiting_for} "
        f"came, for a message over its max_payload, {_limit_text(limit, overflow)} "
        f"({overflow.reason}); this one may have gone through: {retry}",
        subject=subject,
        limit=limit,
        announced=overflow.announced,
        may_be_stored=True,
    )
