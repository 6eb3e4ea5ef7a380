"""JsonCodec against the raw pydantic TypeAdapter it is built on (10-field model)."""

from __future__ import annotations

from pydantic import TypeAdapter

from bench.harness import Table, interleave
from bench.payload import ORDER, Order
from bench.sizes import Sizes
from goflux import JsonCodec


def run(rounds: int, sizes: Sizes) -> list[Table]:
    n = sizes.codec_ops
    codec = JsonCodec(Order)
    adapter = TypeAdapter(Order)
    data = codec.encode(ORDER)

    def raw_encode() -> int:
        for _ in range(n):
            adapter.dump_json(ORDER)
        return n

    def goflux_encode() -> int:
        for _ in range(n):
            codec.encode(ORDER)
        return n

    def raw_decode() -> int:
        for _ in range(n):
            adapter.validate_json(data)
        return n

    def goflux_decode() -> int:
        for _ in range(n):
            codec.decode(data)
        return n

    return [
        Table(
            "encode",
            f"Encode the 10-field model ({len(data)} bytes of JSON)",
            interleave(
                {"raw TypeAdapter.dump_json": raw_encode, "JsonCodec.encode": goflux_encode},
                rounds,
            ),
            "raw TypeAdapter.dump_json",
        ),
        Table(
            "decode",
            "Decode the same",
            interleave(
                {"raw TypeAdapter.validate_json": raw_decode, "JsonCodec.decode": goflux_decode},
                rounds,
            ),
            "raw TypeAdapter.validate_json",
        ),
    ]
