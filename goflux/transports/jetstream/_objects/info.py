"""What an Object store knows about an object: :class:`ObjectInfo` and its meta JSON.

The meta message is the JSON nats.go writes (ADR-20): ``name``, ``description``,
``headers`` (a header name to its values), ``metadata``, ``options``
(``max_chunk_size``), ``bucket``, ``nuid``, ``size``, ``mtime``, ``chunks``,
``digest`` and ``deleted``. Its modification time is the time the stream stored the
meta message, as nats.go reports it, not the ``mtime`` written in it (nats.go
writes none).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from goflux._errors import DecodeError
from goflux.transports.jetstream._api import to_rfc3339

__all__ = ("InvalidObjectMeta", "ObjectInfo", "ObjectList", "info_from_json", "meta_json")


@dataclass(frozen=True)
class ObjectInfo:
    """An object of an Object store bucket: its name, size, digest and metadata.

    Attributes:
        bucket: The bucket.
        name: The object's name.
        size: Its size in bytes (0 once deleted).
        chunks: How many chunks it is stored in (0 once deleted).
        digest: ``SHA-256=`` and the base64url SHA-256 of its bytes ("" once deleted).
        mtime: When it was written (timezone-aware, UTC): when the stream stored its
            meta message, or, in what ``put`` returns, the writer's clock.
        nuid: The unique ID of this version; its chunks travel on ``$O.<bucket>.C.<nuid>``.
        deleted: Whether the object was deleted (only :meth:`ObjectStore.watch`
            and ``info(..., deleted=True)`` show deleted objects).
        description: Its description, if any.
        headers: Its headers, each name with its values.
        meta: Its metadata, names to values (nats.go's ``Metadata``).
        chunk_size: The chunk size it was written with, if recorded.
    """

    bucket: str
    name: str
    size: int
    chunks: int
    digest: str
    mtime: datetime
    nuid: str
    deleted: bool = False
    description: str | None = None
    headers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    meta: Mapping[str, str] = field(default_factory=dict)
    chunk_size: int | None = None


class InvalidObjectMeta(NamedTuple):
    """A meta message of a bucket that is not an object's meta JSON (written by hand, say).

    Attributes:
        bucket: The bucket.
        subject: The meta message's subject (``$O.<bucket>.M.<base64url name>``).
        mtime: When the stream stored it.
        error: Why it does not read (its ``__cause__`` is the parser's error).
    """

    bucket: str
    subject: str
    mtime: datetime
    error: DecodeError


class ObjectList(list[ObjectInfo]):
    """What :meth:`ObjectStore.list` returns: the objects that read, sorted by name.

    Attributes:
        invalid: The meta messages that are not an object's meta JSON, skipped (each
            also logged as a warning); empty when every object read.
    """

    invalid: tuple[InvalidObjectMeta, ...]

    def __init__(
        self, infos: Iterable[ObjectInfo] = (), invalid: Iterable[InvalidObjectMeta] = ()
    ) -> None:
        super().__init__(infos)
        self.invalid = tuple(invalid)


def meta_json(info: ObjectInfo) -> bytes:
    """The meta message of ``info``, as nats.go and nats-py write and read it."""
    doc: dict[str, Any] = {"name": info.name}
    if info.description:
        doc["description"] = info.description
    if info.headers:
        doc["headers"] = {key: list(values) for key, values in info.headers.items()}
    if info.meta:
        doc["metadata"] = dict(info.meta)
    if info.chunk_size:
        doc["options"] = {"max_chunk_size": info.chunk_size}
    doc.update(
        bucket=info.bucket,
        nuid=info.nuid,
        size=info.size,
        mtime=to_rfc3339(info.mtime),
        chunks=info.chunks,
        digest=info.digest,
    )
    if info.deleted:
        doc["deleted"] = True
    return json.dumps(doc, separators=(",", ":")).encode()


def _headers(value: object) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, Mapping):
        return {}
    return {
        str(key): (values,) if isinstance(values, str) else tuple(str(v) for v in values or ())
        for key, values in value.items()
    }


def _count(doc: Mapping[str, Any], field: str) -> int:
    """A whole number >= 0 of the meta JSON (0 where it is missing or null).

    Raises:
        ValueError: It is negative, fractional, infinite or not a number.
    """
    value = doc.get(field) or 0
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValueError(f"{field} is {value!r}, not a whole number")
    if value < 0:
        raise ValueError(f"{field} is {value!r}, below 0")
    return int(value)


def info_from_json(data: bytes, *, bucket: str, mtime: datetime) -> ObjectInfo:
    """The :class:`ObjectInfo` of a meta message of ``bucket`` stored at ``mtime``.

    Raises:
        DecodeError: The message is not an object's meta JSON.
    """
    try:
        doc = json.loads(data)
        options = doc.get("options") or {}
        name = doc["name"]
        deleted = doc.get("deleted", False)
        if not isinstance(name, str) or not name:
            raise TypeError(f"name is {name!r}, not a non-empty string")
        if not isinstance(deleted, bool):
            raise TypeError(f"deleted is {deleted!r}, not true or false")
        return ObjectInfo(
            bucket=str(doc.get("bucket") or bucket),
            name=name,
            size=_count(doc, "size"),
            chunks=_count(doc, "chunks"),
            digest=str(doc.get("digest") or ""),
            mtime=mtime,
            nuid=str(doc.get("nuid") or ""),
            deleted=deleted,
            description=doc.get("description") or None,
            headers=_headers(doc.get("headers")),
            meta={str(k): str(v) for k, v in (doc.get("metadata") or {}).items()},
            chunk_size=_count(options, "max_chunk_size") or None,
        )
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:
        raise DecodeError(
            f"bucket {bucket!r}: a meta message is not an object's meta JSON: {exc}",
            type_name="ObjectInfo",
            size=len(data),
        ) from exc
