"""User headers: multi-valued, case-preserving, case-insensitive lookup."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import TypeAlias

from goflux._errors import InvalidHeader

__all__ = (
    "Headers",
    "HeadersLike",
    "check_header_name",
    "check_message_id",
    "escape_header_value",
)

# RFC 9110 token characters: what NATS (and HTTP) accept in a header name.
_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Values travel on a header line: CR, LF and NUL would split or corrupt it.
_BAD_VALUE = re.compile(r"[\r\n\x00]")

HeadersLike: TypeAlias = (
    "Headers | Mapping[str, str] | Mapping[str, Sequence[str]] | Iterable[tuple[str, str]]"
)
"""Anything :class:`Headers` can be built from."""


_ESCAPES = str.maketrans({"\r": "\\r", "\n": "\\n", "\x00": "\\x00"})


def escape_header_value(value: str) -> str:
    """Return ``value`` fit for a header: CR, LF, NUL and lone surrogates as escapes."""
    if _BAD_VALUE.search(value):
        value = value.translate(_ESCAPES)
    if not value.isascii():
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def check_header_name(name: object) -> str:
    """Return ``name`` if it is a valid header name.

    Raises:
        InvalidHeader: It is not.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidHeader(
            f"invalid header name {name!r}: use letters, digits and !#$%&'*+-.^_`|~ only"
        )
    return name


def _check_value(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidHeader(f"header {name!r} value must be str, got {type(value).__name__}")
    if _BAD_VALUE.search(value):
        raise InvalidHeader(f"header {name!r} value contains CR, LF or NUL: {value!r}")
    if value != value.strip():
        raise InvalidHeader(
            f"header {name!r} value has leading or trailing whitespace, which NATS clients "
            f"strip in transit (it would arrive changed): {value!r}"
        )
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            raise InvalidHeader(f"header {name!r} value is not valid UTF-8: {value!r}") from exc
    return value


class Headers(MutableMapping[str, str]):
    """User headers of a message.

    A header may carry several values. Names keep the casing they were first given,
    and lookups ignore case (``h["x-id"]`` finds ``X-Id``). Mapping access returns the
    first value; :meth:`get_all` returns all of them and :meth:`add` appends one.
    Assigning (``h[k] = v``) replaces every value of that name.

    Raises:
        InvalidHeader: A name is not an RFC 9110 token, or a value is not a string,
            contains CR, LF or NUL (which would let it forge other headers on the wire)
            or has leading or trailing whitespace (which would not survive the trip).
    """

    __slots__ = ("_data",)

    def __init__(self, headers: HeadersLike | None = None, /) -> None:
        self._data: dict[str, tuple[str, list[str]]] = {}
        if headers is None:
            return
        if isinstance(headers, Headers):
            self._data = {k: (n, list(v)) for k, (n, v) in headers._data.items()}
        elif isinstance(headers, Mapping):
            for name, value in headers.items():
                if isinstance(value, str):
                    self.add(name, value)
                elif isinstance(value, Sequence):
                    for item in value:
                        self.add(name, item)
                else:
                    self.add(name, value)  # rejected by the value check
        else:
            for name, value in headers:
                self.add(name, value)

    @classmethod
    def _trusted(cls, pairs: Iterable[tuple[str, str]]) -> Headers:
        """Build from pairs already validated (for transports decoding the wire)."""
        h = cls.__new__(cls)
        data: dict[str, tuple[str, list[str]]] = {}
        for name, value in pairs:
            key = name.lower()
            entry = data.get(key)
            if entry is None:
                data[key] = (name, [value])
            else:
                entry[1].append(value)
        h._data = data
        return h

    def __getitem__(self, name: str) -> str:
        return self._data[name.lower()][1][0]

    def __setitem__(self, name: str, value: str) -> None:
        check_header_name(name)
        self._data[name.lower()] = (name, [_check_value(name, value)])

    def __delitem__(self, name: str) -> None:
        del self._data[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._data

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._data.values())

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Headers):
            return {k: v for k, (_, v) in self._data.items()} == {
                k: v for k, (_, v) in other._data.items()
            }
        if isinstance(other, Mapping):
            try:
                return self == Headers(other)
            except InvalidHeader:
                return False
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Headers({self.multi_items()!r})"

    def add(self, name: str, value: str) -> None:
        """Append ``value`` to the values of ``name``, keeping existing ones.

        Raises:
            InvalidHeader: The name or value cannot travel on the wire.
        """
        check_header_name(name)
        _check_value(name, value)
        key = name.lower()
        entry = self._data.get(key)
        if entry is None:
            self._data[key] = (name, [value])
        else:
            entry[1].append(value)

    def get_all(self, name: str) -> list[str]:
        """Return every value of ``name`` in the order added (empty list if absent)."""
        entry = self._data.get(name.lower())
        return list(entry[1]) if entry is not None else []

    def multi_items(self) -> list[tuple[str, str]]:
        """Return all ``(name, value)`` pairs, one per value, names in original casing."""
        return [(name, value) for name, values in self._data.values() for value in values]

    def copy(self) -> Headers:
        """Return an independent copy."""
        return Headers(self)

    def sendable(self) -> tuple[Headers, list[str]]:
        """Return a copy that can be published, and the names left out of it.

        Received headers are taken as the peer sent them; a peer may use names or
        values that goflux refuses to send (a ``/`` in a name, a NUL in a value).
        Such names are left out; CR, LF and NUL in values, and characters UTF-8
        cannot encode (lone surrogates), become backslash escapes.
        """
        out: dict[str, tuple[str, list[str]]] = {}
        dropped: list[str] = []
        for key, (name, values) in self._data.items():
            if not _NAME.fullmatch(name):
                dropped.append(name)
                continue
            out[key] = (name, [escape_header_value(value) for value in values])
        copy = Headers.__new__(Headers)
        copy._data = out
        return copy, dropped


def check_message_id(message_id: object) -> str:
    """Return ``message_id`` if it can travel as a header value (non-empty, no CR/LF/NUL).

    Raises:
        InvalidHeader: Not a str, empty, or containing CR, LF or NUL.
    """
    if not isinstance(message_id, str) or not message_id:
        raise InvalidHeader(f"message_id must be a non-empty str, got {message_id!r}")
    return _check_value("message_id", message_id)
