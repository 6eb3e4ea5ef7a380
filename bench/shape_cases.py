"""The consume-shapes matrix (48 shapes) and each shape's two cases: raw nats-py and goflux.

A shape is one combination of:

- consumer: **durable**-bound (``ensure_consumer(js, stream=, name=, filter_subject=)``
  then ``Subscriber(js, codec, stream=, consumer=name)``; raw: the same config through
  ``js.add_consumer(durable_name=...)``), **ephemeral** (the ``Subscriber`` creates it;
  raw: ack explicit, ``max_ack_pending`` 256 as goflux's ephemeral consumers get) and
  **ordered** (``Subscriber(..., ordered=True)``; raw: an ``ack_policy`` ``none``
  consumer with the same settings as goflux's ordered one, no acks);
- payload: JSON of one pydantic model of 100 B, 1 KB or 64 KB (a padding field sized
  to reach it), decoded by both sides with the same ``TypeAdapter``;
- headers: none, or a ``traceparent`` and two user headers on every stored message;
- storage: file or memory;
- subscribers: one, or two competing on one durable (durable only; the total counted).

Every case makes a fresh consumer that delivers its whole stream and deletes it
afterwards, and returns the messages its handlers got (a :class:`~bench.pull.Tally`
shared by its subscribers), never what it asked for. Raw nats-py pulls with
:func:`bench.pull.raw_callback_pull` in the shape :data:`RAW_PULLS` gives its payload.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nats.js import JetStreamContext
from pydantic import BaseModel, TypeAdapter

from bench.harness import wait_for
from bench.pull import Tally, raw_callback_pull
from bench.sizes import Sizes
from goflux import JsonCodec, Message
from goflux.transports import jetstream
from goflux.transports.jetstream._options import (
    DEFAULT_MAX_IN_FLIGHT,
    EPHEMERAL_INACTIVE_THRESHOLD,
)

RAW = "raw callback pull"
GOFLUX = "goflux Subscriber"
KINDS = ("durable", "ephemeral", "ordered")
PAYLOADS = {"100b": 100, "1k": 1024, "64k": 65536}
STORAGES = ("file", "memory")
HEADERS = {
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "tenant": "acme-eu",
    "request-id": "req-7f3a9c2e",
}


@dataclass(frozen=True)
class Pull:
    """A raw callback pull's shape: ``first`` requests of ``batch``, another at half a batch."""

    batch: int
    first: int

    @property
    def name(self) -> str:
        return f"{self.first}x{self.batch}"


PULLS = (Pull(256, 2), Pull(100, 2), Pull(100, 1), Pull(500, 1))
# Raw's pull at its best, by payload (python -m bench.consume_shapes --raw-pulls, 7
# rounds on four shapes): on 100 B and 1 KB, two requests of 256 were 1.05-1.45 times
# the rate of two of 100 (the jetstream suite's shape; 0.90-1.09 in 3- and 5-round
# runs); one of 100 re-sent at half was no faster than two of 100. On 64 KB,
# two of 100 (two of 256 reached 0.94 of it, one of 100 0.92): there larger pulls
# overrun nats-server's 64 MB write buffer per client (two competing pulls of
# 2 x 256 x 64 KB from memory storage: the server cut the connection as a slow
# consumer; one of 500 stalled the same way).
RAW_PULLS = {"100b": Pull(256, 2), "1k": Pull(256, 2), "64k": Pull(100, 2)}


@dataclass(frozen=True)
class Shape:
    """One shape of the matrix; its :attr:`name` reads kind-payload-headers-storage-subscribers."""

    kind: str
    payload: str
    headers: bool
    storage: str
    subscribers: int = 1

    @property
    def name(self) -> str:
        plain = "headers" if self.headers else "plain"
        return f"{self.kind}-{self.payload}-{plain}-{self.storage}-{self.subscribers}"

    @property
    def stream(self) -> str:
        return (
            f"SHAPES_{self.payload.upper()}_{'H' if self.headers else 'P'}_{self.storage.upper()}"
        )

    @property
    def subject(self) -> str:
        return f"shapes.{self.payload}.{'headers' if self.headers else 'plain'}.{self.storage}"

    def messages(self, sizes: Sizes) -> int:
        """Messages per case and round (and in its stream)."""
        return sizes.shapes_large_msgs if self.payload == "64k" else sizes.shapes_msgs


SHAPES = tuple(
    Shape(kind, payload, headers, storage, subscribers)
    for payload, kind, headers, storage, subscribers in itertools.product(
        PAYLOADS, KINDS, (False, True), STORAGES, (1, 2)
    )
    if subscribers == 1 or kind == "durable"
)
BY_NAME = {shape.name: shape for shape in SHAPES}


def key(shape: Shape) -> str:
    """The key of ``shape``'s table (what the goals look for)."""
    return f"shape:{shape.name}"


class Event(BaseModel):
    id: str
    kind: str
    seq: int
    amount: float
    at: datetime
    pad: str


ADAPTER = TypeAdapter(Event)
CODEC = JsonCodec(Event)


def payload(size: int) -> bytes:
    """The JSON of an :class:`Event` padded to ``size`` bytes."""
    event = Event(
        id="e-1", kind="paid", seq=7, amount=19.99, at=datetime(2026, 11, 27, tzinfo=UTC), pad=""
    )
    pad = size - len(ADAPTER.dump_json(event))
    return ADAPTER.dump_json(event.model_copy(update={"pad": "x" * max(pad, 0)}))


async def fill(js: JetStreamContext, shape: Shape, count: int, window: int) -> None:
    """Create ``shape``'s stream and store ``count`` messages in it.

    Raises:
        RuntimeError: The stream does not hold ``count`` messages afterwards.
    """
    await jetstream.ensure_stream(
        js, name=shape.stream, subjects=[shape.subject], storage=shape.storage
    )
    data = payload(PAYLOADS[shape.payload])
    headers = HEADERS if shape.headers else None
    step = max(1, min(window, (4 << 20) // len(data)))  # at most ~4 MB in flight
    for start in range(0, count, step):
        acks = [
            await js.publish_async(shape.subject, data, headers=headers)
            for _ in range(start, min(start + step, count))
        ]
        await asyncio.gather(*acks)
    held = (await js.stream_info(shape.stream)).state.messages
    if held != count:
        raise RuntimeError(f"stream {shape.stream!r} holds {held:,} messages, not {count:,}")


async def raw_case(js: JetStreamContext, shape: Shape, count: int, pull: Pull | None = None) -> int:
    """Raw nats-py's callback pull(s) in ``shape``; returns the messages handled.

    ``pull`` defaults to the payload's in :data:`RAW_PULLS`.
    """
    pull = pull or RAW_PULLS[shape.payload]
    tally = Tally(count)
    common: dict[str, Any] = {
        "stream": shape.stream,
        "batch": pull.batch,
        "first": pull.first,
        "tally": tally,
        "adapter": ADAPTER,
    }
    if shape.kind == "durable":
        name = f"raw-{uuid.uuid4().hex[:12]}"
        await js.add_consumer(
            shape.stream,
            durable_name=name,
            filter_subject=shape.subject,
            ack_policy="explicit",
            deliver_policy="all",
        )
        await asyncio.gather(
            *(
                raw_callback_pull(js, count, shape.subject, consumer=name, **common)
                for _ in range(shape.subscribers)
            )
        )
        await js.delete_consumer(shape.stream, name)
    elif shape.kind == "ephemeral":
        config: dict[str, Any] = {
            "max_ack_pending": DEFAULT_MAX_IN_FLIGHT,
            "inactive_threshold": EPHEMERAL_INACTIVE_THRESHOLD,
        }
        await raw_callback_pull(js, count, shape.subject, config=config, **common)
    else:  # ordered: goflux's ordered consumer's settings, no acks
        config = {
            "ack_policy": "none",
            "max_deliver": 1,
            "mem_storage": True,
            "num_replicas": 1,
            "inactive_threshold": EPHEMERAL_INACTIVE_THRESHOLD,
        }
        await raw_callback_pull(js, count, shape.subject, config=config, ack=False, **common)
    return tally.count


async def goflux_case(js: JetStreamContext, shape: Shape, count: int) -> int:
    """goflux Subscriber(s) in ``shape``, auto-acking; returns the messages handled."""
    tally = Tally(count)

    async def handle(msg: Message[Event]) -> None:
        tally.add()

    name = None
    if shape.kind == "durable":
        name = f"goflux-{uuid.uuid4().hex[:12]}"
        await jetstream.ensure_consumer(
            js, stream=shape.stream, name=name, filter_subject=shape.subject
        )
        subscribers = [
            jetstream.Subscriber(js, CODEC, stream=shape.stream, consumer=name)
            for _ in range(shape.subscribers)
        ]
    else:
        subscribers = [
            jetstream.Subscriber(js, CODEC, stream=shape.stream, ordered=shape.kind == "ordered")
        ]
    subscriptions = [await sub.start(shape.subject, handle) for sub in subscribers]
    await wait_for(tally.done, lambda: tally.count)
    for subscription in subscriptions:
        await subscription.stop()
    if name is not None:
        await js.delete_consumer(shape.stream, name)
    return tally.count
