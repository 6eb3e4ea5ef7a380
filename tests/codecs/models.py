"""Payloads the codec tests share: nested, unicode, empty, about 1 MB."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field


class Status(Enum):
    """An enum of ints: text formats write 1 and must read it back as the member."""

    ACTIVE = 1
    CLOSED = 2


class Ratio(float, Enum):
    """A float-valued enum, for the same reason."""

    HALF = 0.5


class Line(BaseModel):
    sku: str
    qty: int
    price: float


class Order(BaseModel):
    """A nested model with an alias, a list of models, a list of text and a datetime."""

    model_config = ConfigDict(populate_by_name=True)

    id: str
    customer: str = Field(alias="customerId")
    lines: list[Line]
    tags: list[str]
    note: str
    paid: bool
    created: datetime
    discount: float | None = None


CREATED = datetime(2026, 11, 22, 10, 0, 0, 500000, tzinfo=UTC)  # milliseconds: JS Dates

NESTED = Order(
    id="o-1",
    customerId="c-1",
    lines=[Line(sku="a-1", qty=2, price=12.5), Line(sku="b-2", qty=1, price=0.25)],
    tags=["rush", "gift"],
    note="leave at the door",
    paid=True,
    created=CREATED,
    discount=1.5,
)
UNICODE = Order(
    id="o-ü",
    customerId="客户-7",
    lines=[Line(sku="ß-é", qty=3, price=7.75)],
    tags=["日本語", "🎉", "naïve café"],
    note="Grüße aus Köln — «quotes» & <angle> 'single' \"double\"",
    paid=False,
    created=CREATED,
)
EMPTY = Order(id="", customerId="", lines=[], tags=[], note="", paid=False, created=CREATED)


def large(size: int = 1 << 20) -> Order:
    """An order of about ``size`` bytes: many lines and a long note."""
    count = size // 80
    return Order(
        id="o-big",
        customerId="c-big",
        lines=[Line(sku=f"sku-{i:06d}", qty=i, price=i + 0.5) for i in range(count)],
        tags=[f"tag-{i}" for i in range(100)],
        note="x" * (size // 2),
        paid=True,
        created=CREATED,
    )


SAMPLES = {"nested": NESTED, "unicode": UNICODE, "empty": EMPTY}
