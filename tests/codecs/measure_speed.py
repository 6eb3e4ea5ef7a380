"""Each byte codec against the library it is built on, called directly (not run by pytest).

Usage: python -m tests.codecs.measure_speed [NAME ...]
Interleaved pairs, the best of 15 rounds each, on a 1 KB JSON object and 1 MB of JSON.
"library" is the one-shot call; "/bounded" rows compare with the library's own bounded
call (what a decoder that must survive a bomb calls), "+bytes" with the result made
bytes (cramjam returns its own buffer type).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import sys
import timeit
import zlib
from collections.abc import Callable
from typing import Any

import brotli
import cramjam
from backports import zstd

from goflux.codecs import Ascii85, Base32, Base64, Brotli, Flate, Gzip, Hex, Snappy, Zstd

LIMIT = 1 << 26
ZSTD_LIKE_OURS = {
    zstd.CompressionParameter.compression_level: 3,
    zstd.CompressionParameter.checksum_flag: 1,
}


def payloads() -> dict[str, bytes]:
    small = {"id": "o-1", "customerId": "c-1", "amount": 12.5, "note": "héllo wörld " * 4}
    rows = [
        {"id": f"o-{i}", "customerId": f"c-{i % 97}", "amount": i * 1.25, "lines": ["a" * (i % 13)]}
        for i in range(12000)
    ]
    return {"1KB": json.dumps(small).encode(), "1MB": json.dumps(rows).encode()[: 1 << 20]}


Fn = Callable[[Any], Any]
CASES: list[tuple[str, Any, Fn, Fn]] = [
    ("Gzip", Gzip(), lambda d: gzip.compress(d, 6, mtime=0), gzip.decompress),
    (
        "Gzip/bounded",
        Gzip(),
        lambda d: zlib.compress(d, 6, 31),
        lambda d: zlib.decompressobj(31).decompress(d, LIMIT),
    ),
    ("Flate", Flate(), lambda d: zlib.compress(d, 6, -15), lambda d: zlib.decompress(d, -15)),
    (
        "Flate/bounded",
        Flate(),
        lambda d: zlib.compress(d, 6, -15),
        lambda d: zlib.decompressobj(-15).decompress(d, LIMIT),
    ),
    ("Zstd", Zstd(), lambda d: zstd.compress(d, options=ZSTD_LIKE_OURS), zstd.decompress),
    (
        "Zstd/bounded",
        Zstd(),
        lambda d: zstd.compress(d, options=ZSTD_LIKE_OURS),
        lambda d: zstd.ZstdDecompressor().decompress(d, LIMIT),
    ),
    ("Brotli", Brotli(), lambda d: brotli.compress(d, quality=6), brotli.decompress),
    (
        "Brotli/bounded",
        Brotli(),
        lambda d: brotli.compress(d, quality=6),
        lambda d: brotli.Decompressor().process(d, output_buffer_limit=LIMIT),
    ),
    ("Snappy", Snappy(), cramjam.snappy.compress_raw, cramjam.snappy.decompress_raw),
    (
        "Snappy+bytes",
        Snappy(),
        lambda d: bytes(cramjam.snappy.compress_raw(d)),
        lambda d: bytes(cramjam.snappy.decompress_raw(d)),
    ),
    ("Base64", Base64(), base64.b64encode, lambda d: binascii.a2b_base64(d, strict_mode=True)),
    ("Base64url", Base64("url"), base64.urlsafe_b64encode, base64.urlsafe_b64decode),
    ("Base32", Base32(), base64.b32encode, base64.b32decode),
    ("Hex", Hex(), binascii.hexlify, binascii.unhexlify),
    ("Ascii85", Ascii85(), base64.a85encode, base64.a85decode),
]


def pair(ours: Fn, theirs: Fn, arg: bytes, number: int, rounds: int = 15) -> tuple[float, float]:
    a, b = [], []
    for _ in range(rounds):
        a.append(timeit.timeit(lambda: ours(arg), number=number))
        b.append(timeit.timeit(lambda: theirs(arg), number=number))
    return min(a) / number, min(b) / number


def main(only: list[str]) -> None:
    for size, data in payloads().items():
        for name, codec, encode, decode in CASES:
            if only and name not in only:
                continue
            number = 1000 if size == "1KB" else 5
            blob = codec.encode(data)
            assert codec.decode(blob) == data
            ours_e, theirs_e = pair(codec.encode, encode, data, number)
            ours_d, theirs_d = pair(codec.decode, decode, blob, number)
            print(
                f"{size} {name:15} encode {ours_e * 1e6:9.1f} us vs {theirs_e * 1e6:9.1f} us "
                f"x{ours_e / theirs_e:4.2f}   decode {ours_d * 1e6:9.1f} us vs "
                f"{theirs_d * 1e6:9.1f} us x{ours_d / theirs_d:4.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
