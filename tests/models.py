"""Payload types shared by the tests."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from goflux import JsonCodec, ServiceError


class Order(BaseModel):
    id: str
    customer_id: str = Field(alias="customerId")
    amount: float
    lines: list[str] = []
    created: datetime | None = None


class Customer(BaseModel):
    id: str
    name: str


def order(n: int = 1) -> Order:
    return Order(id=f"o-{n}", customerId=f"c-{n % 3}", amount=10.0 + n)


class Quote(BaseModel):
    sku: str
    quantity: int


class Price(BaseModel):
    sku: str
    total: float


QUOTE = JsonCodec(Quote)
PRICE = JsonCodec(Price)


async def price(quote: Quote) -> Price:
    """A pricing handler: 2.5 a unit; 404 for the SKU "ghost", a crash for a negative quantity."""
    if quote.quantity < 0:
        raise ValueError(f"negative quantity {quote.quantity}")
    if quote.sku == "ghost":
        raise ServiceError(404, f"unknown sku {quote.sku}")
    return Price(sku=quote.sku, total=2.5 * quote.quantity)
