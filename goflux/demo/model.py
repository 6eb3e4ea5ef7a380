"""The demo's payload types and the orders it publishes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, Field

__all__ = (
    "CUSTOMERS",
    "DEAD_LETTER_STREAM",
    "ORDER_STREAM",
    "RESULT_STREAM",
    "CustomerRevenue",
    "Order",
    "flaky_orders",
    "make_orders",
)

CUSTOMERS = ("ada", "grace", "linus", "margaret", "ken")
# The demo's own streams: a run starts by deleting what a previous run left in them.
ORDER_STREAM = "DEMO_ORDERS"
DEAD_LETTER_STREAM = "DEMO_DEAD_LETTERS"
RESULT_STREAM = "DEMO_REVENUE"
_START = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


class Order(BaseModel):
    """An order as the shop publishes it on ``orders.created``."""

    id: str
    customer: str
    amount: float = Field(description="Total in EUR; not positive for a broken order")
    placed: datetime


class CustomerRevenue(BaseModel):
    """Revenue of one customer in one minute, as the Spark job publishes it."""

    customer: str
    window_start: datetime
    window_end: datetime
    revenue: float
    orders: int
    batch: int = Field(description="The Spark batch that produced this version")


def flaky_orders(orders: list[Order]) -> set[str]:
    """The valid orders the payment gateway fails twice before accepting: every 7th."""
    return {o.id for n, o in enumerate(orders) if n % 7 == 3 and o.amount > 0}


def make_orders(count: int) -> list[Order]:
    """``count`` orders over five minutes; every 13th has a non-positive amount."""
    return [
        Order(
            id=f"o-{n:05d}",
            customer=CUSTOMERS[n % len(CUSTOMERS)],
            amount=-1.0 if n % 13 == 12 else round(5 + (n * 7.31) % 95, 2),
            placed=_START + timedelta(seconds=(n * 300) // max(count, 1)),
        )
        for n in range(count)
    ]
