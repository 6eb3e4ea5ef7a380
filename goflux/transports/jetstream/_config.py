"""Stream and consumer settings as the server's JSON: fields, conversion, comparison.

Streams: ``ensure_stream`` sends the stream config as raw API JSON, so a setting the
server knows reaches it even where nats-py's ``StreamConfig`` lacks the field, and an
update keeps every field the server reported (nats-py would drop the ones it does not
know). Keywords are checked against :data:`SERVER_STREAM_FIELDS`, the stream config
fields of nats-server 2.11 to 2.15: a strict server (the default since 2.11) refuses
an unknown field, but one with ``strict: false`` ignores it, so a typo would be
lost without a word; here it is a ``TypeError`` before anything is sent.

Consumers: nats-py's ``ConsumerConfig`` knows the fields of its time only, and its
``ConsumerInfo`` drops the others from the server's replies. Settings of newer
servers (priority groups, ...) travel as raw JSON fields next to the typed config on
the create request, and are read back from the raw ``CONSUMER.INFO`` reply, so that
:func:`~goflux.transports.jetstream.ensure_consumer` can compare them.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
from collections.abc import Mapping
from enum import Enum
from typing import Any, Final

from nats.js import JetStreamContext
from nats.js.api import (
    ConsumerConfig,
    ConsumerInfo,
    ExternalStream,
    Placement,
    RePublish,
    StreamConsumerLimits,
    StreamConsumerSource,
    StreamSource,
    SubjectTransform,
)

from goflux.transports._natspy import connection
from goflux.transports.jetstream._api import api_request, from_rfc3339

__all__ = (
    "SERVER_STREAM_FIELDS",
    "add_consumer_raw",
    "consumer_info_raw",
    "info_from_raw",
    "not_held",
    "raw_differences",
    "same_config",
    "stream_json",
)

SERVER_STREAM_FIELDS: Final = frozenset(
    {
        # nats-server 2.11.0
        "name",
        "description",
        "subjects",
        "retention",
        "max_consumers",
        "max_msgs",
        "max_bytes",
        "max_age",
        "max_msgs_per_subject",
        "max_msg_size",
        "discard",
        "storage",
        "num_replicas",
        "no_ack",
        "template_owner",  # gone in 2.14 (stream templates were removed)
        "duplicate_window",
        "placement",
        "mirror",
        "sources",
        "compression",
        "first_seq",
        "subject_transform",
        "republish",
        "allow_direct",
        "mirror_direct",
        "discard_new_per_subject",
        "sealed",
        "deny_delete",
        "deny_purge",
        "allow_rollup_hdrs",
        "consumer_limits",
        "allow_msg_ttl",
        "subject_delete_marker_ttl",
        "metadata",
        # 2.12.0
        "allow_msg_counter",
        "allow_atomic",
        "allow_msg_schedules",
        "persist_mode",
        # 2.14.0
        "allow_batched",
    }
)
"""Stream config JSON fields of nats-server 2.11 to 2.15 (``server/stream.go``)."""

_NANOSECONDS: Final = 1_000_000_000
_DURATIONS: Final = frozenset({"max_age", "duplicate_window", "subject_delete_marker_ttl"})
_SINGLE: Final[dict[str, type[Any]]] = {
    "mirror": StreamSource,
    "placement": Placement,
    "republish": RePublish,
    "subject_transform": SubjectTransform,
    "consumer_limits": StreamConsumerLimits,
}
# Settings inside settings given as dicts: converted to nats-py's classes too.
_INNER: Final[dict[type[Any], dict[str, tuple[type[Any], bool]]]] = {
    StreamSource: {
        "external": (ExternalStream, False),
        "subject_transforms": (SubjectTransform, True),
        "consumer": (StreamConsumerSource, False),
    },
}
_RESERVED_METADATA: Final = "_nats."  # keys the server adds to a stream's metadata


def _dataclass(cls: type[Any], value: object, where: str) -> Any:
    """``value`` (an instance of ``cls`` or a dict of its fields) as a ``cls``."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{where} must be a dict or a nats-py {cls.__name__}, got {type(value).__name__}"
        )
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - fields)
    if unknown:
        raise TypeError(
            f"{where}: unknown key(s) {', '.join(map(str, unknown))}; "
            f"valid: {', '.join(sorted(fields))}"
        )
    params = dict(value)
    for key, (inner, many) in _INNER.get(cls, {}).items():
        if params.get(key) is None:
            continue
        if many:
            params[key] = [
                _dataclass(inner, item, f"{where}.{key}[{n}]") for n, item in enumerate(params[key])
            ]
        else:
            params[key] = _dataclass(inner, params[key], f"{where}.{key}")
    try:
        return cls(**params)
    except TypeError as exc:  # a required key is missing
        raise TypeError(f"{where}: {exc}") from exc


def _seconds_to_nanos(key: str, value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"{where}: {key} is in seconds, got {value!r}")
    return int(value * _NANOSECONDS)


def _json(key: str, value: Any, where: str) -> Any:
    """The API JSON of setting ``key`` (seconds become nanoseconds, classes dicts)."""
    if value is None:
        return None
    if key in _DURATIONS:
        return _seconds_to_nanos(key, value, where)
    if key == "sources":
        if isinstance(value, str | bytes | Mapping):
            raise TypeError(f"{where}: sources must be a list of sources")
        return [
            _dataclass(StreamSource, item, f"{where}: sources[{n}]").as_dict()
            for n, item in enumerate(value)
        ]
    if key in _SINGLE:
        return _dataclass(_SINGLE[key], value, f"{where}: {key}").as_dict()
    if isinstance(value, Enum):
        return value.value
    return value


def stream_json(name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The API JSON of the given settings of stream ``name`` (only those given).

    Raises:
        TypeError: An unknown setting (not in :data:`SERVER_STREAM_FIELDS`), or a
            nested setting with an unknown key or of the wrong type.
    """
    where = f"stream {name!r}"
    unknown = sorted(set(config) - SERVER_STREAM_FIELDS)
    if unknown:
        valid = sorted(SERVER_STREAM_FIELDS - {"name", "subjects"})
        guesses = [
            f"{key} (did you mean {close[0]}?)" if close else key
            for key in unknown
            for close in [difflib.get_close_matches(key, valid, n=1)]
        ]
        raise TypeError(
            f"{where}: unknown stream option(s) {', '.join(guesses)}; valid: {', '.join(valid)}"
        )
    return {key: _json(key, value, where) for key, value in config.items()}


def _empty(value: Any) -> bool:
    return value in (None, False, 0, "", [], {})


def _same(current: Any, wanted: Any) -> bool:
    """Whether ``current`` (the server's JSON) already is ``wanted`` (ours).

    A key missing on one side counts as its zero value; the server's own metadata
    keys and list order (subjects, sources) do not count.
    """
    if _empty(current) and _empty(wanted):
        return True
    if isinstance(current, Mapping) and isinstance(wanted, Mapping):
        keys = (set(current) | set(wanted)) - {
            k for k in current if isinstance(k, str) and k.startswith(_RESERVED_METADATA)
        }
        return all(_same(current.get(k), wanted.get(k)) for k in keys)
    if isinstance(current, list) and isinstance(wanted, list):
        return _same_items(current, wanted)
    if isinstance(current, str) and isinstance(wanted, str) and current != wanted:
        return _same_time(current, wanted)  # opt_start_time: the server trims zeros
    return bool(current == wanted)


def _same_items(current: list[Any], wanted: list[Any]) -> bool:
    """Whether the lists hold the same items, in any order."""
    left = list(current)
    for item in wanted:
        match = next((n for n, have in enumerate(left) if _same(have, item)), None)
        if match is None:
            return False
        del left[match]
    return not left


def _same_time(current: str, wanted: str) -> bool:
    try:
        return from_rfc3339(current) == from_rfc3339(wanted)
    except ValueError:  # not times
        return False


def same_config(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the server's stream config JSON ``current`` has the ``wanted`` settings."""
    return all(_same(current.get(key), value) for key, value in wanted.items())


def _holds(current: Any, wanted: Any) -> bool:
    """Whether the server's ``current`` value holds what ``wanted`` asked for.

    Like :func:`_same`, except that what was asked empty (``0``, ``False``, ``None``,
    ...) is the server's to fill in (it makes a limit of 0 into -1, a duplicate window
    of 0 into two minutes), and a key the server adds inside a setting (a source's
    defaults, its own metadata) does not count.
    """
    if _empty(wanted):
        return True
    if isinstance(current, Mapping) and isinstance(wanted, Mapping):
        return all(_holds(current.get(key), value) for key, value in wanted.items())
    if isinstance(current, list) and isinstance(wanted, list):
        left = list(current)
        for item in wanted:
            match = next((n for n, have in enumerate(left) if _holds(have, item)), None)
            if match is None:
                return False
            del left[match]
        return not left
    return _same(current, wanted)


OMITTED_DEFAULTS: Final[Mapping[str, object]] = {"persist_mode": "default"}
"""Stream settings whose default the server leaves out of the configs it returns."""


def is_omitted_default(name: str, value: object) -> bool:
    """Whether ``value`` is the default of ``name`` that the server does not write back."""
    return name in OMITTED_DEFAULTS and OMITTED_DEFAULTS[name] == value


def not_held(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """The fields of ``wanted`` that the server's config JSON ``current`` does not hold.

    For the config the server answered a create or update with: a field it dropped
    (it does not know it) or changed (it cannot do it). Values asked empty are left
    to the server's defaults, and so is a default the server does not write back
    (``persist_mode="default"``) when it is missing.
    """
    return [
        key
        for key, value in wanted.items()
        if not _holds(current.get(key), value)
        and not (key not in current and is_omitted_default(key, value))
    ]


# ---------------------------------------------------------------- consumers


async def consumer_info_raw(js: JetStreamContext, stream: str, name: str) -> dict[str, Any]:
    """The server's ``CONSUMER.INFO`` reply for ``name`` on ``stream``, as raw JSON.

    Raises:
        NotFoundError: The stream or the consumer does not exist (see ``err_code``).
        APIError: Another refusal.
        nats.errors.Error: No responders, no answer in time, or the connection failed.
    """
    return await api_request(js, f"CONSUMER.INFO.{stream}.{name}")


def info_from_raw(raw: Mapping[str, Any]) -> ConsumerInfo:
    """nats-py's ``ConsumerInfo`` of a raw reply (which stays as it was)."""
    info: ConsumerInfo = ConsumerInfo.from_response(copy.deepcopy(dict(raw)))
    return info


def _create_tail(js: JetStreamContext, stream: str, config: ConsumerConfig) -> str:
    """The create request nats-py's ``add_consumer`` would send for ``config``."""
    version = connection(js).connected_server_version
    if config.name and version.major >= 2 and version.minor >= 9:
        if config.filter_subject and config.filter_subject != ">":
            return f"CONSUMER.CREATE.{stream}.{config.name}.{config.filter_subject}"
        return f"CONSUMER.CREATE.{stream}.{config.name}"
    if config.durable_name:
        return f"CONSUMER.DURABLE.CREATE.{stream}.{config.durable_name}"
    return f"CONSUMER.CREATE.{stream}"


async def add_consumer_raw(
    js: JetStreamContext, stream: str, config: ConsumerConfig, raw: Mapping[str, Any]
) -> dict[str, Any]:
    """Create (or update) a consumer like ``js.add_consumer``, with ``raw`` JSON fields added.

    ``raw`` holds API fields nats-py's ``ConsumerConfig`` lacks, in the server's units
    (nanoseconds for durations); they are sent as given.

    Returns:
        The server's reply: the consumer's info as raw JSON.

    Raises:
        APIError: The server refused the consumer.
        nats.errors.Error: No responders, no answer in time, or the connection failed.
    """
    body = {"stream_name": stream, "config": {**config.as_dict(), **raw}}
    return await api_request(js, _create_tail(js, stream, config), body)


def _same_value(current: Any, wanted: Any) -> bool:
    if isinstance(current, list) and isinstance(wanted, list):
        return sorted(map(str, current)) == sorted(map(str, wanted))
    return bool(current == wanted)


def raw_differences(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """The raw fields of ``wanted`` whose value differs in the raw config ``current``."""
    return [key for key, value in wanted.items() if not _same_value(current.get(key), value)]
