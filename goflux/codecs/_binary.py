"""Binary-to-text encodings: Base64, Base32, hex and Ascii85, as Go's standard library writes them.

All four are the standard library's (``binascii`` and ``base64``), with the input
checks Go's decoders make: an alphabet character out of place, wrong padding or an
odd hex length is a :class:`~goflux.DecodeError`, never silently skipped. Their output
is never larger than their input, so they need no decoding bound.
"""

from __future__ import annotations

import base64
import binascii
from typing import ClassVar, Final, Literal

from goflux.codecs._bounds import as_bytes, corrupt, not_bytes

__all__ = ("Ascii85", "Base32", "Base64", "Hex")

_Bytes = bytes | bytearray | memoryview

_ASCII: Final = "text/plain; charset=us-ascii"
_LINE_BREAKS: Final = b"\r\n"  # Go's base64 and base32 decoders skip these
_b2a_base64 = binascii.b2a_base64
_a2b_base64 = binascii.a2b_base64
_b2a_hex = binascii.b2a_hex
_a2b_hex = binascii.a2b_hex
_STD_TO_URL: Final = bytes.maketrans(b"+/", b"-_")


def _decodable(codec: str, data: object) -> bytes | bytearray:
    if isinstance(data, bytes | bytearray):
        return data
    if isinstance(data, memoryview):
        return data.tobytes()
    raise not_bytes(codec, data)


def _without_line_breaks(data: bytes | bytearray) -> bytes | bytearray:
    if data.find(b"\n") >= 0 or data.find(b"\r") >= 0:
        return bytes(data).translate(None, _LINE_BREAKS)
    return data


class Base64:
    """Base64 (RFC 4648), as Go's ``encoding/base64`` writes it.

    ``Base64()`` is Go's ``StdEncoding`` (goencode's ``base64`` codec): ``+`` and ``/``,
    padded with ``=``. ``alphabet="url"`` is ``URLEncoding`` (``-`` and ``_``);
    ``padding=False`` gives ``RawStdEncoding`` and ``RawURLEncoding``.

    Decoding is as strict as Go's: characters of the other alphabet, misplaced or
    missing padding (or padding where there should be none) are a
    :class:`~goflux.DecodeError`; line breaks (CR and LF) are skipped, as Go does.

    Raises:
        ValueError: ``alphabet`` is neither ``"std"`` nor ``"url"``.
    """

    __slots__ = ("_name", "_padding", "_table", "_url")

    content_type: ClassVar[str] = _ASCII
    """The MIME type of what it writes."""
    content_coding: ClassVar[str | None] = None
    """No HTTP content coding."""

    def __init__(self, alphabet: Literal["std", "url"] = "std", *, padding: bool = True) -> None:
        if alphabet not in ("std", "url"):
            raise ValueError(f"Base64: alphabet must be 'std' or 'url', not {alphabet!r}")
        self._url = alphabet == "url"
        self._padding = padding
        source, target = (b"-_+/", b"+/!!") if self._url else (b"", b"")
        if not padding:
            source, target = source + b"=", target + b"!"
        self._table = bytes.maketrans(source, target) if source else None
        args = [f"{alphabet!r}"] if self._url else []
        if not padding:
            args.append("padding=False")
        self._name = f"Base64({', '.join(args)})"

    def __repr__(self) -> str:
        return self._name

    def encode(self, value: _Bytes, /) -> bytes:
        """Return ``value`` in Base64.

        Raises:
            EncodeError: ``value`` is not bytes-like.
        """
        if type(value) is not bytes:
            value = as_bytes("Base64", value)
        out = _b2a_base64(value, newline=False)
        if self._url:
            out = out.translate(_STD_TO_URL)
        if not self._padding:
            out = out.rstrip(b"=")
        return out

    def decode(self, data: bytes, /) -> bytes:
        """Return the bytes the Base64 ``data`` holds.

        Raises:
            DecodeError: ``data`` holds a character outside the alphabet, or its
                padding is wrong.
        """
        text = data if type(data) is bytes else _decodable("Base64", data)
        try:
            return self._decode(text)
        except binascii.Error as exc:
            if text.find(b"\n") < 0 and text.find(b"\r") < 0:
                raise corrupt(self._name, data, exc) from exc
        try:
            return self._decode(bytes(text).translate(None, _LINE_BREAKS))
        except binascii.Error as exc:
            raise corrupt(self._name, data, exc) from exc

    def _decode(self, text: bytes | bytearray) -> bytes:
        # One pass maps the URL alphabet onto the standard one and the characters an
        # encoding must not hold (the other alphabet's, padding where there is none)
        # onto one that is no Base64, which strict decoding then refuses.
        table = self._table
        if table is not None:
            text = text.translate(table)
            if not self._padding:
                text += b"=" * (-len(text) % 4)
        return _a2b_base64(text, strict_mode=True)


class Base32:
    """Base32 (RFC 4648), as Go's ``encoding/base32`` writes it.

    ``Base32()`` is Go's ``StdEncoding`` (goencode's ``base32`` codec): ``A``-``Z`` and
    ``2``-``7``, padded with ``=``. ``alphabet="hex"`` is ``HexEncoding`` (``0``-``9``,
    ``A``-``V``); ``padding=False`` is ``WithPadding(NoPadding)``. Decoding takes
    upper case only and skips line breaks, as Go's does.

    Raises:
        ValueError: ``alphabet`` is neither ``"std"`` nor ``"hex"``.
    """

    __slots__ = ("_decode", "_encode", "_name", "_padding")

    content_type: ClassVar[str] = _ASCII
    """The MIME type of what it writes."""
    content_coding: ClassVar[str | None] = None
    """No HTTP content coding."""

    def __init__(self, alphabet: Literal["std", "hex"] = "std", *, padding: bool = True) -> None:
        if alphabet not in ("std", "hex"):
            raise ValueError(f"Base32: alphabet must be 'std' or 'hex', not {alphabet!r}")
        hex_ = alphabet == "hex"
        self._encode = base64.b32hexencode if hex_ else base64.b32encode
        self._decode = base64.b32hexdecode if hex_ else base64.b32decode
        self._padding = padding
        args = [f"{alphabet!r}"] if hex_ else []
        if not padding:
            args.append("padding=False")
        self._name = f"Base32({', '.join(args)})"

    def __repr__(self) -> str:
        return self._name

    def encode(self, value: _Bytes, /) -> bytes:
        """Return ``value`` in Base32.

        Raises:
            EncodeError: ``value`` is not bytes-like.
        """
        out = self._encode(as_bytes("Base32", value))
        return out if self._padding else out.rstrip(b"=")

    def decode(self, data: bytes, /) -> bytes:
        """Return the bytes the Base32 ``data`` holds.

        Raises:
            DecodeError: ``data`` holds a character outside the alphabet (lower case
                included), or its padding is wrong.
        """
        text = _without_line_breaks(_decodable("Base32", data))
        if not self._padding:
            if text.find(b"=") >= 0:
                raise corrupt(self._name, data, "padding in an unpadded encoding")
            text = bytes(text) + b"=" * (-len(text) % 8)
        try:
            return self._decode(text)
        except binascii.Error as exc:
            raise corrupt(self._name, data, exc) from exc


class Hex:
    """Hexadecimal, as Go's ``encoding/hex`` and goencode's ``hex`` codec write it.

    Lower case out; either case in. An odd length or a non-hex character (spaces
    included) is a :class:`~goflux.DecodeError`, as in Go.
    """

    __slots__ = ()

    content_type: ClassVar[str] = _ASCII
    """The MIME type of what it writes."""
    content_coding: ClassVar[str | None] = None
    """No HTTP content coding."""

    def __repr__(self) -> str:
        return "Hex()"

    def encode(self, value: _Bytes, /) -> bytes:
        """Return ``value`` as lower-case hex digits.

        Raises:
            EncodeError: ``value`` is not bytes-like.
        """
        if type(value) is not bytes:
            value = as_bytes("Hex", value)
        return _b2a_hex(value)

    def decode(self, data: bytes, /) -> bytes:
        """Return the bytes the hex digits ``data`` spell.

        Raises:
            DecodeError: ``data`` has an odd length or a non-hex character.
        """
        try:
            return _a2b_hex(data if type(data) is bytes else _decodable("Hex", data))
        except binascii.Error as exc:
            raise corrupt("Hex", data, exc) from exc


_A85_IGNORED: Final = bytes(range(ord(" ") + 1))  # Go's decoder skips every byte <= ' '
_A85_GROUP: Final = 5


class Ascii85:
    """Ascii85, as Go's ``encoding/ascii85`` and goencode's ``ascii85`` codec write it.

    No ``<~`` ``~>`` delimiters (Go writes none and reads none), ``z`` for a group of
    four zero bytes, no ``y`` for spaces, no line wrapping. Decoding skips every byte
    up to and including the space, as Go does; a ``z`` inside a group, a character
    outside ``!``..``u``, a lone last character or a group past 2^32 is a
    :class:`~goflux.DecodeError`.
    """

    __slots__ = ()

    content_type: ClassVar[str] = _ASCII
    """The MIME type of what it writes."""
    content_coding: ClassVar[str | None] = None
    """No HTTP content coding."""

    def __repr__(self) -> str:
        return "Ascii85()"

    def encode(self, value: _Bytes, /) -> bytes:
        """Return ``value`` in Ascii85.

        Raises:
            EncodeError: ``value`` is not bytes-like.
        """
        return base64.a85encode(as_bytes("Ascii85", value))

    def decode(self, data: bytes, /) -> bytes:
        """Return the bytes the Ascii85 ``data`` holds.

        Raises:
            DecodeError: ``data`` is not Ascii85 as Go reads it.
        """
        text = _decodable("Ascii85", data)
        try:
            out = base64.a85decode(text, ignorechars=_A85_IGNORED)
        except ValueError as exc:  # binascii.Error is one
            raise corrupt("Ascii85", data, exc) from exc
        # Python turns a lone last character into nothing; Go calls it corrupt. Once
        # decoded, every z stands for a whole group, so the rest counts the others.
        digits = bytes(text).translate(None, _A85_IGNORED)
        if (len(digits) - digits.count(b"z")) % _A85_GROUP == 1:
            raise corrupt("Ascii85", data, "a lone character in the last group")
        return out
