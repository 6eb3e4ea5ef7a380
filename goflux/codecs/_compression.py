"""Compression codecs: gzip, raw DEFLATE, Zstandard, Brotli and Snappy, as Go writes them.

Each is a ``Codec[bytes]`` meant to follow a serialising codec in :func:`goflux.codecs.pipe`,
and each decompresses within a bound: a payload that expands past ``max_size`` stops
decompressing there and is a :class:`~goflux.DecodeError`.

Libraries: gzip and DEFLATE are the standard library's ``zlib``; Zstandard is
``compression.zstd`` (Python 3.14) or its backport ``backports.zstd``; Brotli is Google's
``brotli`` binding (1.2+ bounds its output); Snappy's block format is ``cramjam``. The
last three are the extra ``goflux[compression]``, imported when a codec is first made.
"""

from __future__ import annotations

import functools
import struct
import sys
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any, ClassVar, Final, cast

from goflux._extras import require
from goflux.codecs._bounds import (
    DEFAULT_MAX_SIZE,
    as_bytes,
    check_max_size,
    corrupt,
    exceeded,
    readable,
)

__all__ = ("Brotli", "Flate", "Gzip", "Snappy", "Zstd")

_Bytes = bytes | bytearray | memoryview

_HUFFMAN_ONLY: Final = -2
_BEST_SPEED: Final = 1
_BEST_COMPRESSION: Final = 9
_DEFAULT: Final = -1
_GZIP_WBITS: Final = 31  # a gzip member: header and trailer checked by zlib
_RAW_WBITS: Final = -15  # raw DEFLATE, as Go's compress/flate writes it
_FIRST_STEP: Final = 64  # the input a member after the first is handed at first
_decompressobj = zlib.decompressobj
_compress = zlib.compress
_crc32 = zlib.crc32
_pack_trailer = struct.Struct("<II").pack


def _arguments(**given: tuple[object, object]) -> str:
    """``name=value`` for each argument that differs from its default."""
    return ", ".join(
        f"{name}={value!r}" for name, (value, default) in given.items() if value != default
    )


def _check_level(codec: str, level: int, low: int, high: int) -> int:
    if not isinstance(level, int) or isinstance(level, bool):
        raise TypeError(f"{codec}: level must be an int, not {type(level).__name__}")
    if not low <= level <= high:
        raise ValueError(f"{codec}: level must be between {low} and {high}, not {level}")
    return level


class _Deflate:
    """gzip and raw DEFLATE through zlib: levels as Go's compress/flate numbers them."""

    __slots__ = ("_budget", "_level", "_max_size")

    _name: ClassVar[str]
    _wbits: ClassVar[int]

    def __init__(self, level: int = _DEFAULT, *, max_size: int | None = DEFAULT_MAX_SIZE) -> None:
        self._level = _check_level(self._name, level, _HUFFMAN_ONLY, _BEST_COMPRESSION)
        self._max_size = check_max_size(self._name, max_size)
        self._budget = 0 if self._max_size is None else self._max_size + 1  # 0: no limit

    @property
    def level(self) -> int:
        """The compression level: -2 (Huffman only), -1 (default, 6), 0 (none) to 9."""
        return self._level

    @property
    def max_size(self) -> int | None:
        """The most bytes a payload may decompress to (None: no limit)."""
        return self._max_size

    def __repr__(self) -> str:
        args = _arguments(
            level=(self._level, _DEFAULT), max_size=(self._max_size, DEFAULT_MAX_SIZE)
        )
        return f"{self._name}({args})"

    def _deflate(self, data: _Bytes) -> bytes:
        if self._level == _HUFFMAN_ONLY:
            compressor = zlib.compressobj(
                _DEFAULT, zlib.DEFLATED, _RAW_WBITS, 8, zlib.Z_HUFFMAN_ONLY
            )
            return compressor.compress(data) + compressor.flush()
        return _compress(data, self._level, _RAW_WBITS)

    def _inflate(self, data: _Bytes, members: bool) -> bytes:
        """Inflate ``data`` (gzip members one after another if ``members``), bounded."""
        # max_length makes zlib stop once it has produced that much: the bound holds
        # while decompressing, and the output buffer never grows past it.
        budget = self._budget
        inflater = _decompressobj(self._wbits)
        try:
            out = inflater.decompress(data, budget)
        except zlib.error as exc:
            raise corrupt(self._name, data, exc) from exc
        if inflater.eof and not inflater.unused_data and (len(out) < budget or not budget):
            return out  # one whole stream within the bound: the common case
        limit = self._max_size
        if limit is not None and len(out) > limit:
            raise exceeded(self._name, data, limit)
        if not inflater.eof:
            raise corrupt(self._name, data, "truncated input (the stream does not end)")
        rest = len(inflater.unused_data)
        if not members:
            raise corrupt(self._name, data, f"{rest} bytes after the final block")
        return self._more_members(data, out, len(data) - rest)

    def _more_members(self, data: _Bytes, first: bytes, start: int) -> bytes:
        """Inflate the members from ``start`` on, after the ``first`` one's output.

        zlib copies whatever follows a member's end into ``unused_data``: handing each
        member the rest of the input would cost its whole length per member, quadratic
        time for many small ones. So each member gets a slice of the input (no copy)
        that starts small and doubles until the member ends, and what zlib copies
        is at most about four times the member.
        """
        limit = self._max_size
        parts = [first]
        total = len(first)
        view = memoryview(data)
        end = len(view)
        position = start
        while position < end:
            inflater = _decompressobj(self._wbits)
            step = _FIRST_STEP
            while True:
                chunk = view[position : position + step]
                try:
                    out = inflater.decompress(chunk, 0 if limit is None else limit + 1 - total)
                except zlib.error as exc:
                    raise corrupt(self._name, data, exc) from exc
                total += len(out)
                if limit is not None and total > limit:
                    raise exceeded(self._name, data, limit)
                parts.append(out)
                if inflater.eof:
                    position += len(chunk) - len(inflater.unused_data)
                    break
                position += len(chunk)  # all of it read: the output was not bounded
                if position >= end:
                    raise corrupt(self._name, data, "truncated input (a member does not end)")
                step *= 2
        return b"".join(parts)


class Gzip(_Deflate):
    """gzip (RFC 1952), as Go's ``compress/gzip`` and goencode's ``gzip`` codec write it.

    ``Gzip()`` compresses at zlib's default level (6, Go's ``gzip.DefaultCompression``);
    ``level`` takes Go's numbers: -2 ``HuffmanOnly``, -1 ``DefaultCompression``, 0
    ``NoCompression``, 1 ``BestSpeed`` to 9 ``BestCompression``. The header is the one
    Go writes (no name, no modification time, OS byte 255, XFL 2 at level 9 and 4 at
    level 1), so the same bytes come out on every machine. Decoding reads gzip members
    one after another, as Go's reader does, and checks each CRC-32 and length.

    ``max_size`` (default 64 MiB, None for no limit) bounds the decompressed size:
    a payload that expands further is a :class:`~goflux.DecodeError`, raised as soon
    as zlib has produced one byte more than the limit. Truncated and corrupt input is
    a ``DecodeError`` too.

    Raises:
        ValueError: ``level`` is outside -2..9 or ``max_size`` is not positive.
    """

    __slots__ = ("_header",)

    content_type: ClassVar[str] = "application/gzip"
    """The MIME type of what it writes (RFC 6713)."""
    content_coding: ClassVar[str | None] = "gzip"
    """Its HTTP content-coding token (``Content-Encoding: gzip``)."""

    _name = "Gzip"
    _wbits = _GZIP_WBITS

    def __init__(self, level: int = _DEFAULT, *, max_size: int | None = DEFAULT_MAX_SIZE) -> None:
        super().__init__(level, max_size=max_size)
        xfl = {_BEST_COMPRESSION: 2, _BEST_SPEED: 4}.get(self._level, 0)
        # ID1 ID2, CM=8 (deflate), FLG=0, MTIME=0, XFL, OS=255 (unknown): Go's header.
        self._header = struct.pack("<BBBBIBB", 0x1F, 0x8B, 8, 0, 0, xfl, 255)

    def encode(self, value: _Bytes, /) -> bytes:
        """Return ``value`` gzip-compressed.

        Raises:
            EncodeError: ``value`` is not bytes-like.
        """
        data = value if type(value) is bytes else as_bytes("Gzip", value)
        trailer = _pack_trailer(_crc32(data), len(data) & 0xFFFFFFFF)
        return b"".join((self._header, self._deflate(data), trailer))

    def decode(self, data: bytes, /) -> bytes:
        """Return the bytes the gzip ``data`` holds.

        Raises:
            DecodeError: ``data`` is not gzip, is truncated or corrupt, or decompresses
                past ``max_size``.
        """
        if type(data) is not bytes:
            data = readable("Gzip", data)  # type: ignore[assignment]
        return self._inflate(data, True)


class Flate(_Deflate):
    """Raw DEFLATE (RFC 1951), as Go's ``compress/flate`` and goencode's ``flate`` write it.

    No zlib or gzip wrapper and no checksum (HTTP's ``deflate`` coding is the zlib
    format, which this is not). Levels as for :class:`Gzip`: -2 to 9, default -1 (6).
    Decoding refuses bytes after the final block (Go's reader ignores them; nothing
    Go writes has any).

    ``max_size`` (default 64 MiB, None for no limit) bounds the decompressed size, as
    for :class:`Gzip`.

    Raises:
        ValueError: ``level`` is outside -2..9 or ``max_size`` is not positive.
    """

    __slots__ = ()

    content_type: ClassVar[str] = "application/octet-stream"
    """The MIME type of what it writes: raw DEFLATE has none of its own."""
    content_coding: ClassVar[str | None] = None
    """No HTTP content coding: HTTP's ``deflate`` means the zlib format."""

    _name = "Flate"
    _wbits = _RAW_WBITS

    def encode(self, value: _Bytes, /) -> bytes:
        """Return ``value`` compressed as raw DEFLATE.

        Raises:
            EncodeError: ``value`` is not bytes-like.
        """
        return self._deflate(value if type(value) is bytes else as_bytes("Flate", value))

    def decode(self, data: bytes, /) -> bytes:
        """Return the bytes the raw DEFLATE ``data`` holds.

        Raises:
            DecodeError: ``data`` is truncated or corrupt, has bytes after its final
                block, or decompresses past ``max_size``.
        """
        if type(data) is not bytes:
            data = readable("Flate", data)  # type: ignore[assignment]
        return self._inflate(data, False)


def _zstd_module() -> ModuleType:
    if sys.version_info >= (3, 14):
        from compression import zstd  # noqa: PLC0415

        return zstd
    require("backports.zstd", "compression", "Zstd")
    from backports import zstd  # noqa: PLC0415

    return zstd


_ZSTD_DEFAULT_LEVEL: Final = 3
_ZSTD_MIN_WINDOW_LOG: Final = 23  # 8 MiB: the window every decoder should support (RFC 8878)
_ZSTD_MAX_WINDOW_LOG: Final = 31
_ZSTD_SKIPPABLE: Final = (
    b"\x2a\x4d\x18"  # a skippable frame's magic, 0x184D2A5?, after its first byte
)


class Zstd:
    """Zstandard (RFC 8878) frames, as goencode's ``zstd`` (klauspost/compress) writes them.

    ``level`` is zstd's own scale, default 3 (zstd's default); klauspost's
    ``SpeedFastest``, ``SpeedDefault``, ``SpeedBetterCompression`` and
    ``SpeedBestCompression`` correspond to about 1, 3, 7 and 11. The frame states the
    content size and ends with a checksum of it (klauspost writes one by default), so
    corruption is caught. Decoding reads frames one after another (skippable frames
    included), as klauspost's ``DecodeAll`` does; empty input is empty output, as there.
    Time grows with the input's length, whatever the frames: each frame after the
    first costs a decompression context (about 6 us; the binding makes one per
    frame), so 1 MB of the smallest frames takes about half a second, and skippable
    frames are stepped over without one.

    ``max_size`` (default 64 MiB, None for no limit) bounds the decompressed size, as
    for :class:`Gzip`; the window a frame may ask for is bounded too, to the larger of
    8 MiB and ``max_size``, so a header cannot make the decoder allocate more.

    Needs ``goflux[compression]`` on Python before 3.14 (``backports.zstd``).

    Raises:
        ValueError: ``level`` is outside zstd's range or ``max_size`` is not positive.
        MissingDependency: ``backports.zstd`` is not installed.
    """

    __slots__ = (
        "_compressor",
        "_decompressor",
        "_error",
        "_frame_size",
        "_level",
        "_max_size",
        "_options",
    )

    content_type: ClassVar[str] = "application/zstd"
    """The MIME type of what it writes (RFC 8878)."""
    content_coding: ClassVar[str | None] = "zstd"
    """Its HTTP content-coding token (``Content-Encoding: zstd``)."""

    def __init__(
        self, level: int = _ZSTD_DEFAULT_LEVEL, *, max_size: int | None = DEFAULT_MAX_SIZE
    ) -> None:
        zstd = _zstd_module()
        low, high = zstd.CompressionParameter.compression_level.bounds()
        self._level = _check_level("Zstd", level, low, high)
        self._max_size = check_max_size("Zstd", max_size)
        window_log = _ZSTD_MAX_WINDOW_LOG
        if self._max_size is not None:
            window_log = min(
                max(_ZSTD_MIN_WINDOW_LOG, (self._max_size - 1).bit_length()), _ZSTD_MAX_WINDOW_LOG
            )
        # A plain int key: the enum member costs a conversion on every message.
        self._options = {int(zstd.DecompressionParameter.window_log_max): window_log}
        # One compressor for every frame (it is thread safe): making one is the cost.
        parameter = zstd.CompressionParameter
        compressor = zstd.ZstdCompressor(
            options={parameter.compression_level: self._level, parameter.checksum_flag: 1}
        )
        flush_frame = zstd.ZstdCompressor.FLUSH_FRAME

        def compress(data: _Bytes) -> bytes:
            return cast(bytes, compressor.compress(data, flush_frame))

        self._compressor = compress
        self._decompressor = cast(Callable[..., Any], zstd.ZstdDecompressor)
        self._error = cast(type[Exception], zstd.ZstdError)
        self._frame_size = cast(Callable[[_Bytes], int], zstd.get_frame_size)

    @property
    def level(self) -> int:
        """The compression level (zstd's scale)."""
        return self._level

    @property
    def max_size(self) -> int | None:
        """The most bytes a payload may decompress to (None: no limit)."""
        return self._max_size

    def __repr__(self) -> str:
        args = _arguments(
            level=(self._level, _ZSTD_DEFAULT_LEVEL), max_size=(self._max_size, DEFAULT_MAX_SIZE)
        )
        return f"Zstd({args})"

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        """Pickle as its arguments: the compressor is made again (Spark ships codecs)."""
        return (functools.partial(Zstd, max_size=self._max_size), (self._level,))

    def encode(self, value: _Bytes, /) -> bytes:
        """Return ``value`` as one Zstandard frame.

        Raises:
            EncodeError: ``value`` is not bytes-like.
        """
        return self._compressor(value if type(value) is bytes else as_bytes("Zstd", value))

    def decode(self, data: bytes, /) -> bytes:
        """Return the bytes the Zstandard frames in ``data`` hold.

        Raises:
            DecodeError: ``data`` is not Zstandard, is truncated or corrupt, asks for a
                window past the bound, or decompresses past ``max_size``.
        """
        if type(data) is not bytes:
            data = readable("Zstd", data)  # type: ignore[assignment]
        if not data:
            return b""  # DecodeAll of nothing is nothing
        out, end = self._frame(data, data, 0)
        if end == len(data):
            return out  # one frame: the common case
        return self._more_frames(data, out, end)

    def _frame(self, data: _Bytes, frame: _Bytes, total: int) -> tuple[bytes, int]:
        """Decompress the frame ``frame`` starts with, ``total`` bytes into the output.

        Returns its output and where in ``frame`` the next one starts.
        """
        limit = self._max_size
        decompressor = self._decompressor(options=self._options)
        try:
            out: bytes = decompressor.decompress(frame, -1 if limit is None else limit + 1 - total)
        except self._error as exc:
            raise corrupt("Zstd", data, exc) from exc
        if limit is not None and total + len(out) > limit:
            raise exceeded("Zstd", data, limit)
        if not decompressor.eof:
            raise corrupt("Zstd", data, "truncated input (the frame does not end)")
        return out, len(frame) - len(decompressor.unused_data)

    def _more_frames(self, data: _Bytes, first: bytes, start: int) -> bytes:
        """Decompress the frames from ``start`` on, after the ``first`` one's output.

        The decompressor copies whatever follows a frame into ``unused_data``: handing
        each frame the rest of the input would cost its whole length per frame,
        quadratic time for many small ones. So each frame's length is read from its
        header and blocks first, and the decompressor gets that frame alone (a slice,
        no copy); skippable frames are stepped over.
        """
        parts = [first]
        total = len(first)
        view = memoryview(data)
        end = len(view)
        position = start
        frame_size = self._frame_size
        while position < end:
            rest = view[position:]
            try:
                size = frame_size(rest)
            except self._error:
                # Truncated or corrupt: the decompressor says which, in its words.
                self._frame(data, rest, total)
                raise corrupt("Zstd", data, "truncated input (the frame does not end)") from None
            if rest[1:4].tobytes() != _ZSTD_SKIPPABLE or rest[0] & 0xF0 != 0x50:
                out, _ = self._frame(data, rest[:size], total)
                total += len(out)
                parts.append(out)
            position += size
        return b"".join(parts)


_BROTLI_DEFAULT_QUALITY: Final = 6  # andybalholm/brotli's DefaultCompression
_BROTLI_MAX_QUALITY: Final = 11


class Brotli:
    """Brotli (RFC 7932), as goencode's ``brotli`` (andybalholm/brotli) writes it.

    ``level`` is the quality, 0 (fastest) to 11 (smallest), default 6 as in Go
    (Google's Python binding defaults to 11, much slower).

    ``max_size`` (default 64 MiB, None for no limit) bounds the decompressed size, as
    for :class:`Gzip` (the decoder's window is at most 16 MiB by the format).

    Needs ``goflux[compression]`` (Google's ``brotli`` 1.2 or later).

    Raises:
        ValueError: ``level`` is outside 0..11 or ``max_size`` is not positive.
        MissingDependency: ``brotli`` is not installed.
    """

    __slots__ = ("_compress", "_decompressor", "_error", "_level", "_max_size")

    content_type: ClassVar[str] = "application/octet-stream"
    """The MIME type of what it writes: Brotli has no registered media type."""
    content_coding: ClassVar[str | None] = "br"
    """Its HTTP content-coding token (``Content-Encoding: br``)."""

    def __init__(
        self, level: int = _BROTLI_DEFAULT_QUALITY, *, max_size: int | None = DEFAULT_MAX_SIZE
    ) -> None:
        require("brotli", "compression", "Brotli")
        import brotli  # noqa: PLC0415

        self._level = _check_level("Brotli", level, 0, _BROTLI_MAX_QUALITY)
        self._max_size = check_max_size("Brotli", max_size)
        self._compress = cast(Callable[..., bytes], brotli.compress)
        self._decompressor = cast(Callable[[], Any], brotli.Decompressor)
        self._error = cast(type[Exception], brotli.error)

    @property
    def level(self) -> int:
        """The quality, 0 to 11."""
        return self._level

    @property
    def max_size(self) -> int | None:
        """The most bytes a payload may decompress to (None: no limit)."""
        return self._max_size

    def __repr__(self) -> str:
        args = _arguments(
            level=(self._level, _BROTLI_DEFAULT_QUALITY),
            max_size=(self._max_size, DEFAULT_MAX_SIZE),
        )
        return f"Brotli({args})"

    def encode(self, value: _Bytes, /) -> bytes:
        """Return ``value`` Brotli-compressed.

        Raises:
            EncodeError: ``value`` is not bytes-like.
        """
        if type(value) is not bytes:
            value = as_bytes("Brotli", value)
        return self._compress(value, quality=self._level)

    def decode(self, data: bytes, /) -> bytes:
        """Return the bytes the Brotli stream ``data`` holds.

        Raises:
            DecodeError: ``data`` is truncated or corrupt, has bytes after its end, or
                decompresses past ``max_size``.
        """
        if type(data) is not bytes:
            data = readable("Brotli", data)  # type: ignore[assignment]
        limit = self._max_size
        decompressor = self._decompressor()
        try:
            if limit is None:
                out: bytes = decompressor.process(data)
            else:
                # The output buffer stops growing at the limit: the bound holds while
                # decompressing.
                out = decompressor.process(data, output_buffer_limit=limit + 1)
        except self._error as exc:
            raise corrupt("Brotli", data, exc) from exc
        if limit is not None and len(out) > limit:
            raise exceeded("Brotli", data, limit)
        if not decompressor.is_finished():
            raise corrupt("Brotli", data, "truncated input (the stream does not end)")
        return out


_SNAPPY_SHORT_LENGTH: Final = 1 << 21  # what a varint of at most three bytes can say


def _cramjam_snappy() -> ModuleType:
    require("cramjam", "compression", "Snappy")
    import cramjam  # noqa: PLC0415

    return cramjam.snappy


class Snappy:
    """Snappy's block format, as golang/snappy's ``Encode``/``Decode`` and goencode write it.

    Not the framed (stream) format: a varint of the decoded length, then the
    compressed block, with no checksum. Snappy has no levels.

    ``max_size`` (default 64 MiB, None for no limit) bounds the decompressed size: the
    length the block declares is checked against it before anything is allocated,
    and a block that decodes to another length than it declares is a
    :class:`~goflux.DecodeError`.

    Needs ``goflux[compression]`` (``cramjam``).

    Raises:
        ValueError: ``max_size`` is not positive.
        MissingDependency: ``cramjam`` is not installed.
    """

    __slots__ = ("_compress", "_decompress", "_error", "_length", "_max_size")

    content_type: ClassVar[str] = "application/octet-stream"
    """The MIME type of what it writes: the block format has none of its own."""
    content_coding: ClassVar[str | None] = None
    """No HTTP content coding."""

    def __init__(self, *, max_size: int | None = DEFAULT_MAX_SIZE) -> None:
        snappy = _cramjam_snappy()
        self._max_size = check_max_size("Snappy", max_size)
        self._compress = cast(Callable[[_Bytes], Any], snappy.compress_raw)
        self._decompress = cast(Callable[[_Bytes], Any], snappy.decompress_raw)
        self._length = cast(Callable[[_Bytes], int], snappy.decompress_raw_len)
        self._error = cast(type[Exception], sys.modules["cramjam"].DecompressionError)

    @property
    def max_size(self) -> int | None:
        """The most bytes a payload may decompress to (None: no limit)."""
        return self._max_size

    def __repr__(self) -> str:
        return f"Snappy({_arguments(max_size=(self._max_size, DEFAULT_MAX_SIZE))})"

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        """Pickle as its arguments: cramjam's functions are looked up again."""
        return (functools.partial(Snappy, max_size=self._max_size), ())

    def encode(self, value: _Bytes, /) -> bytes:
        """Return ``value`` as one Snappy block.

        Raises:
            EncodeError: ``value`` is not bytes-like.
        """
        if type(value) is not bytes:
            value = as_bytes("Snappy", value)
        return bytes(self._compress(value))

    def decode(self, data: bytes, /) -> bytes:
        """Return the bytes the Snappy block ``data`` holds.

        Raises:
            DecodeError: ``data`` is truncated or corrupt, declares a length past
                ``max_size``, or decodes to another length than it declares.
        """
        if type(data) is not bytes:
            data = readable("Snappy", data)  # type: ignore[assignment]
        limit = self._max_size
        try:
            # A varint that ends within three bytes declares less than 2 MiB; any
            # longer one is read (the header only) and checked before allocating.
            if limit is not None and (
                limit < _SNAPPY_SHORT_LENGTH
                or len(data) < 3
                or (data[0] >= 0x80 and data[1] >= 0x80 and data[2] >= 0x80)
            ):
                declared = self._length(data)
                if declared > limit:
                    raise exceeded("Snappy", data, limit)
            return bytes(self._decompress(data))
        except self._error as exc:
            raise corrupt("Snappy", data, exc) from exc
