"""The payment service: a JetStream consumer with retries and a dead-letter subject."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

from goflux import Message, NonRetryable, Publisher
from goflux.demo.model import Order

__all__ = ("FlakyGateway", "GatewayUnavailable", "PaymentService", "ServiceCounts")


class GatewayUnavailable(ConnectionError):
    """The payment gateway did not answer (a transient failure)."""


class FlakyGateway:
    """A payment gateway that fails the first ``failures`` calls for some orders."""

    def __init__(self, flaky: set[str], failures: int = 2) -> None:
        self._flaky = flaky
        self._failures = failures
        self._calls: Counter[str] = Counter()

    async def charge(self, order_id: str, amount: float) -> None:
        """Charge ``amount``; raise :class:`GatewayUnavailable` while it is flaky."""
        self._calls[order_id] += 1
        if order_id in self._flaky and self._calls[order_id] <= self._failures:
            raise GatewayUnavailable(f"gateway timeout charging {order_id}")


@dataclass
class ServiceCounts:
    """What the payment service did (each delivery counts once)."""

    accepted: int = 0
    retried: int = 0
    rejected: int = 0
    redelivered: int = 0
    deliveries: Counter[str] = field(default_factory=Counter)


class PaymentService:
    """Charges each order, then publishes it on ``orders.accepted``.

    A gateway failure is raised as is (retryable: ``retry_ack`` naks it with backoff);
    an order with a non-positive amount raises :class:`NonRetryable` (dead-lettered).
    """

    def __init__(self, gateway: FlakyGateway, accepted: Publisher[Order]) -> None:
        self._gateway = gateway
        self._accepted = accepted
        self.counts = ServiceCounts()
        self.resent = 0  # orders the shop published a second time (same message ID)
        self.duplicates = 0  # of those, how many the server recognised
        self.settled: set[str] = set()
        self.changed = asyncio.Event()

    async def __call__(self, msg: Message[Order]) -> None:
        """Charge the order and publish it as accepted, or raise (see the class)."""
        order = msg.payload
        order_id, amount = order.id, order.amount
        counts = self.counts
        counts.deliveries[order_id] += 1
        if msg.delivery is not None and msg.delivery.num_delivered > 1:
            counts.redelivered += 1
        try:
            if amount <= 0:
                raise NonRetryable(f"order {order_id} has a non-positive amount {amount}")
            await self._gateway.charge(order_id, amount)
        except NonRetryable:
            counts.rejected += 1
            self._settle(order_id)
            raise
        except Exception:
            counts.retried += 1
            self.changed.set()
            raise
        await self._accepted.publish("orders.accepted", order, message_id=f"accepted:{order_id}")
        counts.accepted += 1
        self._settle(order_id)

    def _settle(self, order_id: str) -> None:
        self.settled.add(order_id)
        self.changed.set()
