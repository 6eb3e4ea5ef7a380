"""Raw nats-py's fastest consumer: a callback subscription driven by hand-sent pull requests.

One function serves every suite that puts raw nats-py's consume beside goflux's
(``jetstream``, ``telemetry``, ``latency``, ``consume-shapes``): it creates its own
consumer (or binds to an existing one), sends ``first`` pull requests of ``batch``
messages, and sends another ``batch`` whenever what it still expects falls to half a
batch; each message is validated with a pydantic ``TypeAdapter`` and, unless the
consumer has no acks, acked with ``msg.ack()``. It counts the messages its callback
handled, never what it asked for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from pydantic import TypeAdapter

from bench.harness import wait_for
from bench.payload import ADAPTER, Order

STREAM = "BENCH"  # the jetstream suite's stream: the default
EXPIRES_NS = 30_000_000_000  # a pull request stays open at the server for 30 s


class Tally:
    """Messages handled so far by one or more consumers of a case, and when all came."""

    __slots__ = ("count", "done", "goal")

    def __init__(self, goal: int) -> None:
        self.count = 0
        self.goal = goal
        self.done = asyncio.Event()

    def add(self) -> None:
        """Count one message; set :attr:`done` on the last one asked for."""
        self.count += 1
        if self.count == self.goal:
            self.done.set()


async def raw_callback_pull(
    js: JetStreamContext,
    count: int,
    subject: str = "bench.data",
    *,
    stream: str = STREAM,
    consumer: str | None = None,
    config: Mapping[str, Any] | None = None,
    batch: int = 100,
    first: int = 2,
    ack: bool = True,
    tally: Tally | None = None,
    adapter: TypeAdapter[Any] = ADAPTER,
    on_order: Callable[[Order], None] | None = None,
    deliver_policy: str = "all",
    ready: asyncio.Event | None = None,
    confirm: bool = False,
    decode: Callable[[Msg], Order] | None = None,
) -> int:
    """Consume ``count`` messages of ``subject`` with a callback and hand-sent pull requests.

    Without ``consumer`` it creates one (ack explicit, ``deliver_policy``, filtered on
    ``subject``, then ``config`` on top: e.g. ``max_ack_pending``, or ``ack_policy``
    ``"none"``) and deletes it afterwards; with ``consumer`` it pulls from that
    existing one and leaves it. ``first`` requests of ``batch`` go out at the start
    (the jetstream suite's shape: two of 100), another ``batch`` whenever the messages
    still expected fall to ``batch // 2``. Each message is decoded with ``adapter``
    (or ``decode``, to add work around it, such as telemetry made by hand), passed to
    ``on_order`` if given, and acked unless ``ack`` is False; with ``confirm``, each
    awaits ``ack_sync()`` instead (nats-py's confirmed ack: nats-py runs a
    subscription's callbacks one at a time, so each waits for the server's reply to
    the previous ack). ``tally`` shares the count with other consumers of the same
    case (competing pulls on one durable): the case is done when their total reaches
    its goal.

    Returns the messages the case handled (fewer than ``count`` if the rest never
    came): with a shared ``tally``, the total so far.
    """
    nc = js._nc
    if consumer is None:
        settings: dict[str, Any] = {
            "filter_subject": subject,
            "ack_policy": "explicit",
            "deliver_policy": deliver_policy,
            **(config or {}),
        }
        name = (await js.add_consumer(stream, **settings)).name
    else:
        name = consumer
    inbox = nc.new_inbox()
    next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}"
    request = json.dumps({"batch": batch, "expires": EXPIRES_NS}).encode()
    tally = tally if tally is not None else Tally(count)
    validate = adapter.validate_json
    low = batch // 2
    outstanding = first * batch

    async def on_message(msg: Msg) -> None:
        nonlocal outstanding
        if not msg.reply:
            return  # a status message
        order = validate(msg.data) if decode is None else decode(msg)
        if on_order is not None:
            on_order(order)
        if confirm:
            await msg.ack_sync(timeout=10)
        elif ack:
            await msg.ack()
        tally.add()
        outstanding -= 1
        if outstanding == low:
            outstanding += batch
            await nc.publish(next_subject, request, reply=inbox)

    sub = await nc.subscribe(inbox, cb=on_message)
    for _ in range(first):
        await nc.publish(next_subject, request, reply=inbox)
    await nc.flush()
    if ready is not None:
        ready.set()
    await wait_for(tally.done, lambda: tally.count)
    await sub.unsubscribe()
    if consumer is None:
        await js.delete_consumer(stream, name)
    return tally.count
