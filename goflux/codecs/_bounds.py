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
    "readable",
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
    """Return ``value`` as what the C libraries read: bytes-like, one byte an item.

    bytes and bytearray come back as they are, and a memoryview of contiguous bytes;
    one of wider items (``array('I')``) is cast to bytes without a copy, so its length
    counts bytes; one that is not contiguous (``view[::2]``) is copied.

    Raises:
        EncodeError: It is not bytes, bytearray or memoryview, or is a released one.
    """
    if isinstance(value, bytes | bytearray):
        return value
    if isinstance(value, memoryview):
        flat = _flat(value)
        if flat is not None:
            return flat
        raise EncodeError(f"{codec} cannot encode a released memoryview", type_name="bytes")
    raise EncodeError(
        f"{codec} cannot encode {type(value).__name__}: expected bytes, bytearray or memoryview",
        type_name="bytes",
    )


def readable(codec: str, data: object) -> bytes | bytearray | memoryview:
    """Return ``data`` to decode as bytes-like, one byte an item, as :func:`as_bytes` does.

    Raises:
        DecodeError: It is not bytes, bytearray or memoryview, or is a released one.
    """
    if isinstance(data, bytes | bytearray):
        return data
    if isinstance(data, memoryview):
        flat = _flat(data)
        if flat is not None:
            return flat
        raise DecodeError(f"{codec} cannot decode a released memoryview", type_name="bytes", size=0)
    raise not_bytes(codec, data)


def _flat(view: memoryview) -> bytes | memoryview | None:
    """``view`` as contiguous single bytes (a copy only if it is not contiguous), or None."""
    try:
        if not view.c_contiguous:
            return view.tobytes()
        if view.ndim == 1 and view.format == "B":
            return view
        return view.cast("B")
    except ValueError:  # released
        return None


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
