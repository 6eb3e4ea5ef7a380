"""Publishing and inspecting streams from Spark tests (which are synchronous)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import nats
from pydantic import BaseModel

from goflux import Headers, JsonCodec
from goflux.transports import jetstream


class Line(BaseModel):
    sku: str
    quantity: int
    tags: list[str] = []


class Sale(BaseModel):
    """A payload with nested models and lists; no field clashes with metadata columns."""

    id: str
    customer: str
    amount: float
    lines: list[Line] = []
    placed: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    note: str | None = None


def sale(n: int) -> Sale:
    return Sale(
        id=f"s-{n}",
        customer=f"c-{n % 7}",
        amount=n * 1.25,
        lines=[Line(sku=f"k-{n % 5}", quantity=n % 3 + 1, tags=["a"] * (n % 2))],
        placed=datetime(2026, 1, 1, tzinfo=UTC).replace(microsecond=n % 1_000_000),
        note=None if n % 4 else f"note {n}",
    )


async def _publish(
    url: str,
    stream: str,
    subjects: Sequence[str],
    values: Sequence[object],
    *,
    headers: Headers | None = None,
    window: int = 2_000,
) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name=stream, subjects=[f"{stream.lower()}.>"])
        codec: JsonCodec[object] = JsonCodec(type(values[0]))
        publisher = jetstream.Publisher(js, codec)
        await publisher.publish_many(
            (
                jetstream.Outgoing(subjects[i % len(subjects)], value, headers=headers)
                for i, value in enumerate(values)
            ),
            window=window,
        )
    finally:
        await nc.close()


def publish(
    url: str,
    stream: str,
    values: Sequence[object],
    *,
    subjects: Sequence[str] | None = None,
    headers: Headers | None = None,
) -> None:
    """Publish ``values`` as JSON to ``stream`` (created on ``<stream>.>`` if missing)."""
    asyncio.run(
        _publish(url, stream, subjects or [f"{stream.lower()}.new"], values, headers=headers)
    )


async def _raw(url: str, stream: str, subject: str, bodies: Sequence[bytes]) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name=stream, subjects=[f"{stream.lower()}.>"])
        for body in bodies:
            await js.publish(subject, body)
    finally:
        await nc.close()


def publish_raw(url: str, stream: str, subject: str, bodies: Sequence[bytes]) -> None:
    """Publish raw bodies (no codec) to ``subject``."""
    asyncio.run(_raw(url, stream, subject, bodies))


async def _state(url: str, stream: str) -> tuple[int, int, int]:
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(stream)
        return info.state.messages, info.state.first_seq, info.state.last_seq
    finally:
        await nc.close()


def stream_state(url: str, stream: str) -> tuple[int, int, int]:
    """(messages, first_seq, last_seq) of ``stream``."""
    return asyncio.run(_state(url, stream))


async def _purge(url: str, stream: str) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().purge_stream(stream)
    finally:
        await nc.close()


def purge(url: str, stream: str) -> None:
    """Delete every message of ``stream`` (sequences keep counting)."""
    asyncio.run(_purge(url, stream))


async def _bodies(url: str, stream: str) -> list[bytes]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        return [
            (await js.get_msg(stream, seq)).data or b""
            for seq in range(info.state.first_seq, info.state.last_seq + 1)
        ]
    finally:
        await nc.close()


def bodies(url: str, stream: str) -> list[bytes]:
    """Every stored body of ``stream`` in sequence order (small streams only)."""
    return asyncio.run(_bodies(url, stream))


async def _delete(url: str, stream: str) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().delete_stream(stream)
    finally:
        await nc.close()


def delete_stream(url: str, stream: str) -> None:
    """Delete ``stream`` and everything in it."""
    asyncio.run(_delete(url, stream))
