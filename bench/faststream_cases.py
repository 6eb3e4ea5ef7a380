"""FastStream, the framework users would otherwise pick: publish and consume cases.

FastStream is an optional bench dependency (``pip install -e ".[bench]"``); without
it the tables leave its rows out and say so. Its subscribers keep their default ack
policy (ack after the handler returns) and get a handler typed with the same pydantic
model as every other case. They run with ``logger=None``, its fastest setting, and
the push subscriber also with FastStream's default logging (every message logged at
INFO, twice), written to /dev/null instead of the terminal.
"""

from __future__ import annotations

import asyncio
import logging
import os

from bench.harness import wait_for
from bench.payload import ORDER, Order

try:
    from faststream.nats import JStream, NatsBroker, PullSub
except ImportError:  # pragma: no cover - the bench runs without it, minus these rows
    AVAILABLE = False
else:
    AVAILABLE = True

PUBLISH = "FastStream broker.publish(stream=)"
PULL = "FastStream pull subscriber (batch 100)"
PUSH = "FastStream push subscriber"
PUSH_LOGGING = "FastStream push subscriber, default INFO logging"
CONSUME_ROWS = (PULL, PUSH, PUSH_LOGGING)


def _default_logging() -> logging.Logger:
    """FastStream's default access log (INFO, one line per event), into /dev/null."""
    logger = logging.getLogger("bench.faststream.access")
    if not logger.handlers:
        handler = logging.StreamHandler(open(os.devnull, "w"))  # noqa: SIM115 - lives on
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-8s - %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


MISSING = 'FastStream is not installed (`pip install -e ".[bench]"`): its rows are left out.'


class Rivals:
    """FastStream cases on one server and stream."""

    def __init__(self, url: str, stream: str) -> None:
        self._url = url
        self._stream = stream

    async def publish(self, subject: str, count: int) -> None:
        """``broker.publish`` to the stream, waiting for each PubAck."""
        broker = NatsBroker(self._url, logger=None)
        await broker.connect()
        try:
            for _ in range(count):
                await broker.publish(ORDER, subject, stream=self._stream)
        finally:
            await broker.stop()

    async def consume(self, subject: str, count: int, pull: bool, logs: bool = False) -> int:
        """Consume ``count`` messages from the start of the stream with a typed handler.

        Returns the messages handled (fewer than ``count`` if the rest never came).
        """
        broker = NatsBroker(self._url, logger=_default_logging() if logs else None)
        received = 0
        done = asyncio.Event()

        async def handle(order: Order) -> None:
            nonlocal received
            received += 1
            if received == count:
                done.set()

        options = {"pull_sub": PullSub(batch_size=100)} if pull else {}
        broker.subscriber(
            subject,
            stream=JStream(self._stream, declare=False),
            **options,  # type: ignore[arg-type]
        )(handle)
        await broker.start()
        try:
            await wait_for(done, lambda: received)
        finally:
            await broker.stop()
        return received
