"""Decompression bombs: a small payload of each format that expands to ``size`` zeros.

Built cheaply: identical independent pieces (a DEFLATE block sequence after a full
flush, a Zstandard frame, ...) repeated, so 1 GiB costs well under a second.
"""

from __future__ import annotations

import struct
import zlib

import brotli as b
from backports import zstd as z

MiB = 1 << 20
GiB = 1 << 30
PIECE = 16 * MiB


def _deflate_body(size: int) -> bytes:
    assert size % PIECE == 0
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    # After a full flush the compressor forgets what came before: each piece is the
    # same bytes, and any number of them is a valid DEFLATE stream.
    piece = compressor.compress(bytes(PIECE)) + compressor.flush(zlib.Z_FULL_FLUSH)
    final = zlib.compressobj(9, zlib.DEFLATED, -15).flush()  # an empty final block
    return piece * (size // PIECE) + final


def _crc32_of_zeros(size: int) -> int:
    crc = 0
    zeros = bytes(PIECE)
    for _ in range(size // PIECE):
        crc = zlib.crc32(zeros, crc)
    return crc


def flate(size: int = GiB) -> bytes:
    return _deflate_body(size)


def gzip(size: int = GiB) -> bytes:
    header = struct.pack("<BBBBIBB", 0x1F, 0x8B, 8, 0, 0, 0, 255)
    trailer = struct.pack("<II", _crc32_of_zeros(size), size & 0xFFFFFFFF)
    return header + _deflate_body(size) + trailer


def zstd(size: int = GiB) -> bytes:
    assert size % PIECE == 0
    compressor = z.ZstdCompressor(1)
    parts = [compressor.compress(bytes(PIECE)) for _ in range(size // PIECE)]
    parts.append(compressor.flush())
    return b"".join(parts)


def brotli(size: int = GiB) -> bytes:
    assert size % PIECE == 0
    compressor = b.Compressor(quality=1)
    zeros = bytes(PIECE)
    parts = [compressor.process(zeros) for _ in range(size // PIECE)]
    parts.append(compressor.finish())
    return b"".join(parts)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def snappy(size: int = GiB) -> bytes:
    """A block that declares ``size`` bytes: one literal zero, then copies of it.

    Snappy's copies are at most 64 bytes for 2 bytes of input (a 32:1 ratio), so a
    real 1 GiB block is 32 MiB; what a bomb can do instead is declare a length its
    body does not have, which the decoder must refuse before allocating it.
    """
    literal = b"\x00\x00"  # tag: literal of length 1, then the byte
    copy = bytes([(63 << 2) | 2]) + struct.pack("<H", 1)  # copy 64 bytes, offset 1
    return _varint(size) + literal + copy * 1024
