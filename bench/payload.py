"""The payload every case sends: a 10-field pydantic model, about 128 bytes of JSON."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, TypeAdapter


class Order(BaseModel):
    id: str
    cust: str
    sku: str
    qty: int
    price: float
    cur: str
    region: str
    prio: int
    paid: bool
    at: datetime


ORDER = Order(
    id="o-12", cust="c-42", sku="S-9", qty=3, price=19.99, cur="EUR", region="eu",
    prio=2, paid=True, at=datetime(2026, 11, 22, 10, 0, tzinfo=UTC),
)  # fmt: skip
ADAPTER = TypeAdapter(Order)
SIZE = len(ADAPTER.dump_json(ORDER))


def numbered(count: int) -> list[Order]:
    """``count`` orders whose ``id`` is their index (latency and memory cases)."""
    return [ORDER.model_copy(update={"id": str(i)}) for i in range(count)]
