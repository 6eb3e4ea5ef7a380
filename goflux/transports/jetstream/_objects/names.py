"""Object store names (ADR-20): buckets, object names, their subjects and digests.

A bucket ``B`` is the stream ``OBJ_B``; an object's chunks travel on
``$O.B.C.<nuid>`` (a fresh NUID for every put) and its meta message on
``$O.B.M.<name>``, the name in padded base64url, so any non-empty name works. The
digest is ``SHA-256=`` and the base64url (padded) SHA-256 of the object's bytes, as
nats.go and nats-py write it.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Final

from goflux.transports.jetstream._errors import InvalidKey

__all__ = (
    "DIGEST_PREFIX",
    "all_chunks",
    "all_meta",
    "check_bucket",
    "check_name",
    "chunk_subject",
    "digest_bytes",
    "digest_text",
    "meta_subject",
    "stream_name",
)

DIGEST_PREFIX: Final = "SHA-256="
# The meta subject carries the name in base64: a subject over the server's 4 KiB
# control line limit makes it close the connection, so names are bounded well below.
MAX_META_SUBJECT: Final = 2048
_BUCKET: Final = re.compile(r"[A-Za-z0-9_-]+")


def check_bucket(bucket: object) -> str:
    """``bucket`` if it is a valid bucket name (letters, digits, ``-`` and ``_``).

    Raises:
        InvalidKey: It is not.
    """
    if not isinstance(bucket, str) or not _BUCKET.fullmatch(bucket):
        raise InvalidKey(f"invalid bucket name {bucket!r}: use letters, digits, '-' and '_' only")
    return bucket


def check_name(name: object) -> str:
    """``name`` if it is a valid object name: a non-empty string that is valid UTF-8.

    Raises:
        InvalidKey: It is not.
    """
    if not isinstance(name, str) or not name:
        raise InvalidKey(f"invalid object name {name!r}: use a non-empty string")
    try:
        name.encode()
    except UnicodeEncodeError as exc:
        raise InvalidKey(f"invalid object name {name!r}: it is not valid UTF-8") from exc
    size = len(name.encode())
    if (size + 2) // 3 * 4 > MAX_META_SUBJECT:
        raise InvalidKey(
            f"invalid object name {name[:40]!r}...: {size} bytes is too long (its encoded "
            f"form, in a subject, would exceed {MAX_META_SUBJECT} bytes)"
        )
    return name


def stream_name(bucket: str) -> str:
    """The stream behind ``bucket``."""
    return f"OBJ_{bucket}"


def all_chunks(bucket: str) -> str:
    """The subjects of every chunk of ``bucket``."""
    return f"$O.{bucket}.C.>"


def all_meta(bucket: str) -> str:
    """The subjects of every meta message of ``bucket``."""
    return f"$O.{bucket}.M.>"


def chunk_subject(bucket: str, nuid: str) -> str:
    """The subject of the chunks of one put (its NUID)."""
    return f"$O.{bucket}.C.{nuid}"


def meta_subject(bucket: str, name: str) -> str:
    """The subject of the meta message of object ``name``."""
    return f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"


def digest_text(sha256: bytes) -> str:
    """The digest as the meta message writes it: ``SHA-256=<base64url>``."""
    return DIGEST_PREFIX + base64.urlsafe_b64encode(sha256).decode()


def digest_bytes(text: str) -> bytes | None:
    """The SHA-256 a stored digest names, or None if it is not a SHA-256 digest.

    The prefix may be in any case, and the base64 padded or not (clients differ).
    """
    if text[: len(DIGEST_PREFIX)].upper() != DIGEST_PREFIX:
        return None
    value = text[len(DIGEST_PREFIX) :]
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        return None
