"""What the byte codecs share: the decompression bound, input checks and errors."""

from __future__ import annotations

from goflux._errors import DecodeError, EncodeError

__all__ = (
    "DEFAULT_MAX_SIZE",
    "as_bytes",
    "check_max_size",
    "corrupt",
    "exceeded",
    "not_bytes",
)

DEFAULT_MAX_SIZE = 64 * 1024 * 1024
"""The decompressed size a compression codec accepts by default: 64 MiB.

A payload that would expand further stops decompressing at the limit; decoding a
1 GiB bomb then takes about 0.1 s and, at its peak, about twice the limit in memory
(the output so far and its last copy), measured by ``tests/codecs/test_bomb_memory.py``.
"""


def check_max_size(codec: str, max_size: int | None) -> int | None:
    """Validate a ``max_size`` argument: a positive int, or None for no limit.

    Raises:
        ValueError: It is zero or negative.
        TypeError: It is not an int.
    """
    if max_size is None:
        return None
    if not isinstance(max_size, int) or isinstance(max_size, bool):
        raise TypeError(f"{codec}: max_size must be an int or None, not {type(max_size).__name__}")
    if max_size <= 0:
        raise ValueError(f"{codec}: max_size must be positive (None for no limit), not {max_size}")
    return max_size


def as_bytes(codec: str, value: object) -> bytes | bytearray | memoryview:
    """Return ``value`` if it is bytes-like (what the C libraries take without a copy).

    Raises:
        EncodeError: It is not bytes, bytearray or memoryview.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        return value
    raise EncodeError(
        f"{codec} cannot encode {type(value).__name__}: expected bytes, bytearray or memoryview",
        type_name="bytes",
    )


def not_bytes(codec: str, data: object) -> DecodeError:
    """The error for decoding something that is not bytes-like."""
    return DecodeError(
        f"{codec} cannot decode {type(data).__name__}: expected bytes", type_name="bytes", size=0
    )


def corrupt(codec: str, data: bytes | bytearray | memoryview, reason: object) -> DecodeError:
    """The error for malformed input (``reason``: the library's words or an exception)."""
    detail = " ".join(str(reason).split()) or type(reason).__name__
    return DecodeError(
        f"{codec} cannot decode {len(data)} bytes: {detail}", type_name="bytes", size=len(data)
    )


def exceeded(codec: str, data: bytes | bytearray | memoryview, limit: int) -> DecodeError:
    """The error for input that decompresses past ``limit`` bytes."""
    return DecodeError(
        f"{codec} cannot decode {len(data)} bytes: the decompressed size exceeds the limit "
        f"of {limit} bytes (max_size)",
        type_name="bytes",
        size=len(data),
    )
