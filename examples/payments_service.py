"""A payments service for ``goflux run``: charges orders from a durable JetStream consumer.

The service function fills a Group and returns; ``goflux run`` starts it, drains it on
SIGTERM, and with ``--workers N`` runs N processes that share the durable consumer
``payments``, so the orders split between them::

    goflux server &                                     # a JetStream server on :4222
    goflux run examples.payments_service:service --workers 2 --health-port 8080

Settings (environment): ``NATS_URL`` (default nats://127.0.0.1:4222),
``PAYMENTS_ACK_WAIT`` (seconds, default 30), ``PAYMENTS_WORK_MS`` (a payment
provider's latency to simulate, default 0), ``PAYMENTS_CONCURRENCY`` (default 16) and
``PAYMENTS_LEDGER``: a directory where each worker process appends what it charges
(``begin``/``done`` lines with the order and its delivery count), for checking
exactly-once across workers.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import nats
from pydantic import BaseModel

from goflux import Group, JsonCodec, Message
from goflux.transports import jetstream

logger = logging.getLogger("payments")


class Order(BaseModel):
    id: str
    customer: str
    amount: float


@dataclass(frozen=True)
class Settings:
    url: str
    ack_wait: float
    work: float
    concurrency: int
    ledger: Path | None

    @classmethod
    def from_env(cls) -> Settings:
        ledger = os.environ.get("PAYMENTS_LEDGER")
        return cls(
            url=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"),
            ack_wait=float(os.environ.get("PAYMENTS_ACK_WAIT", "30")),
            work=float(os.environ.get("PAYMENTS_WORK_MS", "0")) / 1000,
            concurrency=int(os.environ.get("PAYMENTS_CONCURRENCY", "16")),
            ledger=Path(ledger) if ledger else None,
        )


class Ledger:
    """What this process charged: counts, and optionally a file of begin/done lines.

    Lines are written unbuffered (one ``os.write`` each) before the message is acked,
    so even a process killed with SIGKILL leaves a complete record of what it did.
    """

    def __init__(self, directory: Path | None) -> None:
        self.worker = os.environ.get("GOFLUX_WORKER_ID", "1")
        self.charged = 0
        self.redelivered = 0
        self._fd: int | None = None
        if directory is not None:
            path = directory / f"ledger-{self.worker}-{os.getpid()}.txt"
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _write(self, line: str) -> None:
        if self._fd is not None:
            os.write(self._fd, line.encode())

    def begin(self, msg: Message[Order]) -> None:
        delivered = msg.delivery.num_delivered if msg.delivery else 1
        self._write(f"begin {msg.payload.id} {delivered}\n")

    def done(self, msg: Message[Order]) -> None:
        delivered = msg.delivery.num_delivered if msg.delivery else 1
        self.charged += 1
        self.redelivered += delivered > 1
        self._write(f"done {msg.payload.id} {delivered}\n")

    async def close(self) -> None:
        """Report the totals; the group calls it after the subscription has drained."""
        logger.info(
            "worker %s (pid %d) charged %d orders, %d of them redelivered",
            self.worker, os.getpid(), self.charged, self.redelivered,
        )  # fmt: skip
        if self._fd is not None:
            os.close(self._fd)


async def service(group: Group) -> None:
    settings = Settings.from_env()
    nc = group.own(await nats.connect(settings.url, name=f"payments-{os.getpid()}"))
    js = nc.jetstream()
    group.describe(title="payments", version="1.0.0", description="Charges every order once.")

    async def provision() -> None:
        """The stream and the durable consumer the workers share (not made when described)."""
        await jetstream.ensure_stream(js, name="ORDERS", subjects=["orders.>"])
        await jetstream.ensure_consumer(
            js,
            stream="ORDERS",
            name="payments",
            filter_subject="orders.created",
            ack_wait=settings.ack_wait,
            max_ack_pending=1000,
        )

    group.on_start(provision)
    ledger = group.own(Ledger(settings.ledger))
    orders = group.own(
        jetstream.Subscriber(
            js,
            JsonCodec(Order),
            stream="ORDERS",
            consumer="payments",
            concurrency=settings.concurrency,
            max_in_flight=256,
        )
    )

    async def charge(msg: Message[Order]) -> None:
        """Charge the order's customer."""
        ledger.begin(msg)
        if settings.work:
            await asyncio.sleep(settings.work)  # the payment provider's call
        ledger.done(msg)

    group.subscribe(orders, "orders.created", charge)
