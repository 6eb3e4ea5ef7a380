"""The NATS micro service protocol (ADR-32) for goflux responders: :class:`MicroService`.

A service answers discovery requests on ``$SRV.PING``, ``$SRV.INFO`` and
``$SRV.STATS`` (each also with ``.<name>`` and ``.<name>.<id>``) for whatever
endpoints its responders run. Every instance answers (no queue group), so a client
sends one request and collects the answers until its timeout: the ``nats micro``
command line, nats.go, nats.js and nats-py's ``nats.micro`` all list goflux services,
and ``goflux services`` lists theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.nuid import NUID

from goflux._compose.endpoints import endpoint_name
from goflux._errors import SubscribeError
from goflux._lifecycle import CloseOnExit
from goflux.transports._natspy import flush, let_go
from goflux.transports.nats._micro_types import (
    EndpointInfo,
    EndpointStats,
    ServiceInfo,
    ServicePing,
    ServiceStats,
    check_metadata,
    check_name,
    check_version,
)

__all__ = ("MicroEndpoint", "MicroService")

logger = logging.getLogger("goflux.transports.nats")

_PREFIX = "$SRV"
_IDS = NUID()


def _json(value: Mapping[str, object]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class MicroEndpoint:
    """One responder subscription registered as an endpoint of a :class:`MicroService`.

    The responder counts each request here; the service reads the counters for
    ``$SRV.STATS``. Listed (INFO, STATS) from :meth:`join` until :meth:`leave`.
    """

    __slots__ = (
        "active",
        "last_error",
        "metadata",
        "name",
        "num_errors",
        "num_requests",
        "processing_time",
        "queue_group",
        "service",
        "subject",
    )

    def __init__(
        self,
        service: MicroService,
        name: str,
        subject: str,
        queue_group: str,
        metadata: dict[str, str] | None,
    ) -> None:
        self.service = service
        self.name = name
        self.subject = subject
        self.queue_group = queue_group
        self.metadata = metadata
        self.active = False
        self.num_requests = 0
        self.num_errors = 0
        self.last_error = ""
        self.processing_time = 0

    def record(self, elapsed: int, error: str | None) -> None:
        """Count one request that took ``elapsed`` ns; ``error`` is its error, if any."""
        self.num_requests += 1
        self.processing_time += elapsed
        if error is not None:
            self.num_errors += 1
            self.last_error = error

    def fail(self, error: str) -> None:
        """Count an error of a request already counted (its reply was refused later)."""
        self.num_errors += 1
        self.last_error = error

    def reset(self) -> None:
        """Zero the counters."""
        self.num_requests = self.num_errors = self.processing_time = 0
        self.last_error = ""

    async def join(self) -> None:
        """Be listed from now on; the service answers discovery if it did not yet.

        Raises:
            SubscribeError: The service is closed, or the connection failed.
        """
        await self.service._activate(self)

    def leave(self) -> None:
        """Leave the service: no longer listed, and the name is free again."""
        self.active = False
        self.service._remove(self)

    def info(self) -> EndpointInfo:
        """The endpoint as INFO lists it."""
        metadata = None if self.metadata is None else MappingProxyType(self.metadata)
        return EndpointInfo(self.name, self.subject, self.queue_group, metadata)

    def stats(self) -> EndpointStats:
        """The endpoint's counters as STATS reports them."""
        requests = self.num_requests
        return EndpointStats(
            name=self.name,
            subject=self.subject,
            queue_group=self.queue_group,
            num_requests=requests,
            num_errors=self.num_errors,
            last_error=self.last_error,
            processing_time=self.processing_time,
            average_processing_time=self.processing_time // requests if requests else 0,
        )


class MicroService(CloseOnExit):
    """A NATS micro service (ADR-32): makes goflux responders discoverable and monitored.

    Give it to responders (``Responder(..., service=svc)``): each subscription they
    start becomes an endpoint of the service, counted in its stats, until it stops.
    The service answers ``$SRV.PING``, ``$SRV.INFO`` and ``$SRV.STATS`` (each also
    with ``.<name>`` and ``.<name>.<id>``) from when its first endpoint starts, or
    :meth:`start`, until :meth:`close`; every instance answers. It is an async context
    manager, and a resource a :class:`~goflux.Group` can own (closed after the
    responders have drained)::

        svc = group.own(gnats.MicroService(nc, name="pricing", version="1.2.0"))
        responder = gnats.Responder(nc, JsonCodec(Quote), JsonCodec(Price), service=svc)
        await responder.start("pricing.quote", price)  # endpoint "pricing-quote"

    Args:
        nc: A connected nats-py client (the caller owns it).
        name: The service's name, shared by its instances: letters, digits, ``-``
            and ``_``.
        version: Its semantic version (``1.0.0``, ``2.1.0-rc.1``).
        description: What it does.
        metadata: Free-form string pairs (deployment, region, ...).

    Raises:
        ValueError: The name, version or metadata is invalid (the message names it).
    """

    def __init__(
        self,
        nc: Client,
        *,
        name: str,
        version: str,
        description: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        self._nc = nc
        self._name = check_name("service", name)
        self._version = check_version(version)
        if description is not None and not isinstance(description, str):
            raise ValueError(f"service description must be a str, got {description!r}")
        self._description = description
        self._metadata = MappingProxyType(
            {} if metadata is None else check_metadata(f"service {name!r}", metadata)
        )
        self._id = _IDS.next().decode()
        self._started = datetime.now(UTC)
        self._endpoints: dict[str, MicroEndpoint] = {}
        self._subscriptions: list[Subscription] = []
        self._lock = asyncio.Lock()
        self._closed = False
        self._ping = _json(self.ping().as_dict())

    # ---------------------------------------------------------------- identity

    @property
    def id(self) -> str:
        """This instance's unique ID (a NUID), part of its discovery subjects."""
        return self._id

    @property
    def name(self) -> str:
        """The service's name."""
        return self._name

    @property
    def version(self) -> str:
        """The service's semantic version."""
        return self._version

    @property
    def description(self) -> str | None:
        """What the service does, as given (INFO sends ``""`` for None)."""
        return self._description

    @property
    def metadata(self) -> Mapping[str, str]:
        """The service's metadata (read-only; empty when none was given)."""
        return self._metadata

    @property
    def started(self) -> datetime:
        """When the service began answering discovery (UTC); reset by :meth:`reset`.

        Before that, when it was created.
        """
        return self._started

    @property
    def running(self) -> bool:
        """True while the service answers discovery requests."""
        return bool(self._subscriptions)

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The names of the running endpoints, in the order they started."""
        return tuple(name for name, endpoint in self._endpoints.items() if endpoint.active)

    # ------------------------------------------------------------------ answers

    def ping(self) -> ServicePing:
        """What the service answers to ``$SRV.PING``."""
        return ServicePing(self._name, self._id, self._version, self._metadata)

    def info(self) -> ServiceInfo:
        """What the service answers to ``$SRV.INFO``: its running endpoints."""
        return ServiceInfo(
            name=self._name,
            id=self._id,
            version=self._version,
            metadata=self._metadata,
            description=self._description or "",
            endpoints=tuple(e.info() for e in self._endpoints.values() if e.active),
        )

    def stats(self) -> ServiceStats:
        """What the service answers to ``$SRV.STATS``: its running endpoints' counters."""
        return ServiceStats(
            name=self._name,
            id=self._id,
            version=self._version,
            metadata=self._metadata,
            started=self._started,
            endpoints=tuple(e.stats() for e in self._endpoints.values() if e.active),
        )

    def reset(self) -> None:
        """Zero every endpoint's counters; :attr:`started` becomes now."""
        for endpoint in self._endpoints.values():
            endpoint.reset()
        self._started = datetime.now(UTC)

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Answer discovery requests from now on; return once the server knows.

        Called by the first endpoint that starts; calling it again does nothing.

        Raises:
            SubscribeError: The service is closed, or the connection failed.
        """
        async with self._lock:
            if self._closed:
                raise SubscribeError(f"micro service {self._name!r} is closed")
            if self._subscriptions:
                return
            answers: dict[str, Callable[[], bytes]] = {
                "PING": lambda: self._ping,
                "INFO": lambda: _json(self.info().as_dict()),
                "STATS": lambda: _json(self.stats().as_dict()),
            }
            try:
                for verb, answer in answers.items():
                    callback = self._answerer(answer)
                    for subject in (
                        f"{_PREFIX}.{verb}",
                        f"{_PREFIX}.{verb}.{self._name}",
                        f"{_PREFIX}.{verb}.{self._name}.{self._id}",
                    ):
                        self._subscriptions.append(await self._nc.subscribe(subject, cb=callback))
                await flush(self._nc)
            except (nats.errors.Error, TimeoutError) as exc:
                await self._unsubscribe()
                raise SubscribeError(
                    f"micro service {self._name!r} cannot answer discovery: {exc}"
                ) from exc
            self._started = datetime.now(UTC)

    def _answerer(self, answer: Callable[[], bytes]) -> Callable[[Msg], Awaitable[None]]:
        async def respond(msg: Msg) -> None:
            try:
                if msg.reply:
                    await self._nc.publish(msg.reply, answer())
            except nats.errors.Error as exc:
                logger.warning(
                    "micro service %r could not answer %r: %s", self._name, msg.subject, exc
                )
            finally:
                let_go(msg)  # (nats-py's dispatch holds the last one until the next)

        return respond

    async def close(self) -> None:
        """Stop answering discovery requests; later endpoints cannot start. Idempotent.

        Running endpoints keep serving (they belong to their responders).
        """
        self._closed = True
        async with self._lock:
            await self._unsubscribe()

    async def _unsubscribe(self) -> None:
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            with contextlib.suppress(nats.errors.Error):
                await subscription.unsubscribe()

    # ---------------------------------------------- endpoints (for Responder)

    def _reserve(
        self,
        name: str | None,
        subject: str,
        queue_group: str,
        metadata: Mapping[str, str] | None,
    ) -> MicroEndpoint:
        """Claim an endpoint name for a subscription about to start (not yet listed).

        Raises:
            ValueError: The name is invalid or taken, or the metadata is invalid.
            SubscribeError: The service is closed.
        """
        name = endpoint_name(subject) if name is None else check_name("endpoint", name)
        checked = None if metadata is None else check_metadata(f"endpoint {name!r}", metadata)
        if self._closed:
            raise SubscribeError(
                f"cannot serve {subject!r} as an endpoint: micro service {self._name!r} is closed"
            )
        taken = self._endpoints.get(name)
        if taken is not None:
            raise ValueError(
                f"endpoint name {name!r} is taken in micro service {self._name!r} "
                f"(by {taken.subject!r}); pass another endpoint= for {subject!r}"
            )
        endpoint = MicroEndpoint(self, name, subject, queue_group, checked)
        self._endpoints[name] = endpoint
        return endpoint

    async def _activate(self, endpoint: MicroEndpoint) -> None:
        """List a started endpoint, and answer discovery if not yet.

        Raises:
            SubscribeError: The service is closed, or the connection failed.
        """
        await self.start()
        if self._endpoints.get(endpoint.name) is endpoint:
            endpoint.active = True

    def _remove(self, endpoint: MicroEndpoint) -> None:
        if self._endpoints.get(endpoint.name) is endpoint:
            del self._endpoints[endpoint.name]
