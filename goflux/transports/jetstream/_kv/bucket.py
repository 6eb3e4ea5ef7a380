"""Typed Key-Value buckets on JetStream: ``key_value()`` and ``KeyValue[T]``.

Writes are publishes to ``$KV.<bucket>.<key>`` that wait for the PubAck (its
sequence is the revision), traced like any goflux publish; conditional writes use
``Nats-Expected-Last-Subject-Sequence``. Reads use the server's direct get (any
replica answers) where the bucket allows it, else the stream's message get. Keys and
history are read with a short-lived consumer (``scan`` of :mod:`.._stored`), watches
are ordered subscribers (:mod:`.watch`).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Generic, TypeVar

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from goflux._codecs import Codec
from goflux._errors import TransportError
from goflux._otel.scopes import PublishScopes
from goflux._otel.telemetry import Telemetry
from goflux._wire import check_size
from goflux.transports._natspy import api_prefix, api_timeout, connection
from goflux.transports._refusals import refusals
from goflux.transports.jetstream._acker import delivery_of
from goflux.transports.jetstream._api import (
    ApiCall,
    Stored,
    api_error,
    api_guard,
    api_request,
    from_rfc3339,
    message_get,
)
from goflux.transports.jetstream._errors import (
    BucketNotFound,
    ExpectationFailed,
    IncompatibleConfig,
    KeyExists,
    RevisionMismatch,
    StreamFeatureDisabled,
)
from goflux.transports.jetstream._features import DELETE_MARKERS, MSG_TTL, require
from goflux.transports.jetstream._kv.entry import (
    OPERATION_HEADER,
    Entry,
    check_bucket,
    check_key,
    check_key_pattern,
    entry_of,
    key_subject,
    operation_of,
    stream_of,
)
from goflux.transports.jetstream._kv.watch import EntryFeed, KeyWatcher
from goflux.transports.jetstream._provision import ensure_stream
from goflux.transports.jetstream._replies import receipt, send_error, timeout_error
from goflux.transports.jetstream._server_headers import TTL, ttl_value
from goflux.transports.jetstream._status import NO_MESSAGES, STREAM_NOT_FOUND
from goflux.transports.jetstream._stored import scan
from goflux.transports.jetstream._system import SYSTEM

__all__ = ("KeyValue", "key_value")

T = TypeVar("T")

MAX_HISTORY: Final = 64  # the most writes per key a bucket keeps (as in every NATS client)
_EXPECTED: Final = "Nats-Expected-Last-Subject-Sequence"
_WRONG_SEQUENCE: Final = re.compile(r"wrong last sequence: (\d+)")
_DELETE: Final = {OPERATION_HEADER: "DEL"}
_PURGE: Final = {OPERATION_HEADER: "PURGE", "Nats-Rollup": "sub"}
_TTL_HEADER: Final = "Nats-TTL"
_MARKERS: Final = "limit_marker_ttl"  # the bucket setting of per-key TTLs and limit markers
# Bucket settings by their Key-Value names, and the stream settings they set.
_SETTINGS: Final = {
    "description": "description",
    "max_value_size": "max_msg_size",
    "max_bytes": "max_bytes",
    "storage": "storage",
    "replicas": "num_replicas",
    "placement": "placement",
    "republish": "republish",
    "compression": "compression",
    "metadata": "metadata",
}


class _Keep:
    """The default of a setting: what an existing bucket has, else the usual value."""

    def __repr__(self) -> str:
        return "<keep>"


KEEP: Final = _Keep()
_MIN_TTL: Final = 0.1  # the server's shortest max_age
_OFF: Final = {"ttl": "keep forever", _MARKERS: "no limit markers"}


_PROPAGATION: Final = ("traceparent", "tracestate", "baggage")


def _fit(wire: dict[str, str], data: bytes, limit: int) -> None:
    """Leave the trace context off a write that would exceed ``limit`` only with it."""
    if len(data) > limit or not any(name in wire for name in _PROPAGATION):
        return
    size = len(data) + 12 + sum(len(k) + len(v.encode()) + 4 for k, v in wire.items())
    if size > limit:
        for name in _PROPAGATION:
            wire.pop(name, None)


def _seconds(value: object, setting: str = "ttl") -> float:
    """Seconds of the bucket setting ``setting`` (0 for None or 0: off).

    Raises:
        ValueError: Not seconds or a timedelta, or out of range (the message names
            ``setting``).
    """
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ValueError(f"{setting} must be seconds or a timedelta, got {value!r}")
    if not (seconds == 0 or _MIN_TTL <= seconds < 1e9):  # also refuses NaN
        raise ValueError(
            f"{setting} must be 0 or None ({_OFF[setting]}), or from {_MIN_TTL} seconds "
            f"to less than 1e9 seconds, got {value!r}"
        )
    return seconds


def _key_ttl(ttl: object) -> str:
    """The ``Nats-TTL`` value of a key's ``ttl`` (whole seconds, at least 1, or never).

    Raises:
        ValueError: Below a second, above 100 years, not whole seconds, or not seconds,
            a timedelta or ``"never"``.
    """
    if ttl == "never":
        return "never"
    if isinstance(ttl, bool) or not isinstance(ttl, int | float | timedelta):
        raise ValueError(
            f'ttl must be whole seconds or a timedelta (1 s or more), or "never", got {ttl!r}'
        )
    return ttl_value(ttl)


def _marker_ttl(value: object) -> float:
    """Seconds of a ``limit_marker_ttl`` (at least 1; 0 or None: no limit markers)."""
    seconds = _seconds(value, _MARKERS)
    if seconds and seconds < 1:
        raise ValueError(f"{_MARKERS} must be 1 second or more (or None), got {value!r}")
    return seconds


async def _current(js: JetStreamContext, bucket: str) -> dict[str, Any] | None:
    """The existing bucket's stream config (the server's JSON), or None."""
    try:
        reply = await api_request(js, f"STREAM.INFO.{stream_of(bucket)}")
    except NotFoundError:
        return None
    config: dict[str, Any] = reply["config"]
    return config


async def key_value(
    js: JetStreamContext,
    bucket: str,
    codec: Codec[T],
    *,
    history: int | _Keep = KEEP,
    ttl: float | timedelta | _Keep | None = KEEP,
    limit_marker_ttl: float | timedelta | _Keep | None = KEEP,
    telemetry: Telemetry | None = None,
    timeout: float | None = None,
    **bucket_config: Any,
) -> KeyValue[T]:
    """Create the bucket ``bucket``, or bind to it and bring it to these settings.

    Idempotent like :func:`ensure_stream` (which it calls for the bucket's stream
    ``KV_<bucket>``): settings not given keep their values, changed ones are applied
    to a live bucket, and one the server cannot change raises
    :class:`~goflux.IncompatibleConfig`. The bucket is laid out as every NATS client
    lays it out, so goflux and other clients share it.

    Args:
        js: A JetStream context of a connected nats-py client (the caller owns it).
        bucket: The bucket's name (letters, digits, ``-``, ``_``).
        codec: Encodes and decodes the values.
        history: Writes kept per key (1 to 64). Not given: what an existing bucket
            keeps (nothing is cut from it), else 1.
        ttl: How long a write is kept (seconds or ``timedelta``; None or 0: forever).
            Not given: what an existing bucket has, else forever.
        limit_marker_ttl: Turns on per-key TTLs and limit markers (ADR-48,
            nats-server 2.11+): ``create`` and ``purge`` take a ``ttl``, and when a
            key's TTL or the bucket's ``ttl`` removes its last write, the server
            writes a marker (a purge entry with ``marker_reason`` ``"MaxAge"``) that
            it keeps this long (1 second or more) so watchers see it. Sets the
            stream's ``allow_msg_ttl`` and ``subject_delete_marker_ttl``. Not given:
            what an existing bucket has, else off; once on, it cannot be turned off.
        telemetry: Tracing and metrics; default: OpenTelemetry globals.
        timeout: Seconds to wait for each write's acknowledgement and each read
            (default: the JetStream context's timeout).
        **bucket_config: ``description``, ``max_value_size``, ``max_bytes``,
            ``storage`` (``"file"``, ``"memory"``), ``replicas``, ``placement``,
            ``republish``, ``compression``, ``metadata``. (Mirrored and sourced
            buckets are not supported yet.)

    Raises:
        InvalidKey: Invalid bucket name.
        ValueError: ``history``, ``ttl`` or ``limit_marker_ttl`` out of range.
        TypeError: An unknown setting.
        IncompatibleConfig: The existing bucket cannot be changed so (also: turning
            its limit markers off).
        FeatureUnsupported: ``limit_marker_ttl`` on a server older than 2.11.
        ProvisioningError: Any other refusal by the server.
    """
    check_bucket(bucket)
    with ApiCall(js, f"bucket {bucket!r}", f"STREAM.INFO.{stream_of(bucket)}"):
        current = await _current(js, bucket)
    if isinstance(history, _Keep):
        kept = int(current.get("max_msgs_per_subject") or 1) if current else 1
        history = max(1, min(kept, MAX_HISTORY))
    if isinstance(ttl, _Keep):
        ttl = (current.get("max_age") or 0) / 1e9 if current else None
    had_markers = (current.get("subject_delete_marker_ttl") or 0) / 1e9 if current else 0.0
    if isinstance(limit_marker_ttl, _Keep):
        limit_marker_ttl = had_markers or None
    markers = _marker_ttl(limit_marker_ttl)
    if had_markers and not markers:
        raise IncompatibleConfig(
            f"bucket {bucket!r}: {_MARKERS} cannot be turned off once set (the bucket "
            f"keeps limit markers for {had_markers:g}s); nothing changed"
        )
    if isinstance(history, bool) or not isinstance(history, int) or not 1 <= history <= MAX_HISTORY:
        raise ValueError(f"history must be 1 to {MAX_HISTORY}, got {history!r}")
    unknown = sorted(set(bucket_config) - set(_SETTINGS))
    if unknown:
        raise TypeError(
            f"unknown bucket setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(_SETTINGS))}"
        )
    max_age = _seconds(ttl)
    config: dict[str, Any] = {_SETTINGS[k]: v for k, v in bucket_config.items()}
    config.update(
        max_msgs_per_subject=history,
        max_age=max_age,
        duplicate_window=min(max_age, 120.0) if max_age else 120.0,
        discard="new",
        allow_rollup_hdrs=True,
        deny_delete=True,
        allow_direct=True,
    )
    if markers:
        require(connection(js), DELETE_MARKERS, f"bucket {bucket!r} ({_MARKERS})")
        config.update(allow_msg_ttl=True, subject_delete_marker_ttl=markers)
    info = await ensure_stream(
        js, name=stream_of(bucket), subjects=[key_subject(bucket, ">")], **config
    )
    return KeyValue(
        js,
        bucket,
        codec,
        direct=bool(info.config.allow_direct),
        telemetry=telemetry,
        timeout=timeout,
        max_value_size=info.config.max_msg_size,
        limit_marker_ttl=markers or None,
        history=history,
    )


class KeyValue(Generic[T]):
    """A typed Key-Value bucket: values of type ``T`` under keys, with revisions.

    Made by :func:`key_value`. Every write returns the key's new revision; reads
    return :class:`Entry` objects (value, revision, creation time, operation).

    Args:
        js: The JetStream context.
        bucket: The bucket's name.
        codec: Encodes and decodes the values.
        direct: Read with the server's direct get (the bucket allows it).
        telemetry: Tracing and metrics.
        timeout: Seconds per write or read (default: the context's).
        max_value_size: The bucket's ``max_value_size``, if it has one: a value
            that fits is not refused because of the trace context travelling with it
            (the server counts headers in), which is then left off.
        limit_marker_ttl: The bucket's ``limit_marker_ttl`` in seconds (None: off).
        history: The writes the bucket keeps per key (its stream's
            ``max_msgs_per_subject``; None: not known). With more than 1, the server
            raises a key's TTL below ``limit_marker_ttl`` to it, so :meth:`create`
            and :meth:`purge` refuse such a TTL.

    Attributes:
        limit_marker_ttl: How long the bucket keeps limit markers, as a
            ``timedelta`` (None: no per-key TTLs or limit markers), as :func:`key_value`
            found or set it.
    """

    def __init__(
        self,
        js: JetStreamContext,
        bucket: str,
        codec: Codec[T],
        *,
        direct: bool = True,
        telemetry: Telemetry | None = None,
        timeout: float | None = None,
        max_value_size: int | None = None,
        limit_marker_ttl: float | None = None,
        history: int | None = None,
    ) -> None:
        self._js = js
        self.limit_marker_ttl = timedelta(seconds=limit_marker_ttl) if limit_marker_ttl else None
        self._max_per_key = history
        self._max_value_size = max_value_size if max_value_size and max_value_size > 0 else None
        self._nc = connection(js)
        self._refusals = refusals(self._nc)
        self.bucket = bucket
        self.stream = stream_of(bucket)
        self._codec = codec
        self._direct = direct
        self._tel = Telemetry.or_default(telemetry)
        self._scopes = PublishScopes(self._tel, SYSTEM)
        self._timeout = api_timeout(js) if timeout is None else timeout
        self._prefix = api_prefix(js)

    @property
    def codec(self) -> Codec[T]:
        """The codec of the values."""
        return self._codec

    # ------------------------------------------------------------------ writes

    async def put(self, key: str, value: T) -> int:
        """Set ``key`` to ``value``; return the new revision.

        Raises:
            InvalidKey: ``key`` is not a valid key.
            EncodeError: ``value`` cannot be encoded.
            BucketNotFound: The bucket does not exist.
            PublishError: The server refused the write (too large, ...), the connection
                is closed, or no acknowledgement came in time (``may_be_stored``).
        """
        return await self._write(key, self._codec.encode(value), None, None)

    async def create(self, key: str, value: T, *, ttl: TTL | None = None) -> int:
        """Set ``key`` to ``value`` only if it has no value; return the revision.

        A deleted or purged key counts as having none. With ``ttl`` the key is gone
        after that long (ADR-48): it reads as None, and a watcher sees a purge entry
        with ``marker_reason`` ``"MaxAge"``. A later write of the key has no TTL.
        ``ttl="never"`` keeps the key even past the bucket's ``ttl`` (max age), until
        it is written again, deleted or purged.

        Args:
            key: The key.
            value: Its value.
            ttl: How long the key lives: whole seconds (1 s to 100 years), a
                ``timedelta``, or ``"never"``; the bucket needs ``limit_marker_ttl``.
                In a bucket keeping more than one write per key (``history``), at
                least ``limit_marker_ttl``.

        Raises:
            KeyExists: ``key`` has a value (the error names its revision).
            ValueError: ``ttl`` below a second, above 100 years, or not whole seconds.
            IncompatibleConfig: ``ttl`` below the bucket's ``limit_marker_ttl`` while
                the bucket keeps more than one write per key: the server would raise
                it to ``limit_marker_ttl`` (the error names bucket, key, both and
                ``history``); nothing sent.
            StreamFeatureDisabled: ``ttl`` on a bucket without ``limit_marker_ttl``
                (the error names the bucket and the setting); nothing written.
            FeatureUnsupported: ``ttl`` on a server older than 2.11; nothing sent.
            InvalidKey, EncodeError, BucketNotFound, PublishError: As for :meth:`put`.
        """
        header = None if ttl is None else {_TTL_HEADER: self._ttl(key, ttl)}
        data = self._codec.encode(value)
        try:
            return await self._write(key, data, header, 0)
        except RevisionMismatch as exc:
            latest = await self._latest(key)
            if latest is not None and latest.operation != "put":
                with contextlib.suppress(RevisionMismatch):  # another write came between
                    return await self._write(key, data, header, latest.revision)
            raise KeyExists(
                f"bucket {self.bucket!r}: key {key!r} has a value (revision "
                f"{exc.actual}); nothing written",
                subject=exc.subject,
                bucket=self.bucket,
                key=key,
                revision=exc.actual,
            ) from exc

    async def update(self, key: str, value: T, *, revision: int) -> int:
        """Set ``key`` to ``value`` only if its latest revision is ``revision``.

        Returns:
            The new revision.

        Raises:
            RevisionMismatch: The key's latest revision is another one (the error
                names both); nothing written.
            ValueError: ``revision`` is negative.
            InvalidKey, EncodeError, BucketNotFound, PublishError: As for :meth:`put`.
        """
        if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
            raise ValueError(f"revision must be an int >= 0, got {revision!r}")
        return await self._write(key, self._codec.encode(value), None, revision)

    async def delete(self, key: str) -> int:
        """Delete ``key``'s value (its history stays, ending with a delete marker).

        Returns:
            The revision of the delete marker.

        Raises:
            InvalidKey, BucketNotFound, PublishError: As for :meth:`put`.
        """
        return await self._write(key, b"", _DELETE, None)

    async def purge(self, key: str, *, ttl: TTL | None = None) -> int:
        """Delete ``key`` and its whole history (a purge marker is all that stays).

        With ``ttl`` the purge marker itself goes after that long (ADR-48), so a
        purged key leaves nothing behind: no compaction needed. The bucket needs
        ``limit_marker_ttl``; in a bucket keeping more than one write per key
        (``history``), ``ttl`` must be at least ``limit_marker_ttl``. ``"never"``
        keeps the marker even past the bucket's ``ttl``.

        Returns:
            The revision of the purge marker.

        Raises:
            ValueError: ``ttl`` below a second, above 100 years, or not whole seconds.
            IncompatibleConfig: ``ttl`` below ``limit_marker_ttl`` in a bucket keeping
                more than one write per key (see :meth:`create`); nothing sent.
            StreamFeatureDisabled: ``ttl`` on a bucket without ``limit_marker_ttl``.
            FeatureUnsupported: ``ttl`` on a server older than 2.11; nothing sent.
            InvalidKey, BucketNotFound, PublishError: As for :meth:`put`.
        """
        headers = _PURGE if ttl is None else {**_PURGE, _TTL_HEADER: self._ttl(key, ttl)}
        return await self._write(key, b"", headers, None)

    def _ttl(self, key: str, ttl: object) -> str:
        """The ``Nats-TTL`` of a write of ``key``, refused where the server would change it.

        The server raises a TTL below ``subject_delete_marker_ttl`` to it when the
        stream keeps more than one message per subject (so that a limit marker is
        not missed): the key would live longer than asked without a word.
        """
        value = _key_ttl(ttl)
        markers = self.limit_marker_ttl
        kept = self._max_per_key
        if value == "never" or markers is None or kept is None or kept == 1:
            return value
        floor = int(markers.total_seconds())  # the server compares whole seconds
        if int(value) < floor:
            raise IncompatibleConfig(
                f"bucket {self.bucket!r}: key {key!r} with ttl={value}s: the bucket keeps "
                f"history={kept} writes per key, and then the server raises a TTL "
                f"below its limit_marker_ttl ({markers.total_seconds():g}s) to "
                f"{floor}s; use a ttl of {floor}s or more, or a bucket with history=1; "
                "nothing written"
            )
        return value

    async def _write(
        self, key: str, data: bytes, headers: Mapping[str, str] | None, expected: int | None
    ) -> int:
        subject = key_subject(self.bucket, check_key(key))
        wire: dict[str, str] = dict(headers) if headers else {}
        if _TTL_HEADER in wire:
            what = f"writing {key!r} to bucket {self.bucket!r} with a TTL"
            require(self._nc, MSG_TTL, what, subject=subject)
        if expected is not None:
            wire[_EXPECTED] = str(expected)
        with self._scopes.open(subject, wire) as scope:
            scope.set_body_size(len(data))
            if self._max_value_size is not None:
                _fit(wire, data, self._max_value_size)
            check_size(subject, wire, data, self._nc.max_payload)
            try:
                with self._refusals.guard(
                    "publish", subject, f"writing {key!r} to bucket {self.bucket!r}", request=True
                ):
                    reply = await self._nc.request(
                        subject, data, timeout=self._timeout, headers=wire or None
                    )
            except nats.errors.NoRespondersError as exc:
                raise self._missing() from exc
            except nats.errors.TimeoutError as exc:
                raise timeout_error(subject, self._timeout, self._nc) from exc
            except nats.errors.Error as exc:
                raise send_error(subject, exc, self._nc) from exc
            try:
                return receipt(reply.data, subject).sequence
            except StreamFeatureDisabled as exc:
                if exc.setting != "allow_msg_ttl":
                    raise
                raise StreamFeatureDisabled(
                    f"bucket {self.bucket!r}: key {key!r} with a TTL needs the bucket "
                    f"setting {_MARKERS} (per-key TTLs; key_value(..., {_MARKERS}=...)); "
                    "nothing written",
                    subject=subject,
                    stream=self.stream,
                    setting=_MARKERS,
                ) from exc
            except ExpectationFailed as exc:
                if expected is None:
                    raise
                found = _WRONG_SEQUENCE.search(str(exc))
                actual = int(found.group(1)) if found else None
                raise RevisionMismatch(
                    f"bucket {self.bucket!r}: key {key!r} is at revision {actual}, not "
                    f"{expected} as the update expected; nothing written",
                    subject=subject,
                    bucket=self.bucket,
                    key=key,
                    expected=expected,
                    actual=actual,
                ) from exc

    def _missing(self) -> BucketNotFound:
        return BucketNotFound(f"bucket {self.bucket!r} does not exist", bucket=self.bucket)

    # ------------------------------------------------------------------- reads

    async def get(self, key: str, *, revision: int | None = None) -> Entry[T] | None:
        """The latest entry of ``key``, or the entry at ``revision``; None if none.

        Without ``revision``, a key that was never written, deleted or purged gives
        None. With one, the write at that revision (a delete marker too), or None if
        that revision is not a write of ``key`` (or no longer kept).

        Raises:
            InvalidKey: ``key`` is not a valid key.
            ValueError: ``revision`` is not an int >= 1.
            DecodeError: The value does not decode (naming bucket, key and revision).
            BucketNotFound: The bucket does not exist.
            TransportError: No answer in time, or the connection failed.
        """
        check_key(key)
        if revision is not None and (
            isinstance(revision, bool) or not isinstance(revision, int) or revision < 1
        ):
            raise ValueError(f"revision must be an int >= 1, got {revision!r}")
        entry = await self._read(key, revision)
        if entry is None or (revision is None and entry.operation != "put"):
            return None
        return entry

    async def _latest(self, key: str) -> Entry[T] | None:
        """The latest write of ``key``, delete markers included."""
        return await self._read(key, None)

    async def _read(self, key: str, revision: int | None) -> Entry[T] | None:
        subject = key_subject(self.bucket, key)
        if self._direct:
            stored = await self._direct_get(subject, revision)
        else:
            stored = await self._message_get(subject, revision)
        if stored is None or stored.subject != subject:
            return None  # none, or the revision is a write of another key
        return entry_of(
            self.bucket,
            self._codec,
            subject,
            stored.data,
            stored.headers,
            revision=stored.sequence,
            created=stored.time or datetime.now(UTC),
        )

    async def _direct_get(self, subject: str, revision: int | None) -> Stored | None:
        """The write of ``subject`` (the latest, or at ``revision``) by direct get."""
        if revision is None:
            request, body = f"{self._prefix}.DIRECT.GET.{self.stream}.{subject}", b""
        else:
            request = f"{self._prefix}.DIRECT.GET.{self.stream}"
            body = json.dumps({"seq": revision}).encode()
        what = f"reading {subject!r} of bucket {self.bucket!r}"
        try:
            with api_guard(self._js, what, request[len(self._prefix) + 1 :]):
                reply = await self._nc.request(request, body, timeout=self._timeout)
        except nats.errors.NoRespondersError as exc:
            raise self._missing() from exc
        except nats.errors.TimeoutError as exc:
            raise TransportError(f"{what}: no answer within {self._timeout}s") from exc
        except nats.errors.Error as exc:
            raise TransportError(f"{what}: {exc}") from exc
        headers = reply.headers or {}
        status = headers.get("Status")
        if status == NO_MESSAGES:
            return None
        if status is not None:
            description = headers.get("Description", "")
            raise TransportError(f"{what}: the server answered {status} {description}")
        return Stored(
            subject=headers.get("Nats-Subject", subject),
            sequence=int(headers.get("Nats-Sequence", "0")),
            time=from_rfc3339(headers.get("Nats-Time-Stamp")),
            data=reply.data,
            headers=headers,
        )

    async def _message_get(self, subject: str, revision: int | None) -> Stored | None:
        """The write of ``subject`` (the latest, or at ``revision``) by message get."""
        what = f"reading {subject!r} of bucket {self.bucket!r}"
        request = {"last_by_subj": subject} if revision is None else {"seq": revision}
        with ApiCall(self._js, what, f"STREAM.MSG.GET.{self.stream}"):
            try:
                return await message_get(self._js, self.stream, request)
            except APIError as exc:
                if exc.err_code == STREAM_NOT_FOUND:
                    raise self._missing() from exc
                raise

    async def keys(self, pattern: str = ">") -> AsyncIterator[str]:
        """The keys with a value (not deleted or purged) matching ``pattern``.

        Raises:
            InvalidKey: ``pattern`` is not a valid key pattern.
            BucketNotFound: The bucket does not exist.
        """
        check_key_pattern(pattern)
        async for msg in self._scan(pattern, "last_per_subject", headers_only=True):
            if operation_of(msg.headers) == "put":
                yield msg.subject[len(self.bucket) + 5 :]

    async def history(self, key: str) -> list[Entry[T]]:
        """Every write of ``key`` the bucket keeps, oldest first (delete markers too).

        Raises:
            InvalidKey: ``key`` is not a valid key.
            DecodeError: A value does not decode.
            BucketNotFound: The bucket does not exist.
        """
        check_key(key)
        return [self._entry(msg) async for msg in self._scan(key, "all")]

    def _entry(self, msg: Msg) -> Entry[T]:
        delivery = delivery_of(msg.reply)
        return entry_of(
            self.bucket,
            self._codec,
            msg.subject,
            msg.data,
            msg.headers,
            revision=delivery.stream_sequence,
            created=delivery.timestamp,
            delta=delivery.num_pending,
        )

    async def _scan(
        self, pattern: str, deliver: Any, *, headers_only: bool = False
    ) -> AsyncIterator[Msg]:
        what = f"reading bucket {self.bucket!r}"
        try:
            async for msg in scan(
                self._js,
                self.stream,
                key_subject(self.bucket, pattern),
                deliver=deliver,
                headers_only=headers_only,
            ):
                yield msg
        except APIError as exc:
            if exc.err_code == STREAM_NOT_FOUND:
                raise self._missing() from exc
            raise api_error(exc, what, self._js) from exc
        except (nats.errors.Error, TimeoutError) as exc:
            raise api_error(exc, what, self._js) from exc

    # ----------------------------------------------------------------- watches

    def watcher(
        self,
        *,
        include_history: bool = False,
        ignore_deletes: bool = False,
        updates_only: bool = False,
    ) -> KeyWatcher[T]:
        """A :class:`goflux.Subscriber` of this bucket's writes (``Message[Entry[T]]``).

        ``start(pattern, handler)`` on it watches the keys matching ``pattern``; see
        :class:`KeyWatcher`.

        Raises:
            ValueError: ``include_history`` and ``updates_only`` together.
        """
        return KeyWatcher(
            self._js,
            self.bucket,
            self._codec,
            include_history=include_history,
            ignore_deletes=ignore_deletes,
            updates_only=updates_only,
            telemetry=self._tel,
        )

    def watch(
        self,
        pattern: str = ">",
        *,
        include_history: bool = False,
        ignore_deletes: bool = False,
        updates_only: bool = False,
        buffer: int = 256,
    ) -> EntryFeed[T]:
        """The writes of keys matching ``pattern`` as an async iterator of :class:`Entry`.

        Use it in ``async with``: the watch starts on entering (first the latest write
        of each key, or every kept write with ``include_history``, or nothing old with
        ``updates_only``; then each change in order) and stops on leaving.

        Raises:
            InvalidKey: ``pattern`` is not a valid key pattern.
            ValueError: ``include_history`` and ``updates_only`` together.
        """
        check_key_pattern(pattern)
        watcher = self.watcher(
            include_history=include_history,
            ignore_deletes=ignore_deletes,
            updates_only=updates_only,
        )
        return EntryFeed(watcher, pattern, buffer)
