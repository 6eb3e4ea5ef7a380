from __future__ import annotations

import array
import base64
import gzip as stdlib_gzip
import random
import struct
import threading
import zlib
from typing import Any

import cramjam
import pytest
from backports import zstd

from goflux import BytesCodec, DecodeError, EncodeError
from goflux.codecs import DEFAULT_MAX_SIZE, Base64, Brotli, Flate, Gzip, Snappy, Zstd, pipe
from tests.codecs import bombs
from tests.codecs.payloads import PAYLOADS

MiB = 1 << 20
CODECS = [Gzip, Flate, Zstd, Brotli, Snappy]
IDS = [c.__name__ for c in CODECS]


@pytest.mark.parametrize("make", CODECS, ids=IDS)
@pytest.mark.parametrize("name", list(PAYLOADS))
def test_round_trips(make: Any, name: str) -> None:
    codec = make()
    data = PAYLOADS[name]
    encoded = codec.encode(data)
    assert type(encoded) is bytes
    decoded = codec.decode(encoded)
    assert type(decoded) is bytes
    assert decoded == data
    if name == "1 MB json":
        assert len(encoded) < len(data) // 4


@pytest.mark.parametrize("make", CODECS, ids=IDS)
def test_takes_bytearray_and_memoryview(make: Any) -> None:
    codec = make()
    data = PAYLOADS["unicode"]
    encoded = codec.encode(bytearray(data))
    assert codec.decode(memoryview(encoded)) == data
    assert codec.decode(bytearray(codec.encode(memoryview(data)))) == data


@pytest.mark.parametrize("make", CODECS, ids=IDS)
def test_refuses_what_is_not_bytes(make: Any) -> None:
    codec = make()
    with pytest.raises(EncodeError, match=f"{make.__name__} cannot encode str"):
        codec.encode("text")
    with pytest.raises(DecodeError, match=f"{make.__name__} cannot decode str: expected bytes"):
        codec.decode("text")


@pytest.mark.parametrize(
    ("make", "levels"),
    [
        (Gzip, [-2, -1, 0, 1, 5, 9]),
        (Flate, [-2, -1, 0, 1, 5, 9]),
        (Zstd, [-5, 1, 3, 10, 19]),
        (Brotli, [0, 1, 6, 11]),
    ],
    ids=["Gzip", "Flate", "Zstd", "Brotli"],
)
def test_levels(make: Any, levels: list[int]) -> None:
    data = PAYLOADS["1 MB json"][:200_000]
    sizes = {}
    for level in levels:
        codec = make(level)
        assert codec.level == level
        encoded = codec.encode(data)
        sizes[level] = len(encoded)
        assert make().decode(encoded) == data  # any level decodes with the defaults
    if make in (Gzip, Flate):
        assert sizes[0] > len(data) > sizes[-2] > sizes[1] >= sizes[9]  # stored, Huffman only
    else:
        assert sizes[levels[0]] > sizes[levels[-1]]


@pytest.mark.parametrize(
    ("make", "bad"),
    [(Gzip, [-3, 10]), (Flate, [-3, 10]), (Zstd, [23, 10**9]), (Brotli, [-1, 12])],
    ids=["Gzip", "Flate", "Zstd", "Brotli"],
)
def test_levels_out_of_range(make: Any, bad: list[int]) -> None:
    for level in bad:
        with pytest.raises(ValueError, match="level must be between"):
            make(level)
    with pytest.raises(TypeError, match="level must be an int"):
        make(1.5)


def test_defaults_are_gos() -> None:
    assert Gzip().level == Flate().level == -1  # Go's DefaultCompression
    assert Zstd().level == 3  # klauspost SpeedDefault, zstd's default
    assert Brotli().level == 6  # andybalholm's DefaultCompression
    for make in CODECS:
        assert make().max_size == DEFAULT_MAX_SIZE == 64 * MiB


def test_repr_shows_what_differs_from_the_default() -> None:
    assert repr(Gzip()) == "Gzip()"
    assert repr(Gzip(9, max_size=MiB)) == "Gzip(level=9, max_size=1048576)"
    assert repr(Flate(max_size=None)) == "Flate(max_size=None)"
    assert repr(Zstd(19)) == "Zstd(level=19)"
    assert repr(Brotli(11)) == "Brotli(level=11)"
    assert repr(Snappy(max_size=10)) == "Snappy(max_size=10)"


def test_content_types() -> None:
    assert Gzip.content_type == "application/gzip"
    assert Zstd.content_type == "application/zstd"
    for codec in (Flate, Brotli, Snappy):
        assert codec.content_type == "application/octet-stream"
    assert [c.content_coding for c in CODECS] == ["gzip", None, "zstd", "br", None]


@pytest.mark.parametrize("make", CODECS, ids=IDS)
def test_max_size_must_be_positive(make: Any) -> None:
    with pytest.raises(ValueError, match="max_size must be positive"):
        make(max_size=0)
    with pytest.raises(TypeError, match="max_size must be an int or None"):
        make(max_size=1.5)


# --- gzip as Go writes it -----------------------------------------------------------


@pytest.mark.parametrize(("level", "xfl"), [(-1, 0), (0, 0), (1, 4), (6, 0), (9, 2), (-2, 0)])
def test_gzip_header_is_the_one_go_writes(level: int, xfl: int) -> None:
    # compress/gzip: ID1 ID2 CM=8 FLG=0 MTIME=0 (a zero Header.ModTime), XFL 2 for
    # BestCompression and 4 for BestSpeed, OS=255 (unknown).
    encoded = Gzip(level).encode(b"hello")
    assert encoded[:10] == bytes([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, xfl, 255])
    crc, size = struct.unpack("<II", encoded[-8:])
    assert (crc, size) == (zlib.crc32(b"hello"), 5)
    assert stdlib_gzip.decompress(encoded) == b"hello"


# What Go's compress/gzip wrote (gzip.NewWriter, Write, Close), as Go programs' tests
# record it: for no input, and for "1351451451512". Go's DEFLATE encoder is its own, so
# the compressed blocks differ from zlib's; the header and what they decode to do not.
GO_GZIP = {
    b"": "H4sIAAAAAAAA/wEAAP//AAAAAAAAAAA=",
    b"1351451451512": "H4sIAAAAAAAA/zI0NjU0ASNTQyNAAAAA//9lZlNKDQAAAA==",
}


@pytest.mark.parametrize(("value", "written"), GO_GZIP.items(), ids=["empty", "digits"])
def test_gzip_decodes_what_go_writes(value: bytes, written: str) -> None:
    go = base64.b64decode(written)
    assert Gzip().decode(go) == value
    assert Gzip().encode(value)[:10] == go[:10]  # the same header
    assert Flate().decode(go[10:-8]) == value  # the DEFLATE stream inside
    assert pipe(BytesCodec(), Gzip(), Base64()).decode(written.encode()) == value


def test_gzip_reads_members_one_after_another_like_go() -> None:
    one, two = Gzip().encode(b"first "), Gzip(9).encode(b"second")
    assert Gzip().decode(one + two) == b"first second"
    # Header fields Go's reader accepts: a name, a comment, a modification time.
    named = stdlib_gzip.compress(b"x", mtime=1_700_000_000)
    assert Gzip().decode(named) == b"x"


def test_gzip_members_share_the_bound() -> None:
    member = Gzip().encode(bytes(600))
    assert len(Gzip(max_size=1200).decode(member * 2)) == 1200
    with pytest.raises(DecodeError, match="exceeds the limit of 1000 bytes"):
        Gzip(max_size=1000).decode(member * 2)


def test_gzip_checks_crc_and_length() -> None:
    encoded = bytearray(Gzip().encode(b"hello world"))
    encoded[-5] ^= 0xFF  # the CRC
    with pytest.raises(DecodeError, match="incorrect data check"):
        Gzip().decode(bytes(encoded))


def test_flate_is_raw_deflate_without_a_wrapper() -> None:
    encoded = Flate().encode(b"hello hello hello")
    assert zlib.decompress(encoded, -15) == b"hello hello hello"
    with pytest.raises(zlib.error):
        zlib.decompress(encoded)  # no zlib header
    assert Flate().decode(zlib.compress(b"abc", 9, -15)) == b"abc"


def test_flate_refuses_bytes_after_the_final_block() -> None:
    with pytest.raises(DecodeError, match="1 bytes after the final block"):
        Flate().decode(Flate().encode(b"abc") + b"\x00")


def test_gzip_of_a_memoryview_of_wide_items_states_its_length_in_bytes() -> None:
    view = memoryview(array.array("I", [1, 2, 3]))  # 12 bytes in 3 items
    encoded = Gzip().encode(view)
    assert encoded[-4:] == struct.pack("<I", 12)  # ISIZE: bytes, not items
    assert stdlib_gzip.decompress(encoded) == view.tobytes()
    assert Gzip().decode(encoded) == view.tobytes()


def _spread(data: bytes) -> memoryview:
    """``data`` as a memoryview that is not contiguous (every other byte of a buffer)."""
    return memoryview(bytes(byte for b in data for byte in (b, 0)))[::2]


@pytest.mark.parametrize("make", CODECS, ids=IDS)
def test_takes_memoryviews_that_are_not_contiguous_or_not_of_bytes(make: Any) -> None:
    codec = make()
    data = PAYLOADS["unicode"]
    encoded = codec.encode(data)
    assert codec.encode(_spread(data)) == encoded
    assert codec.decode(_spread(encoded)) == data
    wide = memoryview(array.array("I", [1, 2, 3]))
    assert codec.decode(codec.encode(wide)) == wide.tobytes()
    assert codec.decode(memoryview(encoded).cast("B", (1, len(encoded)))) == data


class _Fed:
    """Wraps a decompressor factory: counts the bytes handed to every decompressor."""

    def __init__(self, make: Any) -> None:
        self.make = make
        self.bytes = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        inner = self.make(*args, **kwargs)
        outer = self

        class Counted:
            def decompress(self, data: Any, *rest: Any) -> Any:
                outer.bytes += memoryview(data).nbytes
                return inner.decompress(data, *rest)

            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

        return Counted()


_SKIPPABLE = b"\x50\x2a\x4d\x18" + struct.pack("<I", 0)


@pytest.mark.parametrize(
    "kind",
    [
        # 20,000 members or frames to decode: the skippable ones go fast, the others not
        pytest.param("gzip", marks=pytest.mark.slow),
        pytest.param("zstd", marks=pytest.mark.slow),
        "zstd skippable",
    ],
)
def test_many_members_or_frames_cost_what_their_size_does(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Handing each member the rest of the input copies it (as unused_data): n members
    # of a payload then cost n * len(payload) / 2 bytes, 10 000 times the payload here.
    if kind == "gzip":
        codec: Any = Gzip()
        fed = _Fed(zlib.decompressobj)
        monkeypatch.setattr("goflux.codecs._compression._decompressobj", fed)
        member = codec.encode(b"")
    else:
        codec = Zstd()
        fed = _Fed(codec._decompressor)
        codec._decompressor = fed
        member = _SKIPPABLE if kind == "zstd skippable" else codec.encode(b"")
    payload = member * 20_000 + codec.encode(b"end")
    assert codec.decode(payload) == b"end"
    assert fed.bytes <= 8 * len(payload)
    with pytest.raises(DecodeError, match="exceeds the limit of 2 bytes"):
        type(codec)(max_size=2).decode(payload)  # the bound holds past many members


# --- zstd, brotli, snappy -----------------------------------------------------------


def test_zstd_frame_states_the_content_size_and_a_checksum_like_klauspost() -> None:
    encoded = Zstd().encode(b"a" * 1000)
    assert encoded[:4] == b"\x28\xb5\x2f\xfd"
    assert zstd.get_frame_info(encoded).decompressed_size == 1000
    assert encoded[4] & 0b100  # Content_Checksum_flag of the frame header descriptor
    corrupted = bytearray(Zstd().encode(b"abcdefgh" * 10))
    corrupted[-5] ^= 1  # the last literal byte
    with pytest.raises(DecodeError, match="Zstd cannot decode"):
        Zstd().decode(bytes(corrupted))


def test_zstd_reads_frames_one_after_another_like_klauspost() -> None:
    codec = Zstd()
    skippable = b"\x50\x2a\x4d\x18" + struct.pack("<I", 3) + b"xyz"
    assert codec.decode(codec.encode(b"one ") + skippable + codec.encode(b"two")) == b"one two"
    assert codec.decode(b"") == b""  # DecodeAll of nothing is nothing


def test_zstd_bounds_the_window_a_frame_asks_for() -> None:
    # Streamed, so the frame states no size and keeps its 128 MiB window: a decoder
    # would allocate all of it for 1000 bytes.
    compressor = zstd.ZstdCompressor(options={zstd.CompressionParameter.window_log: 27})
    big_window = compressor.compress(b"x" * 1000) + compressor.flush()
    with pytest.raises(DecodeError, match=r"Zstd cannot decode .* too much memory"):
        Zstd().decode(big_window)  # the window is bounded by max(8 MiB, max_size)
    assert Zstd(max_size=128 * MiB).decode(big_window) == b"x" * 1000
    assert Zstd(max_size=None).decode(big_window) == b"x" * 1000
    compressor = zstd.ZstdCompressor(options={zstd.CompressionParameter.window_log: 23})
    small_window = compressor.compress(b"x" * 1000) + compressor.flush()
    assert Zstd(max_size=1000).decode(small_window) == b"x" * 1000  # 8 MiB: always


def test_snappy_is_golang_snappys_block_format() -> None:
    # golang/snappy's Encode of "hello": the varint length, then one literal.
    encoded = Snappy().encode(b"hello")
    assert encoded == b"\x05\x10hello"
    assert Snappy().decode(b"\x05\x10hello") == b"hello"
    assert Snappy().encode(b"") == b"\x00"
    assert Snappy().decode(b"\x00") == b""


def test_snappy_is_not_the_framed_format() -> None:
    framed = bytes(cramjam.snappy.compress(b"hello"))
    with pytest.raises(DecodeError, match="Snappy cannot decode"):
        Snappy().decode(framed)


def test_snappy_refuses_a_declared_length_past_the_bound_before_allocating() -> None:
    header_only = b"\xff\xff\xff\xff\x0f"  # declares 4 GiB - 1, holds nothing
    with pytest.raises(DecodeError, match="exceeds the limit of 67108864 bytes"):
        Snappy().decode(header_only)
    just_over = bombs.snappy(64 * MiB + 1)  # a four-byte varint
    with pytest.raises(DecodeError, match="exceeds the limit of 67108864 bytes"):
        Snappy().decode(just_over)
    with pytest.raises(DecodeError, match="header mismatch"):  # within: decoded, and short
        Snappy(max_size=None).decode(just_over)
    with pytest.raises(DecodeError, match="exceeds the limit of 4 bytes"):
        Snappy(max_size=4).decode(b"\x05\x10hello")
    with pytest.raises(DecodeError, match="Snappy cannot decode 5 bytes"):
        Snappy(max_size=None).decode(header_only)  # then the block is short


def test_snappy_refuses_a_length_other_than_declared() -> None:
    with pytest.raises(DecodeError, match="Snappy cannot decode"):
        Snappy().decode(b"\x06\x10hello")
    with pytest.raises(DecodeError, match="Snappy cannot decode"):
        Snappy().decode(b"\x04\x10hello")


# --- truncated, corrupt, bombs ------------------------------------------------------


@pytest.mark.parametrize("make", CODECS, ids=IDS)
def test_truncated_input_is_a_decode_error(make: Any) -> None:
    codec = make()
    encoded = codec.encode(PAYLOADS["1 MB json"][:100_000])
    for cut in (1, 2, len(encoded) // 2, len(encoded) - 1):
        with pytest.raises(DecodeError, match=f"{make.__name__} cannot decode {cut} bytes") as info:
            codec.decode(encoded[:cut])
        assert info.value.size == cut
        assert info.value.type_name == "bytes"


@pytest.mark.parametrize(
    "make", [Gzip, Flate, Brotli, Snappy], ids=["Gzip", "Flate", "Brotli", "Snappy"]
)
def test_empty_input_is_a_decode_error(make: Any) -> None:
    with pytest.raises(DecodeError, match=f"{make.__name__} cannot decode 0 bytes"):
        make().decode(b"")


@pytest.mark.parametrize("make", CODECS, ids=IDS)
def test_corrupt_input_is_a_decode_error(make: Any) -> None:
    codec = make()
    encoded = bytearray(codec.encode(PAYLOADS["unicode"] * 20))
    with pytest.raises(DecodeError):
        codec.decode(b"this is not compressed at all, not in any format" * 3)
    corrupted = 0
    for position in range(len(encoded)):  # flip each byte in turn: never a crash
        flipped = bytearray(encoded)
        flipped[position] ^= 0x55
        try:
            out = codec.decode(bytes(flipped))
        except DecodeError:
            corrupted += 1
        else:
            assert isinstance(out, bytes)
    assert corrupted > len(encoded) // 2


BOMBS = {
    "Gzip": (Gzip, bombs.gzip),
    "Flate": (Flate, bombs.flate),
    "Zstd": (Zstd, bombs.zstd),
    "Brotli": (Brotli, bombs.brotli),
    "Snappy": (Snappy, bombs.snappy),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_a_bomb_stops_at_the_bound(name: str) -> None:
    make, build = BOMBS[name]
    bomb = build(64 * MiB)
    assert len(bomb) < MiB
    with pytest.raises(DecodeError) as info:
        make(max_size=MiB).decode(bomb)
    assert str(info.value) == (
        f"{name} cannot decode {len(bomb)} bytes: the decompressed size exceeds the limit "
        "of 1048576 bytes (max_size)"
    )
    assert info.value.size == len(bomb)


@pytest.mark.parametrize("name", ["Gzip", "Flate", "Zstd", "Brotli"])
def test_the_bound_is_exact(name: str) -> None:
    make = BOMBS[name][0]
    encoded = make().encode(bytes(100_000))
    assert len(make(max_size=100_000).decode(encoded)) == 100_000
    with pytest.raises(DecodeError, match="exceeds the limit of 99999 bytes"):
        make(max_size=99_999).decode(encoded)
    assert len(make(max_size=None).decode(encoded)) == 100_000


@pytest.mark.parametrize("make", CODECS, ids=IDS)
def test_one_codec_serves_threads_at_once(make: Any) -> None:
    codec = make()
    failures: list[int] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(50):
            data = rng.randbytes(rng.randint(0, 5000)) + bytes(rng.randint(0, 5000))
            if codec.decode(codec.encode(data)) != data:
                failures.append(seed)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
