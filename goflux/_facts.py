"""What a publisher, subscriber or responder is, for describing a service: :class:`Facts`.

Transports answer ``_facts()``; wrappers (bound publishers, topics, publisher
middleware) pass the question on to what they wrap. Describing a service (AsyncAPI)
reads these and never starts anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ("Facts", "TransportName", "facts_of")

TransportName = Literal["nats", "jetstream", "channel", "http"]


@dataclass(frozen=True)
class Facts:
    """The transport, codecs and settings of one publisher, subscriber or responder.

    Attributes:
        transport: ``"nats"`` (core), ``"jetstream"``, ``"channel"`` (in-process) or
            ``"http"``.
        codec: Encodes or decodes the payloads (None: values pass as they are).
        reply_codec: A responder's reply codec.
        client: The nats-py connection it uses (None in process).
        queue: The core NATS queue group, if any.
        jetstream: JetStream settings worth describing (stream, consumer, durable,
            ack policy, ...), camelCase keys, in a stable order.
        micro: The NATS micro service a responder is registered with (service, version).
        http: HTTP settings worth describing (base URL or base path, body limit),
            camelCase keys.
        app: An HTTP subscriber's or responder's ASGI app: the router its routes are
            served on (what ``goflux run --http-port`` serves).
    """

    transport: TransportName
    codec: Any = None
    reply_codec: Any = None
    client: Any = None
    queue: str | None = None
    jetstream: Mapping[str, object] = field(default_factory=dict)
    micro: Mapping[str, object] = field(default_factory=dict)
    http: Mapping[str, object] = field(default_factory=dict)
    app: Any = None


@runtime_checkable
class _Described(Protocol):
    def _facts(self) -> Facts | None: ...


def facts_of(obj: object) -> Facts | None:
    """The facts of ``obj``, or None when it does not tell (a user's own implementation)."""
    if isinstance(obj, _Described):
        return obj._facts()
    return None
