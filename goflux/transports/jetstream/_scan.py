"""Reading what a stream holds on some subjects, once, up to now (keys, history).

A short-lived consumer without acks (in memory, one replica) delivers what the
subjects hold; the read ends at the delivery whose pending count is 0, the last one
there was when it got to it. Used for a Key-Value bucket's keys (last write per key,
headers only) and a key's history (every write), and an Object store's list (the last
meta message of each object).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Final, Literal

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError

from goflux._errors import TransportError
from goflux.transports._natspy import api_prefix, api_timeout, connection
from goflux.transports.jetstream._consumers import create_consumer
from goflux.transports.jetstream._delivery import ack_tokens

__all__ = ("scan",)

_BATCH: Final = 1_000
_NS: Final = 1_000_000_000


async def scan(
    js: JetStreamContext,
    stream: str,
    subject: str,
    *,
    deliver: Literal["all", "last_per_subject"],
    headers_only: bool = False,
) -> AsyncIterator[Msg]:
    """Yield what ``stream`` holds on ``subject`` (a pattern), oldest first, up to now.

    Raises:
        NotFoundError: The stream does not exist.
        APIError: The server refused the consumer.
        TransportError: The server stopped delivering before the end.
        nats.errors.Error: The connection failed.
    """
    config = ConsumerConfig(
        ack_policy=AckPolicy.NONE,
        deliver_policy=DeliverPolicy(deliver),
        filter_subject=subject,
        headers_only=headers_only,
        mem_storage=True,
        num_replicas=1,
        max_deliver=1,
        inactive_threshold=30.0,
    )
    info = await create_consumer(js, stream, config)
    nc = connection(js)
    sub: Subscription | None = None
    try:
        remaining = info.num_pending or 0
        if not remaining:
            return
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        next_subject = f"{api_prefix(js)}.CONSUMER.MSG.NEXT.{stream}.{info.name}"
        wait = api_timeout(js)
        asked = 0
        while True:
            if asked == 0:
                asked = min(remaining, _BATCH)
                request = {"batch": asked, "expires": int(wait * _NS)}
                await nc.publish(next_subject, json.dumps(request).encode(), reply=inbox)
            try:
                msg = await sub.next_msg(timeout=wait + 1.0)
            except nats.errors.TimeoutError as exc:
                raise TransportError(
                    f"reading {subject!r} of stream {stream!r}: the server stopped "
                    f"delivering with {remaining} messages to go"
                ) from exc
            if not msg.reply:  # a status
                headers = msg.headers or {}
                status = headers.get("Status")
                description = str(headers.get("Description", ""))
                if status == "100":  # a heartbeat: the request is still open
                    continue
                if status not in ("408", "409") or "Deleted" in description:
                    raise TransportError(  # 404, 503, consumer deleted: it is gone
                        f"reading {subject!r} of stream {stream!r}: the server answered "
                        f"{status} {description} with {remaining} messages to go"
                    )
                asked = 0  # the request ended: ask again
                continue
            asked -= 1
            yield msg
            tokens, offset = ack_tokens(msg.reply)
            remaining = int(tokens[offset + 6])
            if remaining == 0:
                return
    finally:
        if sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        with contextlib.suppress(nats.errors.Error, APIError, TimeoutError):
            await js.delete_consumer(stream, info.name)
