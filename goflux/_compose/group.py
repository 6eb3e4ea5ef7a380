"""Run subscriptions, stream processors and tasks together: :class:`Group`."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Literal, Protocol, Self, TypeVar, cast

from goflux._backoff import REDELIVERY_BACKOFF, BackoffLike
from goflux._compose.deadletter import DeadLetter
from goflux._compose.endpoints import About, Endpoint, HeaderDocs, header_docs, receiving
from goflux._compose.members import (
    Member,
    ProcessMember,
    SubscriptionMember,
    TaskMember,
    owned_connection_check,
)
from goflux._compose.readiness import GroupState, Readiness
from goflux._compose.streams import MessageStream
from goflux._interfaces import Handler, Responder, Subscriber
from goflux._subjects import validate_pattern

__all__ = ("DEFAULT_SIGNALS", "Group")

T = TypeVar("T")
Req = TypeVar("Req")
Resp = TypeVar("Resp")
C = TypeVar("C", bound="_Closeable")
P = TypeVar("P")

logger = logging.getLogger("goflux._compose.group")

DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)
"""Signals that make :meth:`Group.run` drain and return."""


class _Closeable(Protocol):
    async def close(self) -> None: ...


class Group:
    """Runs subscriptions, stream processors and tasks together, and stops them together.

    Add members, then :meth:`run` (a service's main coroutine), or use
    ``async with group:``::

        group = Group(drain_timeout=20)
        group.subscribe(orders, "orders.>", handle_order)
        group.process(payments.stream("payments.>", buffer=100), handle_payment, concurrency=8)
        group.task(report_every_minute)
        publisher = group.own(jetstream.Publisher(js, codec))  # closed after the drain
        await group.run()  # until SIGTERM/SIGINT, a failure, or cancellation

    - :meth:`start` starts every member concurrently and returns when all are ready
      (subscriptions registered); if one cannot start, the others are stopped and its
      error is raised.
    - The first member to fail stops the others (fail fast); :meth:`wait` and
      :meth:`run` raise that failure once everything has stopped.
    - Stopping (:meth:`stop`, a signal in :meth:`run`, cancellation of :meth:`run`, or
      a failure) drains every member at once within ``drain_timeout`` seconds:
      subscriptions and processors take no new messages and finish what they hold;
      tasks are cancelled (or, added with ``on_stop="wait"``, awaited until the
      deadline). Then owned resources are closed, last added first.
    - :meth:`readiness` tells health probes whether it is doing its work: running,
      every subscription up, every owned NATS connection connected.

    Args:
        drain_timeout: Seconds the drain may take before handlers are cancelled (their
            messages are handed back for redelivery).
        signals: Signals that make :meth:`run` drain and return (main thread only).

    Raises:
        ValueError: ``drain_timeout`` < 0.
    """

    def __init__(
        self,
        *,
        drain_timeout: float = 30.0,
        signals: Iterable[signal.Signals] = DEFAULT_SIGNALS,
    ) -> None:
        if drain_timeout < 0:
            raise ValueError(f"drain_timeout must be >= 0, got {drain_timeout}")
        self._drain_timeout = drain_timeout
        self._signals = tuple(signals)
        self._members: list[Member] = []
        self._owned: list[_Closeable] = []
        self._on_start: list[Callable[[], Awaitable[object]]] = []
        self._sends: list[Endpoint] = []
        self._about = About()
        self._watchers: list[asyncio.Task[None]] = []
        self._started = False
        self._stopping: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._signalled: signal.Signals | None = None
        self._stop_requested: asyncio.Event | None = None
        self._start_finished: asyncio.Event | None = None  # set when start() is through
        self._start_through = False
        self._start_up: asyncio.Task[None] | None = None  # the start-up functions running

    # -------------------------------------------------------------- members

    def _add(self, member: Member) -> None:
        if self._started:
            raise RuntimeError("add members to a Group before it starts")
        self._members.append(member)

    def subscribe(
        self,
        subscriber: Subscriber[T],
        subject: str,
        handler: Handler[T],
        *,
        description: str | None = None,
        headers: HeaderDocs | None = None,
    ) -> None:
        """Add a subscription of ``handler`` to ``subject``, started with the group.

        ``description`` (default: the handler's docstring's first paragraph) and
        ``headers`` (user headers the handler reads: names, or names with what each
        carries) only describe the service (``goflux asyncapi``).

        Raises:
            RuntimeError: The group has started.
            InvalidHeader: A declared header name is invalid.
        """
        member = f"subscription to {subject!r}"
        endpoint = receiving(
            subject, subscriber, member, handler, headers=headers, description=description
        )

        def start() -> Any:
            return subscriber.start(subject, handler)

        self._add(SubscriptionMember(subscriber, subject, start, endpoint))

    def respond(
        self,
        responder: Responder[Req, Resp],
        subject: str,
        handle: Callable[[Req], Awaitable[Resp]],
        *,
        endpoint: str | None = None,
        metadata: Mapping[str, str] | None = None,
        description: str | None = None,
        headers: HeaderDocs | None = None,
    ) -> None:
        """Add a responder serving ``subject`` with ``handle``, started with the group.

        A responder registered with a NATS micro service
        (:class:`goflux.transports.nats.MicroService`) makes the subscription one of
        its endpoints: ``endpoint`` names it and ``metadata`` goes with it. The
        drain answers requests still running, then stops.

        Raises:
            RuntimeError: The group has started.
            InvalidHeader: A declared header name is invalid.
        """
        described = receiving(
            subject,
            responder,
            f"responder on {subject!r}",
            handle,
            headers=headers,
            description=description,
            reply=True,
            name=endpoint,
        )
        options: dict[str, Any] = {}
        if endpoint is not None:
            options["endpoint"] = endpoint
        if metadata is not None:
            options["metadata"] = dict(metadata)

        def start() -> Any:
            return cast(Any, responder).start(subject, handle, **options)

        self._add(SubscriptionMember(responder, subject, start, described))

    def process(
        self,
        stream: MessageStream[T],
        handler: Handler[T],
        *,
        concurrency: int = 1,
        redelivery_backoff: BackoffLike | None = REDELIVERY_BACKOFF,
        dead_letter: DeadLetter | None = None,
        description: str | None = None,
        headers: HeaderDocs | None = None,
    ) -> None:
        """Add :func:`goflux.process` of ``stream``; the group starts, stops and closes it.

        ``concurrency``, ``redelivery_backoff`` and ``dead_letter`` are
        :func:`goflux.process`'s. ``description`` and ``headers`` describe the
        service, as for :meth:`subscribe`.

        Raises:
            RuntimeError: The group has started.
            ValueError: ``concurrency`` < 1.
            InvalidHeader: A declared header name is invalid.
        """
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        member = f"process of {stream.subject!r}"
        endpoint = receiving(
            stream.subject, stream, member, handler, headers=headers, description=description
        )
        self._add(
            ProcessMember(
                stream,
                handler,
                concurrency,
                endpoint,
                redelivery_backoff=redelivery_backoff,
                dead_letter=dead_letter,
            )
        )

    def task(
        self,
        fn: Callable[[], Awaitable[object]],
        *,
        name: str | None = None,
        on_stop: Literal["cancel", "wait"] = "cancel",
    ) -> None:
        """Add a task running ``fn()``; raising fails the group, returning just ends it.

        Args:
            fn: An async function without arguments.
            name: For logs and the task's name.
            on_stop: When the group stops: ``"cancel"`` the task at once, or
                ``"wait"`` for it until the drain deadline (then cancel it).

        Raises:
            RuntimeError: The group has started.
            ValueError: ``on_stop`` is neither "cancel" nor "wait".
        """
        if on_stop not in ("cancel", "wait"):
            raise ValueError(f"on_stop must be 'cancel' or 'wait', got {on_stop!r}")
        label = name or f"task {getattr(fn, '__qualname__', fn)!r}"
        self._add(TaskMember(fn, label, on_stop))

    def own(self, resource: C) -> C:
        """Close ``resource`` after the members have stopped; return it.

        Anything with an async ``close()``: a nats-py connection, a publisher, a
        subscriber. Resources are closed last added first, so own the connection
        before what uses it::

            nc = group.own(await nats.connect(url))
            orders = group.own(jetstream.Subscriber(nc.jetstream(), codec, stream="ORDERS"))

        An owned nats-py connection also counts in :meth:`readiness`.

        Raises:
            TypeError: ``resource`` has no ``close`` method.
        """
        if not callable(getattr(resource, "close", None)):
            raise TypeError(f"Group.own needs something with an async close(), got {resource!r}")
        self._owned.append(resource)
        return resource

    def sends(
        self,
        publisher: P,
        *subjects: str,
        description: str | None = None,
        headers: HeaderDocs | None = None,
    ) -> P:
        """Declare that the service publishes with ``publisher`` on ``subjects``; return it.

        Only describes the service (``goflux asyncapi``): the payload type comes from
        the publisher's codec. Subjects may be patterns when the service computes them
        (``"orders.*"``). A bound publisher or topic brings its own subject, and one
        the group owns is declared already::

            orders = group.sends(group.own(jetstream.Publisher(js, codec)), "orders.created")

        Raises:
            ValueError: No subject given for a publisher without a bound subject.
            InvalidSubject: A subject is not a valid pattern.
            InvalidHeader: A declared header name is invalid.
        """
        if not subjects:
            bound = getattr(publisher, "subject", None)
            if not isinstance(bound, str):
                raise ValueError(
                    f"Group.sends needs the subjects {publisher!r} publishes on "
                    "(a bound publisher or topic brings its own)"
                )
            subjects = (bound,)
        declared = header_docs(headers)
        for subject in subjects:
            validate_pattern(subject)
            self._sends.append(
                Endpoint(
                    "send",
                    subject,
                    publisher,
                    f"publisher to {subject!r}",
                    headers=declared,
                    description=description,
                )
            )
        return publisher

    def on_start(self, fn: Callable[[], Awaitable[object]]) -> None:
        """Run ``fn()`` when the group starts, before its members start (in the order added).

        For what a service sets up on the server before it consumes: streams and
        consumers (:func:`~goflux.transports.jetstream.ensure_stream`, ...).
        ``goflux asyncapi`` builds the group without starting it, so it creates
        nothing. If ``fn`` raises, no member starts and :meth:`start` raises that.

        Raises:
            RuntimeError: The group has started.
        """
        if self._started:
            raise RuntimeError("add start-up functions to a Group before it starts")
        self._on_start.append(fn)

    def describe(
        self,
        *,
        title: str | None = None,
        version: str | None = None,
        description: str | None = None,
    ) -> None:
        """Name the service for documents that describe it (``goflux asyncapi``).

        Fields left None keep their earlier value, or the tool's default.
        """
        about = self._about
        self._about = About(
            title if title is not None else about.title,
            version if version is not None else about.version,
            description if description is not None else about.description,
        )

    @property
    def about(self) -> About:
        """The service's title, version and description as set by :meth:`describe`."""
        return self._about

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """What the service speaks: the subjects its members receive on, then what it sends.

        Sends are the publishers declared with :meth:`sends`, and the bound publishers
        and topics the group owns (in the order owned).
        """
        received = [endpoint for member in self._members for endpoint in member.endpoints()]
        sent = list(self._sends)
        declared = {id(endpoint.via) for endpoint in sent}
        for resource in self._owned:
            subject = getattr(resource, "subject", None)
            if id(resource) in declared or not isinstance(subject, str):
                continue
            if callable(getattr(resource, "publish", None)):
                sent.append(Endpoint("send", subject, resource, f"publisher to {subject!r}"))
        return (*received, *sent)

    @property
    def owned(self) -> tuple[object, ...]:
        """The resources the group closes after its members stop, in the order owned."""
        return tuple(self._owned)

    # ------------------------------------------------------------ lifecycle

    @property
    def members(self) -> tuple[str, ...]:
        """The names of the members added, in order ("subscription to 'orders.>'", ...)."""
        return tuple(member.name for member in self._members)

    @property
    def failure(self) -> BaseException | None:
        """The first failure of a member, if any."""
        return self._failure

    @property
    def stopping(self) -> bool:
        """True once the group has begun to stop."""
        return self._stopping is not None

    @property
    def state(self) -> GroupState:
        """``new``, ``starting``, ``running``, ``stopping``, ``stopped`` or ``failed``."""
        if self._stopping is not None:
            if not self._stopping.done():
                return "stopping"
            return "failed" if self._failure is not None else "stopped"
        if self._failure is not None:
            return "failed"
        if not self._started:
            return "new"
        return "running" if self._start_through else "starting"

    def readiness(self) -> Readiness:
        """Whether the group is doing its work now, with a check per member and connection.

        Ready when running (started, not draining, nothing failed), every subscription
        and stream running on a connected transport, and every owned nats-py
        connection connected. Cheap enough to call per probe.
        """
        checks = [member.check() for member in self._members]
        for resource in self._owned:
            check = owned_connection_check(resource)
            if check is not None:
                checks.append(check)
        failure = self._failure
        said = None if failure is None else f"{type(failure).__name__}: {failure}"
        return Readiness(self.state, tuple(checks), said)

    @property
    def signalled(self) -> signal.Signals | None:
        """The signal that stopped :meth:`run`, if one did."""
        return self._signalled

    async def start(self) -> None:
        """Start every member concurrently; return when all are ready.

        Raises:
            RuntimeError: The group was started before.
            Exception: What a member raised while starting (the others are stopped).
        """
        if self._started:
            raise RuntimeError("a Group starts once")
        self._started = True
        finished = self._start_finished = asyncio.Event()
        try:
            if self._on_start:
                await self._run_start_up()
            if self._stopping is None:  # nothing failed, no stop requested meanwhile
                await self._start_members()
        finally:
            self._start_through = True
            finished.set()  # a drain requested meanwhile may go ahead now
        if self._failure is not None:
            await self.stop()
            raise self._failure

    async def _run_start_up(self) -> None:
        """Run the start-up functions in order; a stop requested meanwhile cancels them."""

        async def start_up() -> None:
            for fn in self._on_start:
                if self._stopping is not None:
                    return
                try:
                    await fn()
                except Exception as exc:  # noqa: BLE001 - raised from start()
                    name = getattr(fn, "__qualname__", repr(fn))
                    self._fail(f"start-up function {name!r}", exc)
                    return

        task = self._start_up = asyncio.get_running_loop().create_task(
            start_up(), name="goflux-group-start-up"
        )
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not task.cancelled() or (current is not None and current.cancelling()):
                raise  # start() itself is cancelled
            # cancelled by a stop: start() goes on to let the drain run
        finally:
            self._start_up = None

    async def _start_members(self) -> None:
        results = await asyncio.gather(
            *(member.start() for member in self._members), return_exceptions=True
        )
        loop = asyncio.get_running_loop()
        for member, result in zip(self._members, results, strict=True):
            if isinstance(result, BaseException):
                self._fail(member.name, result)
            else:
                self._watchers.append(
                    loop.create_task(self._watch(member), name=f"goflux-group-{member.name}")
                )

    async def _watch(self, member: Member) -> None:
        try:
            await member.ended()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - recorded and raised from wait()
            self._fail(member.name, exc)

    def _fail(self, name: str, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
            logger.error("%s failed: %s: %s; stopping the group", name, type(exc).__name__, exc)
        else:
            logger.error("%s failed too: %s: %s", name, type(exc).__name__, exc)
        self._begin_stop()

    async def until_stopping(self) -> None:
        """Return once the group begins to stop (for tasks added with ``on_stop="wait"``)."""
        if self._stopping is not None:
            return
        if self._stop_requested is None:
            self._stop_requested = asyncio.Event()
        await self._stop_requested.wait()

    def _begin_stop(self, timeout: float | None = None) -> asyncio.Task[None]:
        if self._stop_requested is not None:
            self._stop_requested.set()
        start_up = self._start_up
        if start_up is not None and start_up is not asyncio.current_task():
            start_up.cancel()  # what a start-up function was doing is moot now
        if self._stopping is None:
            deadline = self._drain_timeout if timeout is None else timeout
            self._stopping = asyncio.get_running_loop().create_task(
                self._drain(deadline), name="goflux-group-drain"
            )
        return self._stopping

    async def _drain(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout
        if self._start_finished is not None:
            # Stopping while members start: stop them once they are all up, so none
            # is left running (the wait counts against the deadline).
            await self._start_finished.wait()
        stops = [
            loop.create_task(member.stop(timeout), name=f"goflux-group-stop-{member.name}")
            for member in self._members
        ]
        if stops:
            await asyncio.wait(stops)
            for stop, member in zip(stops, self._members, strict=True):
                if not stop.cancelled() and stop.exception() is not None:
                    logger.error("stopping %s failed: %s", member.name, stop.exception())
        watchers = [w for w in self._watchers if not w.done()]
        if watchers:  # members that report their end late get until the deadline
            await asyncio.wait(watchers, timeout=max(0.0, until - loop.time()))
            for watcher in watchers:
                watcher.cancel()
            await asyncio.wait(watchers)
        for resource in reversed(self._owned):
            try:
                await resource.close()
            except Exception:
                logger.exception("closing %r failed", resource)

    async def stop(self, timeout: float | None = None) -> None:
        """Drain every member within ``timeout`` (default ``drain_timeout``), close owned ones.

        The drain runs to its end even if the caller is cancelled.
        """
        if not self._started:
            self._started = True  # nothing was running; still close what is owned
        await asyncio.shield(self._begin_stop(timeout))

    async def wait(self) -> None:
        """Wait until every member has ended (and a drain, if begun, has finished).

        Raises:
            Exception: The first failure of a member.
        """
        if self._watchers:
            await asyncio.wait(self._watchers)
        if self._stopping is not None:
            await asyncio.shield(self._stopping)
        if self._failure is not None:
            raise self._failure

    async def run(self) -> None:
        """Start, run until a signal, a failure, cancellation or the end of all members, drain.

        A signal from ``signals`` (SIGTERM, SIGINT) drains the group and returns
        normally. Cancellation drains it and re-raises.

        Raises:
            Exception: The first failure of a member (after the drain).
        """
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        for sig in self._signals:
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # not the main thread, or no signal support
            installed.append(sig)
        try:
            await self.start()
            await self.wait()
        except asyncio.CancelledError:
            await self.stop()
            raise
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
        await self.stop()  # all members ended by themselves: close what is owned

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._signalled is None:
            self._signalled = sig
            logger.info("%s received: draining (deadline %.1fs)", sig.name, self._drain_timeout)
        else:
            logger.info("%s received: already draining", sig.name)
        self._begin_stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
        if exc is None and self._failure is not None:
            raise self._failure
