"""JsonCodec against the raw pydantic TypeAdapter it is built on (10-field model)."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, TypeAdapter

from bench.harness import Result, interleave
from goflux import JsonCodec


class Order(BaseModel):
    id: str
    customer_id: str
    sku: str
    quantity: int
    unit_price: float
    currency: str
    region: str
    priority: int
    paid: bool
    created: datetime


ORDER = Order(
    id="o-000123", customer_id="c-42", sku="SKU-9", quantity=3, unit_price=19.99,
    currency="EUR", region="eu-west", priority=2, paid=True,
    created=datetime(2026, 11, 22, 10, 0, tzinfo=UTC),
)  # fmt: skip
N = 20_000


def run(rounds: int) -> tuple[dict[str, Result], dict[str, Result], int]:
    codec = JsonCodec(Order)
    adapter = TypeAdapter(Order)
    data = codec.encode(ORDER)

    def raw_encode() -> int:
        for _ in range(N):
            adapter.dump_json(ORDER)
        return N

    def goflux_encode() -> int:
        for _ in range(N):
            codec.encode(ORDER)
        return N

    def raw_decode() -> int:
        for _ in range(N):
            adapter.validate_json(data)
        return N

    def goflux_decode() -> int:
        for _ in range(N):
            codec.decode(data)
        return N

    enc = interleave(
        {"raw TypeAdapter.dump_json": raw_encode, "JsonCodec.encode": goflux_encode}, rounds
    )
    dec = interleave(
        {"raw TypeAdapter.validate_json": raw_decode, "JsonCodec.decode": goflux_decode}, rounds
    )
    return enc, dec, len(data)
