"""The NATS wire format shared with Go goflux: which headers carry what.

- ``X-Message-ID``: the message ID (JetStream publishes also set ``Nats-Msg-Id`` so the
  server de-duplicates);
- ``X-Goflux-<key>``: user headers, handed to handlers without the prefix;
- ``traceparent`` / ``tracestate`` (lowercase): trace context, written by telemetry.

The body is the codec's bytes of the bare payload. Nothing here imports nats-py.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping
from typing import Final

from goflux._errors import PayloadTooLarge
from goflux._headers import Headers, HeadersLike, check_message_id
from goflux._subjects import validate_subject

__all__ = (
    "MESSAGE_ID_HEADER",
    "NATS_MSG_ID_HEADER",
    "USER_HEADER_PREFIX",
    "RepeatedHeaders",
    "check_size",
    "header_lines",
    "outgoing",
    "read_headers",
    "write_headers",
)

MESSAGE_ID_HEADER: Final = "X-Message-ID"
NATS_MSG_ID_HEADER: Final = "Nats-Msg-Id"
USER_HEADER_PREFIX: Final = "X-Goflux-"
_PREFIX_LOWER: Final = USER_HEADER_PREFIX.lower()
_PREFIX_LEN: Final = len(USER_HEADER_PREFIX)
_MESSAGE_ID_LOWER: Final = MESSAGE_ID_HEADER.lower()


class RepeatedHeaders(dict[str, str]):
    """Header dict that also writes repeated names, one line per value.

    nats-py takes headers as a ``dict`` and writes one line per ``items()`` entry;
    this subclass yields the extra values too, so a multi-valued user header reaches
    peers that read repeated lines (Go's ``nats.Header``) intact.
    """

    __slots__ = ("repeated",)

    def __init__(self) -> None:
        super().__init__()
        self.repeated: list[tuple[str, str]] = []

    def items(self) -> ItemsView[str, str]:  # type: ignore[override]
        """Every ``(name, value)`` line, repeated names included."""
        return _Lines(self)


class _Lines(ItemsView[str, str]):
    def __init__(self, headers: RepeatedHeaders) -> None:
        super().__init__(headers)
        self._headers = headers

    def __iter__(self) -> Iterator[tuple[str, str]]:
        yield from dict.items(self._headers)
        yield from self._headers.repeated

    def __len__(self) -> int:
        return dict.__len__(self._headers) + len(self._headers.repeated)


def write_headers(
    headers: Headers | None, message_id: str | None, *, jetstream: bool
) -> dict[str, str]:
    """Return the transport headers for user ``headers`` and ``message_id``.

    Trace context is added by telemetry afterwards (it writes into this dict).
    """
    if headers and any(len(values) > 1 for _, values in headers._data.values()):
        out: dict[str, str] = RepeatedHeaders()
        for name, values in headers._data.values():
            out[USER_HEADER_PREFIX + name] = values[0]
            out.repeated.extend((USER_HEADER_PREFIX + name, v) for v in values[1:])  # type: ignore[attr-defined]
    else:
        out = {}
        if headers:
            for name, values in headers._data.values():
                out[USER_HEADER_PREFIX + name] = values[0]
    if message_id is not None:
        out[MESSAGE_ID_HEADER] = message_id
        if jetstream:
            out[NATS_MSG_ID_HEADER] = message_id
    return out


def read_headers(raw: Mapping[str, str] | bytes | None) -> tuple[Headers | None, str | None]:
    """Split received transport headers into user headers (prefix removed) and message ID.

    ``raw`` is a mapping of the headers, or a ``NATS/1.0`` header block as received
    (read here in one pass: see :func:`header_lines`). Repeated user headers keep every
    value where the client kept the header lines
    (:func:`goflux.transports._natspy.keep_header_lines`) or the block is given. Names
    are matched case-insensitively; ``Nats-Msg-Id`` stands in for a missing
    ``X-Message-ID`` (a plain JetStream publisher sets only that one). The headers are
    None when there are no user headers (the message then makes empty ones on demand).
    """
    if not raw:
        return None, None
    if isinstance(raw, bytes):
        return _read_block(raw)
    message_id: str | None = None
    pairs: list[tuple[str, str]] = []
    nats_msg_id: str | None = None
    # A client that kept the header lines says whether a name repeats (the dict then
    # holds only its last value); its lines give every value.
    lines = (
        _header_names(raw.lines)  # type: ignore[attr-defined]
        if getattr(raw, "repeated", False)
        else raw.items()
    )
    kinds = _KINDS
    for name, value in lines:
        kind = kinds.get(name)
        if kind is None:
            kind = _kind(name)
        if type(kind) is str:
            pairs.append((kind, value))
        elif kind == _MESSAGE_ID:
            message_id = value
        elif kind == _NATS_MSG_ID:
            nats_msg_id = value
    headers = Headers._trusted(pairs) if pairs else None
    return headers, message_id if message_id is not None else nats_msg_id


# What a received header name is, by its exact spelling: a user header (the name without
# the prefix), the message ID, JetStream's message ID, or another header. Names repeat
# from message to message: a lookup here costs a fraction of lowering and comparing
# each name (about 1.4 µs a message of three headers). Bounded in count and in name
# length, so that a peer sending ever new (or long) names costs little memory: past
# the bound, a name is classified at each use.
_OTHER: Final = 0
_MESSAGE_ID: Final = 1
_NATS_MSG_ID: Final = 2
_KINDS: dict[str, str | int] = {}
# The bounds of this cache and of the transports' own caches of received header names:
# at most NAME_CACHE_LIMIT names each, of at most CACHED_NAME_LENGTH (longer ones are
# read at each use), however many and however long the names a peer sends.
NAME_CACHE_LIMIT: Final = 4096
CACHED_NAME_LENGTH: Final = 64


def _kind(name: str) -> str | int:
    """Classify header ``name`` (case-insensitively), remembering it while there is room."""
    lowered = name.lower()
    kind: str | int
    if lowered.startswith(_PREFIX_LOWER) and len(name) > _PREFIX_LEN:
        kind = name[_PREFIX_LEN:]
    elif lowered == _MESSAGE_ID_LOWER:
        kind = _MESSAGE_ID
    elif lowered == "nats-msg-id":
        kind = _NATS_MSG_ID
    else:
        kind = _OTHER
    if len(name) <= CACHED_NAME_LENGTH and len(_KINDS) < NAME_CACHE_LIMIT:
        _KINDS[name] = kind
    return kind


def header_lines(block: bytes) -> list[tuple[str, str]]:
    """Every ``(name, value)`` line of a ``NATS/1.0`` header block, in wire order.

    The first line (the version, and a status where there is one) is no header. Names
    and values are stripped and decoded as UTF-8 (invalid bytes replaced); a line
    without a colon, or with an empty name, is none. Names are as sent: a name nats-py
    drops (not ASCII, or holding whitespace) is here too.
    """
    lines: list[tuple[str, str]] = []
    for line in block.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if colon:
            name = name.strip()
            if name:
                lines.append(
                    (name.decode(errors="replace"), value.strip().decode(errors="replace"))
                )
    return lines


# What a header name in a received block is, by its bytes as sent (see _KINDS); a name
# nats-py drops (not ASCII, holding whitespace, or empty) is no header: _OTHER. Bounded
# as _KINDS is.
_BLOCK_KINDS: dict[bytes, str | int] = {}


def _block_kind(name: bytes) -> str | int:
    """Classify header ``name`` as sent, remembering it while there is room."""
    text = name.strip().decode(errors="replace")
    kind: str | int = _OTHER
    if _kept_name(text):
        known = _KINDS.get(text)
        kind = _kind(text) if known is None else known
    if len(name) <= CACHED_NAME_LENGTH and len(_BLOCK_KINDS) < NAME_CACHE_LIMIT:
        _BLOCK_KINDS[name] = kind
    return kind


def _read_block(block: bytes) -> tuple[Headers | None, str | None]:
    """:func:`read_headers` of a header block: what it gives for the block's lines.

    One pass over the lines, decoding only the values of goflux's own headers: a
    block's other headers (the trace context, the server's, a peer's) cost a lookup of
    their name each. Equal to reading :func:`header_lines` without the names nats-py
    drops.
    """
    message_id: str | None = None
    nats_msg_id: str | None = None
    pairs: list[tuple[str, str]] | None = None
    kinds = _BLOCK_KINDS
    for line in block.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            continue
        kind = kinds.get(name)
        if kind is None:
            kind = _block_kind(name)
        if not kind:
            continue  # another header: its value is not read
        text = value.strip().decode(errors="replace")
        if type(kind) is str:
            if pairs is None:
                pairs = [(kind, text)]
            else:
                pairs.append((kind, text))
        elif kind == _MESSAGE_ID:
            message_id = text
        else:
            nats_msg_id = text
    headers = Headers._trusted(pairs) if pairs else None
    return headers, message_id if message_id is not None else nats_msg_id


def _kept_name(name: str) -> bool:
    """Whether nats-py keeps a header of this (stripped) ``name``: ASCII, no whitespace."""
    return bool(name) and name.isascii() and not any(c.isspace() for c in name)


def _header_names(lines: list[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """The lines whose names nats-py keeps (:func:`_kept_name`): others are no headers."""
    for name, value in lines:
        if _kept_name(name):
            yield name, value


def outgoing(
    subject: str,
    headers: HeadersLike | None,
    message_id: str | None,
    *,
    jetstream: bool,
) -> dict[str, str]:
    """Check a publish's subject and message ID, and return its transport headers.

    Raises:
        InvalidSubject: ``subject`` is not a valid publish subject.
        InvalidHeader: A header or the message ID cannot travel on the wire.
    """
    validate_subject(subject)
    if message_id is not None:
        check_message_id(message_id)
    return write_headers(Headers(headers) if headers else None, message_id, jetstream=jetstream)


_HEADER_FRAME: Final = len(b"NATS/1.0\r\n\r\n")


def check_size(subject: str, headers: Mapping[str, str] | None, data: bytes, limit: int) -> None:
    """Refuse a message whose headers and body exceed the server's ``max_payload``.

    nats-py checks only the body; a message over the limit because of its headers
    makes the server close the connection.

    Raises:
        PayloadTooLarge: Headers and body together exceed ``limit`` bytes.
    """
    if limit <= 0:
        return  # not connected yet: the server's limit is unknown
    size = len(data)
    if headers:
        chars = _HEADER_FRAME
        for name, value in headers.items():
            chars += len(name) + len(value) + 4  # "name: value\r\n"
        if size + 4 * chars <= limit:  # a character takes at most 4 bytes in UTF-8
            return
        size += _HEADER_FRAME + sum(
            len(name.encode()) + len(value.strip().encode()) + 4 for name, value in headers.items()
        )
    if size > limit:
        raise PayloadTooLarge(
            f"publish to {subject!r}: {size} bytes of headers and body exceed the server's "
            f"max_payload of {limit} bytes",
            subject=subject,
            size=size,
            limit=limit,
        )
