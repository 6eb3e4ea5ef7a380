"""Consumer settings nats-py lacks, sent and read as raw JetStream API JSON.

nats-py's ``ConsumerConfig`` knows the fields of its time only, and its
``ConsumerInfo`` drops the others from the server's replies. Settings of newer
servers (priority groups, ...) travel here as raw JSON fields next to the typed
config on the create request, and are read back from the raw ``CONSUMER.INFO``
reply, so that :func:`~._provision.ensure_consumer` can compare them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, ConsumerInfo

from goflux.transports._natspy import connection
from goflux.transports.jetstream._raw import api_request

__all__ = (
    "add_consumer_raw",
    "consumer_info_raw",
    "info_from_raw",
    "raw_differences",
)


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
) -> ConsumerInfo:
    """Create (or update) a consumer like ``js.add_consumer``, with ``raw`` JSON fields added.

    ``raw`` holds API fields nats-py's ``ConsumerConfig`` lacks, in the server's units
    (nanoseconds for durations); they are sent as given.

    Raises:
        APIError: The server refused the consumer.
        nats.errors.Error: No responders, no answer in time, or the connection failed.
    """
    body = {"stream_name": stream, "config": {**config.as_dict(), **raw}}
    reply = await api_request(js, _create_tail(js, stream, config), body)
    return info_from_raw(reply)


def _same(current: Any, wanted: Any) -> bool:
    if isinstance(current, list) and isinstance(wanted, list):
        return sorted(map(str, current)) == sorted(map(str, wanted))
    return bool(current == wanted)


def raw_differences(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """The raw fields of ``wanted`` whose value differs in the raw config ``current``."""
    return [key for key, value in wanted.items() if not _same(current.get(key), value)]
