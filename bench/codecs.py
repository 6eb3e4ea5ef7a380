"""JsonCodec against the raw pydantic TypeAdapter it is built on (10-field model).

Each case counts the results that came out right (the expected bytes, a model with the
expected ID), so a codec that returned nothing could not pass for a fast one.
"""

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
        done = 0
        for _ in range(n):
            done += adapter.dump_json(ORDER) == data
        return done

    def goflux_encode() -> int:
        done = 0
        for _ in range(n):
            done += codec.encode(ORDER) == data
        return done

    def raw_decode() -> int:
        done = 0
        for _ in range(n):
            done += adapter.validate_json(data).id == ORDER.id
        return done

    def goflux_decode() -> int:
        done = 0
        for _ in range(n):
            done += codec.decode(data).id == ORDER.id
        return done

    return [
        Table(
            "encode",
            f"Encode the 10-field model ({len(data)} bytes of JSON)",
            interleave(
                {"raw TypeAdapter.dump_json": raw_encode, "JsonCodec.encode": goflux_encode},
                rounds,
                expected=n,
            ),
            "raw TypeAdapter.dump_json",
        ),
        Table(
            "decode",
            "Decode the same",
            interleave(
                {"raw TypeAdapter.validate_json": raw_decode, "JsonCodec.decode": goflux_decode},
                rounds,
                expected=n,
            ),
            "raw TypeAdapter.validate_json",
        ),
    ]
