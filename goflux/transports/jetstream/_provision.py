"""Streams and consumers at the server: idempotent provisioning, pausing and resuming.

:func:`ensure_stream` and :func:`ensure_consumer` create or update (idempotent).
nats-server 2.11's ``$JS.API.CONSUMER.PAUSE.<stream>.<consumer>`` request takes
``{"pause_until": "<RFC 3339>"}`` to pause a consumer (:func:`pause_consumer`), and no
time to resume it (:func:`resume_consumer`). Clients stay bound while it is paused
(their pull requests wait), and get messages again once it resumes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, ConsumerInfo, StreamInfo
from nats.js.errors import APIError, NotFoundError

from goflux._errors import GofluxError
from goflux._subjects import validate_pattern
from goflux.transports._natspy import connection
from goflux.transports.jetstream._api import (
    ApiCall,
    api_request,
    check_name,
    from_rfc3339,
    provisioning_error,
    to_rfc3339,
)
from goflux.transports.jetstream._config import (
    add_consumer_raw,
    consumer_info_raw,
    info_from_raw,
    not_held,
    raw_differences,
    same_config,
    stream_json,
)
from goflux.transports.jetstream._errors import IncompatibleConfig, StreamNotFound, SubjectOverlap
from goflux.transports.jetstream._features import (
    CONSUMER_FIELDS,
    CONSUMER_PAUSE,
    STREAM_FIELDS,
    Feature,
    check_fields,
    hosted_by,
    not_applied,
    require,
)
from goflux.transports.jetstream._priority import priority_settings
from goflux.transports.jetstream._status import (
    MIRROR_NOT_UPDATABLE,
    REPLICAS_NOT_UPDATABLE,
    STREAM_NAME_IN_USE,
    STREAM_NOT_FOUND,
    SUBJECTS_OVERLAP,
)

__all__ = (
    "ConsumerPause",
    "ensure_consumer",
    "ensure_stream",
    "pause_consumer",
    "resume_consumer",
)

_NOT_UPDATABLE: Final = frozenset({MIRROR_NOT_UPDATABLE, REPLICAS_NOT_UPDATABLE})
_NANOSECONDS: Final = 1_000_000_000
_CONSUMER_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(ConsumerConfig))


def _check_keys(kind: str, given: dict[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise TypeError(
            f"unknown {kind} option(s) {', '.join(unknown)}; valid: {', '.join(sorted(allowed))}"
        )


def _same(current: Any, wanted: Any) -> bool:
    if isinstance(current, list) and isinstance(wanted, list | tuple):
        try:
            return sorted(current) == sorted(wanted)
        except TypeError:
            return list(current) == list(wanted)
    if isinstance(current, float) or isinstance(wanted, float):
        return current is not None and wanted is not None and abs(current - wanted) < 1e-9
    return bool(current == wanted)


def _differences(current: Any, wanted: dict[str, Any]) -> list[str]:
    return [key for key, value in wanted.items() if not _same(getattr(current, key), value)]


async def _overlap_error(
    js: JetStreamContext, name: str, subjects: Sequence[str], exc: APIError
) -> SubjectOverlap:
    owners: set[str] = set()
    for subject in subjects:
        try:
            owner = await js.find_stream_name_by_subject(subject)
        except (APIError, NotFoundError):
            continue
        if owner != name:
            owners.add(owner)
    others = ", ".join(sorted(owners)) or "another stream"
    return SubjectOverlap(
        f"stream {name!r}: subjects {list(subjects)} overlap with {others}",
        streams=tuple(sorted(owners)),
        code=exc.code,
        err_code=exc.err_code,
    )


def _stream_error(exc: APIError, what: str) -> GofluxError:
    """The goflux error for a refused stream create or update."""
    if exc.err_code in _NOT_UPDATABLE:
        return IncompatibleConfig(
            f"{what}: the server refuses the change: {exc.description or exc}",
            code=exc.code,
            err_code=exc.err_code,
        )
    return provisioning_error(exc, what)


def _stream_subjects(
    name: str, subjects: Sequence[str] | None, config: dict[str, Any]
) -> list[str] | None:
    """The checked subjects of stream ``name`` (None: a mirror's or a sourcing stream's)."""
    if subjects is None:
        if config.get("mirror") is None and not config.get("sources"):
            raise ValueError(
                f"stream {name!r}: subjects are required unless the stream is a mirror "
                "or has sources"
            )
        return None
    if config.get("mirror") is not None:
        raise ValueError(
            f"stream {name!r}: a mirror has no subjects of its own (it stores what the "
            "mirrored stream stores); leave subjects out"
        )
    if isinstance(subjects, str) or not subjects:
        raise ValueError(f"stream {name!r}: subjects must be a non-empty list of subjects")
    for subject in subjects:
        validate_pattern(subject)
    return list(subjects)


def _stream_info(reply: dict[str, Any]) -> StreamInfo:
    info: StreamInfo = StreamInfo.from_response(reply)
    return info


def _check_applied(
    js: JetStreamContext,
    config: dict[str, Any],
    wanted: dict[str, Any],
    table: Mapping[str, Feature],
    what: str,
) -> None:
    """Raise if the server's ``config`` (its reply to a create or update) lacks ``wanted``.

    Raises:
        FeatureUnsupported: A field the hosting server's version lacks the feature of.
        ConfigNotApplied: The server dropped or changed another field asked for.
    """
    fields = not_held(config, wanted)
    if fields:
        version = hosted_by(connection(js), config)
        raise not_applied(what, table, wanted, config, fields, version)


async def _check_consumer_applied(
    js: JetStreamContext,
    stream: str,
    created: dict[str, Any],
    wanted: dict[str, Any],
    what: str,
    ephemeral: bool,
) -> None:
    """Raise if the consumer ``created`` lacks ``wanted``; an ephemeral one is deleted first.

    Nobody could use, or find, the ephemeral consumer made for a failed call.

    Raises:
        FeatureUnsupported: A field the hosting server's version lacks the feature of.
        ConfigNotApplied: The server dropped or changed another field asked for.
    """
    try:
        _check_applied(js, created.get("config", {}), wanted, CONSUMER_FIELDS, what)
    except GofluxError:
        if ephemeral:
            with contextlib.suppress(nats.errors.Error, APIError, TimeoutError):
                await js.delete_consumer(stream, str(created.get("name", "")))
        raise


async def _create_stream(
    js: JetStreamContext, name: str, wanted: dict[str, Any], what: str
) -> dict[str, Any] | None:
    """Create the stream; None if it exists already (then it is updated)."""
    try:
        return await api_request(js, f"STREAM.CREATE.{name}", {"name": name, **wanted})
    except APIError as exc:
        if exc.err_code == SUBJECTS_OVERLAP:
            raise await _overlap_error(js, name, wanted.get("subjects") or (), exc) from exc
        if exc.err_code != STREAM_NAME_IN_USE:
            raise _stream_error(exc, what) from exc
        return None


async def ensure_stream(
    js: JetStreamContext, *, name: str, subjects: Sequence[str] | None = None, **config: Any
) -> StreamInfo:
    """Create the stream, or bring an existing one to the given settings (idempotent).

    Settings not given keep their current (or default) values, so calling it again with
    new limits updates a live stream in place. Keywords are the server's stream config
    fields, with nats-py ``StreamConfig`` values: ``retention`` (``"limits"``,
    ``"workqueue"``, ``"interest"``), ``storage`` (``"file"``, ``"memory"``),
    ``max_msgs``, ``max_bytes``, ``max_age`` (seconds), ``max_msgs_per_subject``,
    ``duplicate_window`` (seconds), ``num_replicas``, ``discard`` (``"old"``,
    ``"new"``), ``allow_msg_ttl``, ``allow_atomic``, ...

    ``mirror`` (a dict such as ``{"name": "ORDERS"}`` or a nats-py ``StreamSource``)
    makes the stream a read-only copy of another one: it has no subjects of its own.
    ``sources`` (a list of the same) copies messages of other streams into this one,
    beside its own subjects, if any. ``subject_transform`` (``{"src": ..., "dest":
    ...}`` or a ``SubjectTransform``) renames subjects as messages are stored, and
    ``republish`` (``{"src": ..., "dest": ..., "headers_only": ...}`` or a
    ``RePublish``) publishes every stored message again on a core NATS subject.

    The config travels as the server's JSON, so a field nats-py's ``StreamConfig``
    lacks reaches the server too (the returned nats-py info does not show it), and
    an update keeps the settings nats-py does not know.

    Returns:
        The stream's info after the call.

    Raises:
        ValueError: Invalid stream name or subjects, no subjects for a stream that is
            neither a mirror nor has sources, or subjects for a mirror.
        TypeError: An unknown setting (one nats-server 2.11 to 2.15 does not know),
            or a mirror, source, transform or republish with an unknown key.
        SubjectOverlap: Another stream captures some of the subjects.
        IncompatibleConfig: The existing stream cannot be changed so (storage, a
            mirror's source, ...).
        FeatureUnsupported: A setting needs a newer nats-server than the connected
            one (``allow_msg_ttl`` 2.11, ``allow_atomic`` 2.12, ...): nothing was
            sent. Or the server hosting the stream (older than the connected one)
            dropped it: the stream was created or updated without it.
        ConfigNotApplied: The server took the config but dropped or changed another
            setting asked for (the message names each, asked and held).
        JetStreamUnavailable: The account has no JetStream.
        ProvisioningError: Any other refusal by the server.
    """
    check_name("stream", name)
    checked = _stream_subjects(name, subjects, config)
    given = {"subjects": checked, **config} if checked is not None else dict(config)
    wanted = stream_json(name, given)
    what = f"stream {name!r}"
    check_fields(connection(js), STREAM_FIELDS, wanted, what)
    requests = (f"STREAM.INFO.{name}", f"STREAM.CREATE.{name}", f"STREAM.UPDATE.{name}")
    with ApiCall(js, what, *requests, "STREAM.NAMES"):
        try:
            reply = await api_request(js, f"STREAM.INFO.{name}")
        except NotFoundError as exc:
            if exc.err_code != STREAM_NOT_FOUND:
                raise
            created = await _create_stream(js, name, wanted, what)
            if created is not None:
                _check_applied(js, created["config"], wanted, STREAM_FIELDS, f"{what} created")
                return _stream_info(created)
            reply = await api_request(js, f"STREAM.INFO.{name}")  # made concurrently
        current: dict[str, Any] = reply["config"]
        if same_config(current, wanted):
            return _stream_info(reply)
        try:
            updated = await api_request(js, f"STREAM.UPDATE.{name}", {**current, **wanted})
        except APIError as exc:
            if exc.err_code == SUBJECTS_OVERLAP:
                raise await _overlap_error(js, name, checked or (), exc) from exc
            raise _stream_error(exc, what) from exc
        _check_applied(js, updated["config"], wanted, STREAM_FIELDS, f"{what} updated")
        return _stream_info(updated)


async def ensure_consumer(
    js: JetStreamContext,
    *,
    stream: str,
    name: str | None = None,
    priority_groups: Sequence[str] | None = None,
    priority_policy: str | None = None,
    priority_timeout: float | None = None,
    **config: Any,
) -> ConsumerInfo:
    """Create a pull consumer, or update an existing one to the given settings.

    With ``name`` the consumer is durable (it survives restarts and keeps its
    position); without, an ephemeral consumer is created, removed by the server after
    ``inactive_threshold`` without clients. Keywords are nats-py ``ConsumerConfig``
    fields: ``filter_subject`` / ``filter_subjects``, ``deliver_policy`` (``"all"``,
    ``"new"``, ``"last"``, ``"last_per_subject"``, ``"by_start_sequence"``,
    ``"by_start_time"``) with ``opt_start_seq`` / ``opt_start_time``, ``ack_policy``,
    ``ack_wait`` (seconds), ``max_deliver``, ``backoff`` (list of seconds),
    ``max_ack_pending``, ``inactive_threshold`` (seconds), ...

    Priority groups (nats-server 2.11+) are set with ``priority_groups`` (names of 1 to
    16 characters of ``A-Z a-z 0-9 - _ / =``) and ``priority_policy``:
    ``"pinned_client"`` (one subscriber at a time gets the messages; another takes
    over when it stops, or after ``priority_timeout`` seconds without pulling),
    ``"overflow"`` (subscribers with ``min_pending`` / ``min_ack_pending`` get
    messages only while the backlog is that large) or ``"prioritized"`` (nats-server
    2.12+; subscribers with a lower ``priority`` are served first). Subscribers of
    such a consumer must name a group (``Subscriber(..., priority_group=...)``).

    Returns:
        The consumer's info after the call (nats-py's ``ConsumerInfo`` does not show
        the priority settings).

    Raises:
        ValueError: Invalid stream or consumer name, or filter subject, or invalid
            priority settings (unknown policy, groups without a policy or the other
            way round, invalid group names, a non-positive timeout).
        TypeError: An unknown setting.
        StreamNotFound: The stream does not exist.
        IncompatibleConfig: The existing consumer cannot be changed so (e.g. ack policy).
        FeatureUnsupported: A setting needs a newer nats-server (priority groups and
            ``pause_until`` 2.11, ``"prioritized"`` 2.12): nothing was sent, or the
            hosting server dropped it.
        ConfigNotApplied: The server took the config but holds another value for a
            setting asked for (it makes ``ack_wait`` the first ``backoff`` step, for
            one): the message names each, asked and held.
        JetStreamUnavailable: The account has no JetStream.
        ProvisioningError: Any other refusal by the server.
    """
    check_name("stream", stream)
    if name is not None:
        check_name("consumer", name)
    _check_keys("consumer", config, _CONSUMER_FIELDS - {"name", "durable_name"})
    if config.get("deliver_subject"):
        raise ValueError("goflux consumers are pull consumers: deliver_subject is not allowed")
    for key in ("filter_subject",):
        if config.get(key) is not None:
            validate_pattern(config[key])
    for subject in config.get("filter_subjects") or ():
        validate_pattern(subject)
    raw = priority_settings(priority_groups, priority_policy, priority_timeout)
    what = f"consumer {name or '(ephemeral)'!r} on stream {stream!r}"
    check_fields(connection(js), CONSUMER_FIELDS, {**config, **raw}, what)
    requests = (
        (
            f"CONSUMER.INFO.{stream}.{name}",
            f"CONSUMER.CREATE.{stream}.{name}",
            f"CONSUMER.DURABLE.CREATE.{stream}.{name}",
        )
        if name is not None
        else (f"CONSUMER.CREATE.{stream}",)
    )
    with ApiCall(js, what, *requests):
        if name is not None:
            try:
                current = await consumer_info_raw(js, stream, name)
            except NotFoundError as exc:
                if exc.err_code == STREAM_NOT_FOUND:
                    raise StreamNotFound(
                        f"{what}: stream not found", code=exc.code, err_code=exc.err_code
                    ) from exc
            else:
                info = info_from_raw(current)
                drift = raw_differences(current.get("config", {}), raw)
                if not drift and not _differences(info.config, config):
                    return info
            consumer_config = ConsumerConfig(name=name, durable_name=name, **config)
        else:
            consumer_config = ConsumerConfig(**config)
        try:
            created = await add_consumer_raw(js, stream, consumer_config, raw)
        except APIError as exc:
            raise provisioning_error(exc, what) from exc
        # What was asked, in the server's JSON (nanoseconds, RFC 3339 times).
        asked = {k: v for k, v in consumer_config.as_dict().items() if k in config}
        await _check_consumer_applied(js, stream, created, {**asked, **raw}, what, name is None)
        return info_from_raw(created)


# ---------------------------------------------------------------- pausing consumers


@dataclass(frozen=True, slots=True)
class ConsumerPause:
    """A consumer's pause state, as the server reported it after a pause or resume.

    Attributes:
        paused: Whether the consumer is paused now (False after a resume, and after a
            pause until a time already past).
        until: When the pause ends (timezone-aware, UTC), None without one.
        remaining: Seconds until the pause ends (0.0 when not paused).
    """

    paused: bool
    until: datetime | None
    remaining: float


def _until(until: datetime | timedelta | float) -> datetime:
    """The end of a pause given as a time, a duration or seconds from now."""
    if isinstance(until, datetime):
        if until.tzinfo is None or until.utcoffset() is None:
            raise ValueError(f"until={until!r} has no timezone: give an aware datetime")
        return until
    if isinstance(until, timedelta):
        seconds = until.total_seconds()
    elif isinstance(until, int | float) and not isinstance(until, bool):
        seconds = float(until)
    else:
        raise TypeError(
            f"until must be a datetime, timedelta or seconds, got {type(until).__name__}"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a pause must last zero or more seconds, got {seconds}")
    return datetime.now(UTC) + timedelta(seconds=seconds)


def _pause_state(reply: dict[str, Any]) -> ConsumerPause:
    return ConsumerPause(
        paused=bool(reply.get("paused", False)),
        until=from_rfc3339(reply.get("pause_until")),
        remaining=int(reply.get("pause_remaining") or 0) / _NANOSECONDS,
    )


async def _request(
    js: JetStreamContext, stream: str, name: str, body: dict[str, str] | None
) -> ConsumerPause:
    check_name("stream", stream)
    check_name("consumer", name)
    what = f"consumer {name!r} on stream {stream!r}"
    require(connection(js), CONSUMER_PAUSE, f"{'pausing' if body else 'resuming'} {what}")
    tail = f"CONSUMER.PAUSE.{stream}.{name}"
    with ApiCall(js, what, tail):
        try:
            reply = await api_request(js, tail, body)
        except APIError as exc:
            raise provisioning_error(exc, what) from exc
    return _pause_state(reply)


async def pause_consumer(
    js: JetStreamContext, stream: str, name: str, *, until: datetime | timedelta | float
) -> ConsumerPause:
    """Pause the durable consumer ``name`` of ``stream`` until ``until`` (nats-server 2.11+).

    While paused the server delivers nothing from the consumer: bound subscribers
    stay bound and get messages again once ``until`` passes or
    :func:`~goflux.transports.jetstream.resume_consumer` is called. Pausing a paused
    consumer moves the end of the pause.

    Args:
        js: The JetStream context.
        stream: The consumer's stream.
        name: The durable consumer.
        until: When the pause ends: an aware ``datetime``, or a ``timedelta`` or
            seconds from now.

    Returns:
        The pause as the server confirmed it.

    Raises:
        ValueError: Invalid names, a naive datetime, or a negative duration.
        TypeError: ``until`` is of another type.
        StreamNotFound: The stream does not exist.
        ConsumerNotFound: The consumer does not exist.
        FeatureUnsupported: The server is older than 2.11 (no consumer pause).
        PermissionDenied: The server refused the request.
        ProvisioningError: Any other refusal by the server.
    """
    body = {"pause_until": to_rfc3339(_until(until))}
    return await _request(js, stream, name, body)


async def resume_consumer(js: JetStreamContext, stream: str, name: str) -> ConsumerPause:
    """End the pause of the consumer ``name`` of ``stream`` now (a no-op if not paused).

    Returns:
        The state the server confirmed (``paused`` False).

    Raises:
        ValueError: Invalid names.
        StreamNotFound: The stream does not exist.
        ConsumerNotFound: The consumer does not exist.
        FeatureUnsupported: The server is older than 2.11 (no consumer pause).
        PermissionDenied: The server refused the request.
        ProvisioningError: Any other refusal by the server.
    """
    return await _request(js, stream, name, None)
