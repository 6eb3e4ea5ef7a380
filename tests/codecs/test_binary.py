from __future__ import annotations

import array
from typing import Any

import pytest

from goflux import DecodeError, EncodeError
from goflux.codecs import Ascii85, Base32, Base64, Hex
from tests.codecs.payloads import PAYLOADS

CODECS = [
    Base64(),
    Base64("url"),
    Base64(padding=False),
    Base64("url", padding=False),
    Base32(),
    Base32("hex"),
    Base32(padding=False),
    Hex(),
    Ascii85(),
]


@pytest.mark.parametrize("codec", CODECS, ids=repr)
@pytest.mark.parametrize("name", list(PAYLOADS))
def test_round_trips(codec: Any, name: str) -> None:
    data = PAYLOADS[name]
    if name.startswith("1 MB") and isinstance(codec, Ascii85 | Base32):
        data = data[:100_000]  # pure Python in the standard library: slow
    encoded = codec.encode(data)
    assert type(encoded) is bytes
    assert encoded.isascii()
    assert codec.decode(encoded) == data
    assert codec.decode(bytearray(encoded)) == data
    assert codec.decode(memoryview(encoded)) == data
    assert codec.encode(memoryview(data)) == encoded


@pytest.mark.parametrize("codec", CODECS, ids=repr)
def test_refuses_what_is_not_bytes(codec: Any) -> None:
    with pytest.raises(EncodeError, match="cannot encode str"):
        codec.encode("text")
    with pytest.raises(DecodeError, match="cannot decode str: expected bytes"):
        codec.decode("text")


def test_goencode_examples() -> None:
    # The Example functions of goencode's base64, base32, hex and ascii85 packages.
    assert Base64().encode(b"hello") == b"aGVsbG8="
    assert Base32().encode(b"hello") == b"NBSWY3DP"
    assert Hex().encode(b"hello") == b"68656c6c6f"
    assert Ascii85().encode(b"hello") == b"BOu!rDZ"
    assert Ascii85().decode(b"BOu!rDZ") == b"hello"


RFC4648 = [b"", b"f", b"fo", b"foo", b"foob", b"fooba", b"foobar"]


def test_base64_rfc4648_vectors_as_go_tests_them() -> None:
    std = [b"", b"Zg==", b"Zm8=", b"Zm9v", b"Zm9vYg==", b"Zm9vYmE=", b"Zm9vYmFy"]
    raw = [b"", b"Zg", b"Zm8", b"Zm9v", b"Zm9vYg", b"Zm9vYmE", b"Zm9vYmFy"]
    for data, padded, unpadded in zip(RFC4648, std, raw, strict=True):
        assert Base64().encode(data) == padded
        assert Base64().decode(padded) == data
        assert Base64(padding=False).encode(data) == unpadded
        assert Base64(padding=False).decode(unpadded) == data


def test_base64_alphabets() -> None:
    data = b"\xfb\xff\xbf"  # every 6-bit group at the alphabet's end
    assert Base64().encode(data) == b"+/+/"
    assert Base64("url").encode(data) == b"-_-_"
    assert Base64("url").encode(b"\xfb\xff") == b"-_8="  # Go's URLEncoding pads
    assert Base64("url", padding=False).encode(b"\xfb\xff") == b"-_8"
    with pytest.raises(DecodeError, match=r"Base64\(\) cannot decode"):
        Base64().decode(b"-_-_")
    with pytest.raises(DecodeError, match=r"Base64\('url'\) cannot decode 4 bytes"):
        Base64("url").decode(b"+/+/")


@pytest.mark.parametrize(
    ("codec", "bad"),
    [
        (Base64(), b"aGVsbG8"),  # padding missing
        (Base64(), b"aGVsbG8=="),  # too much
        (Base64(), b"aGV=sbG8"),  # in the middle
        (Base64(), b"aGVs bG8="),  # a space: Go skips only CR and LF
        (Base64(), b"aGVs\tbG8="),
        (Base64(), b"aGVsbG8=\x00"),
        (Base64(), b"a"),
        (Base64(padding=False), b"aGVsbG8="),  # padding in RawStdEncoding
        (Base64(padding=False), b"a"),
        (Base32(), b"NBSWY3DP======"),  # wrong amount of padding
        (Base32(), b"nbswy3dp"),  # Go's StdEncoding is upper case only
        (Base32(), b"NBSWY3D1"),  # 1 is not in the alphabet
        (Base32(padding=False), b"NBSWY3DP===="),
        (Hex(), b"abc"),  # odd length
        (Hex(), b"zz"),
        (Hex(), b"68 65"),
        (Ascii85(), b"BOu!rDZv"),  # v is past u
        (Ascii85(), b"<~BOu!rDZ~>"),  # Go reads no delimiters
        (Ascii85(), b"BOuz!rDZ"),  # z inside a group
        (Ascii85(), b"BOu!rD"),  # a lone last character
        (Ascii85(), b"uuuuu"),  # past 2**32
    ],
    ids=repr,
)
def test_refuses_what_go_refuses(codec: Any, bad: bytes) -> None:
    with pytest.raises(DecodeError, match=f"cannot decode {len(bad)} bytes") as info:
        codec.decode(bad)
    assert info.value.size == len(bad)


def test_base64_and_base32_skip_line_breaks_like_go() -> None:
    assert Base64().decode(b"aGVs\r\nbG8=\n") == b"hello"
    assert Base64("url", padding=False).decode(b"-_\n8") == b"\xfb\xff"
    assert Base32().decode(b"NBSW\nY3DP\r\n") == b"hello"


def test_base32_rfc4648_vectors() -> None:
    std = [b"", b"MY======", b"MZXQ====", b"MZXW6===", b"MZXW6YQ=", b"MZXW6YTB"]
    extended_hex = [b"", b"CO======", b"CPNG====", b"CPNMU===", b"CPNMUOG=", b"CPNMUOJ1"]
    for data, a, b in zip(RFC4648, std, extended_hex, strict=False):
        assert Base32().encode(data) == a
        assert Base32().decode(a) == data
        assert Base32("hex").encode(data) == b
        assert Base32("hex").decode(b) == data
        assert Base32(padding=False).encode(data) == a.rstrip(b"=")
        assert Base32(padding=False).decode(a.rstrip(b"=")) == data
    assert Base32().encode(b"foobar") == b"MZXW6YTBOI======"


def test_hex_writes_lower_case_and_reads_both() -> None:
    assert Hex().encode(bytes(range(0xF8, 0x100))) == b"f8f9fafbfcfdfeff"
    assert Hex().decode(b"F8f9FAfb") == b"\xf8\xf9\xfa\xfb"


LEVIATHAN = (
    b"Man is distinguished, not only by his reason, but by this singular passion from other "
    b"animals, which is a lust of the mind, that by a perseverance of delight in the "
    b"continued and indefatigable generation of knowledge, exceeds the short vehemence of "
    b"any carnal pleasure."
)
LEVIATHAN_85 = (
    b"9jqo^BlbD-BleB1DJ+*+F(f,q/0JhKF<GL>Cj@.4Gp$d7F!,L7@<6@)/0JDEF<G%<+EV:2F!,O<DJ+*.@<*K0"
    b'@<6L(Df-\\0Ec5e;DffZ(EZee.Bl.9pF"AGXBPCsi+DGm>@3BB/F*&OCAfu2/AKYi(DIb:@FD,*)+C]U=@3BN'
    b"#EcYf8ATD3s@q?d$AftVqCh[NqF<G:8+EV:.+Cf>-FD5W8ARlolDIal(DId<j@<?3r@:F%a+D58'ATD4$Bl@l3De"
    b":,-DJs`8ARoFb/0JMK@qB4^F!,R<AKZ&-DfTqBG%G>uD.RTpAKYo'+CT/5+Cei#DII?(E,9)oF*2M7/c"
)


def test_ascii85_as_go_writes_it() -> None:
    # Go's encoding/ascii85 test: the Leviathan quote, no <~ ~>, no line breaks.
    assert Ascii85().encode(LEVIATHAN) == LEVIATHAN_85
    assert Ascii85().decode(LEVIATHAN_85) == LEVIATHAN
    # z for a whole zero group only; a short last group of zeros is spelled out.
    assert Ascii85().encode(bytes(4)) == b"z"
    assert Ascii85().encode(bytes(5)) == b"z!!"
    assert Ascii85().encode(bytes(3)) == b"!!!!"
    assert Ascii85().encode(b"    ") == b"+<VdL"  # no y for spaces
    assert Ascii85().decode(b"z!!") == bytes(5)


def test_ascii85_skips_every_byte_up_to_the_space_like_go() -> None:
    spaced = (
        b"\x00\x01 9jqo^\tBlbD-\n\x0cBleB1DJ+*+F(f,q/0JhKF<GL>Cj@.4Gp$d7F!,"
        b"L7@<6@)/0JDEF<G%<+EV:2F!,O<"
    )
    assert Ascii85().decode(spaced) == LEVIATHAN[:60]


def test_repr_and_content_type() -> None:
    assert [repr(c) for c in CODECS] == [
        "Base64()",
        "Base64('url')",
        "Base64(padding=False)",
        "Base64('url', padding=False)",
        "Base32()",
        "Base32('hex')",
        "Base32(padding=False)",
        "Hex()",
        "Ascii85()",
    ]
    for codec in CODECS:
        assert codec.content_type == "text/plain; charset=us-ascii"
        assert codec.content_coding is None
    with pytest.raises(ValueError, match="alphabet must be 'std' or 'url'"):
        Base64("hex")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="alphabet must be 'std' or 'hex'"):
        Base32("url")  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", CODECS, ids=repr)
def test_takes_memoryviews_that_are_not_contiguous_or_not_of_bytes(codec: Any) -> None:
    data = bytes(range(256)) * 3
    encoded = codec.encode(data)
    spread = memoryview(bytes(byte for b in data for byte in (b, 0)))[::2]
    assert codec.encode(spread) == encoded
    assert codec.decode(memoryview(bytes(b for c in encoded for b in (c, 0)))[::2]) == data
    wide = memoryview(array.array("I", [1, 2, 3]))
    assert codec.decode(codec.encode(wide)) == wide.tobytes()
