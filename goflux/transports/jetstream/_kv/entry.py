"""Key-Value entries, and the rules for bucket names, keys and key patterns.

A bucket ``B`` is the stream ``KV_B``; key ``k`` is the subject ``$KV.B.k``; each
write is a message on it: a put carries the value, a delete or purge an empty body
and the header ``KV-Operation: DEL`` or ``PURGE``. A bucket with limit markers
(ADR-48) also holds the server's own markers: when a key's TTL or the bucket's max age
removes its last write, the server writes an empty message with
``Nats-Marker-Reason: MaxAge`` (``Purge`` and ``Remove`` are the other reasons), read
as a purge (a delete for ``Remove``). A key's revision is the stream
sequence of its write. This is the layout every NATS client uses, so goflux and
other clients share buckets.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Generic, Literal, TypeAlias, TypeVar

from goflux._codecs import Codec, as_decode_error
from goflux._errors import DecodeError
from goflux.transports.jetstream._errors import InvalidKey

__all__ = (
    "MARKER_HEADER",
    "OPERATION_HEADER",
    "Entry",
    "Operation",
    "check_bucket",
    "check_key",
    "check_key_pattern",
    "entry_of",
    "key_subject",
    "marker_reason_of",
    "operation_of",
    "stream_of",
    "ttl_of",
)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

Operation: TypeAlias = Literal["put", "delete", "purge"]
"""What a Key-Value write did."""

OPERATION_HEADER: Final = "KV-Operation"
MARKER_HEADER: Final = "Nats-Marker-Reason"
_OPERATIONS: Final[dict[str, Operation]] = {"DEL": "delete", "PURGE": "purge"}
_MARKERS: Final[dict[str, Operation]] = {"MaxAge": "purge", "Purge": "purge", "Remove": "delete"}
_TTL_HEADER: Final = "Nats-TTL"
_GO_DURATION: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_MAX_SECONDS: Final = timedelta.max.total_seconds()
_BUCKET: Final = re.compile(r"[a-zA-Z0-9_-]+")
_KEY: Final = re.compile(r"[-/_=.a-zA-Z0-9]+")
_PATTERN: Final = re.compile(r"[-/_=.a-zA-Z0-9*>]+")


@dataclass(frozen=True, slots=True)
class Entry(Generic[T_co]):
    """One write of a key: its value (None for a delete or purge) and its facts.

    Attributes:
        bucket: The bucket.
        key: The key.
        value: The decoded value; None when ``operation`` is ``"delete"`` or ``"purge"``.
        revision: The write's revision (its sequence in the bucket's stream).
        created: When the bucket stored it (timezone-aware, UTC).
        operation: ``"put"``, ``"delete"`` or ``"purge"``.
        delta: Writes after this one still to come to a watcher or history read
            (0 for the latest; 0 for ``get``).
        marker_reason: Why the server wrote this entry itself, for a limit marker of
            a bucket with ``limit_marker_ttl``: ``"MaxAge"`` (the key's TTL or the
            bucket's ``ttl`` removed it; a purge), ``"Purge"`` (a purge) or
            ``"Remove"`` (a delete). None for a client's own write.
        ttl: The write's own TTL (``create(..., ttl=)``, ``purge(..., ttl=)``, and
            the server's markers): it is gone ``ttl`` after ``created``.
            ``timedelta.max``: written with ``ttl="never"``, kept even past the
            bucket's ``ttl`` (until a later write, delete or purge of the key, or the
            bucket's ``history``, removes it), or a TTL too long for a ``timedelta``
            (another client's write; ~2.7 million years). None: no TTL of its own,
            kept as long as the bucket keeps writes.
    """

    bucket: str
    key: str
    value: T_co | None
    revision: int
    created: datetime
    operation: Operation
    delta: int = 0
    marker_reason: str | None = None
    ttl: timedelta | None = None


def _header(headers: object, name: str) -> str | None:
    if not headers:
        return None
    get = getattr(headers, "get", None)
    value = get(name) if get is not None else None
    return None if value is None else str(value)


def marker_reason_of(headers: object) -> str | None:
    """The server's ``Nats-Marker-Reason`` of a limit marker, None for a client's write."""
    return _header(headers, MARKER_HEADER) or None


def ttl_of(headers: object) -> timedelta | None:
    """A write's ``Nats-TTL``: whole seconds (``"60"``), a Go duration (``"1m0s"``) or never.

    Returns ``timedelta.max`` for ``never`` (any case, as the server reads it), None without
    a TTL or for a value the server would not have taken, and ``timedelta.max`` for
    a TTL longer than a ``timedelta`` holds (the server takes any 64-bit number of
    seconds from another client). Never raises.
    """
    text = _header(headers, _TTL_HEADER)
    if not text:
        return None
    if text.lower() == "never":
        return timedelta.max  # one type, so the entry has one (e.g. a Spark column's)
    if text.isascii() and text.isdigit():
        seconds = float(int(text)) if len(text) < 300 else math.inf
    else:
        parts = _GO_DURATION.findall(text)
        if not parts or "".join(number + unit for number, unit in parts) != text:
            return None
        seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
    if seconds >= _MAX_SECONDS:
        return timedelta.max
    try:
        return timedelta(seconds=seconds)
    except OverflowError:  # rounded up at the very edge
        return timedelta.max


def operation_of(headers: object) -> Operation:
    """The operation a write's headers say (``KV-Operation``, else a limit marker's reason).

    A write with neither is a put; a marker of an unknown reason counts as a purge
    (it has no value).
    """
    value = _header(headers, OPERATION_HEADER)
    if value is not None:
        return _OPERATIONS.get(value, "put")
    reason = marker_reason_of(headers)
    if reason is not None:
        return _MARKERS.get(reason, "purge")
    return "put"


def check_bucket(bucket: object) -> str:
    """Return ``bucket`` if it is a valid bucket name.

    Raises:
        InvalidKey: Empty, or other than letters, digits, ``-`` and ``_``.
    """
    if not isinstance(bucket, str) or not _BUCKET.fullmatch(bucket):
        raise InvalidKey(f"invalid bucket name {bucket!r}: use letters, digits, '-' and '_' only")
    return bucket


def check_key(key: object) -> str:
    """Return ``key`` if it is a valid key.

    Raises:
        InvalidKey: Empty, with characters other than letters, digits and
            ``-/_=.``, starting or ending with ``.``, or with an empty token (``a..b``).
    """
    if (
        not isinstance(key, str)
        or not _KEY.fullmatch(key)
        or key.startswith(".")
        or key.endswith(".")
        or ".." in key
    ):
        raise InvalidKey(
            f"invalid key {key!r}: use letters, digits and -/_=. only, with no leading, "
            "trailing or double '.'"
        )
    return key


def check_key_pattern(pattern: object) -> str:
    """Return ``pattern`` if it is a valid key pattern (``*`` a token, ``>`` the rest).

    Raises:
        InvalidKey: Not a valid key where each token may also be ``*``, or end in ``>``.
    """
    if not isinstance(pattern, str) or not _PATTERN.fullmatch(pattern):
        raise InvalidKey(f"invalid key pattern {pattern!r}")
    tokens = pattern.split(".")
    for index, token in enumerate(tokens):
        if (
            not token
            or (("*" in token or ">" in token) and token not in ("*", ">"))
            or (token == ">" and index != len(tokens) - 1)
        ):
            raise InvalidKey(
                f"invalid key pattern {pattern!r}: '*' stands for one whole token, '>' "
                "for the rest and only at the end"
            )
    return pattern


def stream_of(bucket: str) -> str:
    """The stream of ``bucket``."""
    return f"KV_{bucket}"


def key_subject(bucket: str, key: str) -> str:
    """The subject of ``key`` (or key pattern) in ``bucket``."""
    return f"$KV.{bucket}.{key}"


def entry_of(
    bucket: str,
    codec: Codec[T],
    subject: str,
    data: bytes,
    headers: object,
    *,
    revision: int,
    created: datetime,
    delta: int = 0,
    key: str | None = None,
) -> Entry[T]:
    """The entry of the write stored on ``subject`` (``$KV.<bucket>.<key>``).

    Raises:
        DecodeError: A put's value does not decode (the message names bucket, key and
            revision).
    """
    if key is None:
        key = subject[len(bucket) + 5 :]  # after "$KV.<bucket>."
    operation = operation_of(headers)
    value: T | None = None
    if operation == "put":
        try:
            value = codec.decode(data)
        except Exception as caught:  # noqa: BLE001 - any codec failure: undecodable
            exc = as_decode_error(caught, codec, data)
            raise DecodeError(
                f"bucket {bucket!r}, key {key!r}, revision {revision}: {exc}",
                type_name=exc.type_name,
                size=exc.size,
            ) from exc
    reason = marker_reason_of(headers)
    ttl = ttl_of(headers)
    return Entry(bucket, key, value, revision, created, operation, delta, reason, ttl)
