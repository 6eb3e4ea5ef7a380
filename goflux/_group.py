"""Run subscriptions, stream processors and tasks together: :class:`Group`."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, Literal, Protocol, Self, TypeVar

from goflux._interfaces import Handler, Subscriber, Subscription
from goflux._processing import process
from goflux._readiness import Check, GroupState, Readiness
from goflux._streams import MessageStream

__all__ = ("DEFAULT_SIGNALS", "Group")

T = TypeVar("T")
C = TypeVar("C", bound="_Closeable")

logger = logging.getLogger("goflux._group")

DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)
"""Signals that make :meth:`Group.run` drain and return."""


class _Closeable(Protocol):
    async def close(self) -> None: ...


class _Member(Protocol):
    name: str

    def check(self) -> Check:
        """Whether the member is doing its work now."""

    async def start(self) -> None:
        """Start; return once ready."""

    async def ended(self) -> None:
        """Return when the member has ended; raise what made it fail."""

    async def stop(self, timeout: float) -> None:
        """Stop gracefully within ``timeout`` seconds."""


class _SubscriptionMember:
    def __init__(self, subscriber: Subscriber[T], subject: str, handler: Handler[T]) -> None:
        self.name = f"subscription to {subject!r}"
        self._subscriber: Subscriber[Any] = subscriber
        self._subject = subject
        self._handler: Handler[Any] = handler
        self.subscription: Subscription | None = None

    async def start(self) -> None:
        self.subscription = await self._subscriber.start(self._subject, self._handler)

    def check(self) -> Check:
        if self.subscription is None:
            return Check(self.name, False, "not started")
        if not self.subscription.running:
            return Check(self.name, False, "stopped")
        return _connection_check(self.name, self._subscriber)

    async def ended(self) -> None:
        assert self.subscription is not None
        await self.subscription.wait()

    async def stop(self, timeout: float) -> None:
        if self.subscription is not None:
            await self.subscription.stop(timeout)


class _ProcessMember:
    def __init__(self, stream: MessageStream[T], handler: Handler[T], concurrency: int) -> None:
        self.name = f"process of {stream.subject!r}"
        self._stream: MessageStream[Any] = stream
        self._handler: Handler[Any] = handler
        self._concurrency = concurrency
        self._task: asyncio.Task[object] | None = None

    async def start(self) -> None:
        await self._stream.start()
        run = process(self._stream, self._handler, concurrency=self._concurrency)
        self._task = asyncio.get_running_loop().create_task(run, name=self.name)

    def check(self) -> Check:
        if self._task is None:
            return Check(self.name, False, "not started")
        if self._task.done():
            return Check(self.name, False, "stopped")
        return Check(self.name, True, "running")

    async def ended(self) -> None:
        assert self._task is not None
        try:
            await asyncio.shield(self._task)
        finally:
            if self._task.done():
                await self._stream.close()

    async def stop(self, timeout: float) -> None:
        task = self._task
        # Intake stops, running handlers finish, the buffer is worked off; whatever is
        # left at the deadline is cancelled and handed back.
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout
        await self._stream.stop(timeout)
        if task is not None and not task.done():
            await asyncio.wait((task,), timeout=max(0.0, until - loop.time()))
            task.cancel()
            await asyncio.wait((task,))
        await self._stream.close()


class _TaskMember:
    def __init__(
        self, fn: Callable[[], Awaitable[object]], name: str, on_stop: Literal["cancel", "wait"]
    ) -> None:
        self.name = name
        self._fn = fn
        self._on_stop = on_stop
        self._task: asyncio.Task[object] | None = None
        self._cancelled_by_group = False

    async def start(self) -> None:
        async def run() -> object:
            return await self._fn()

        self._task = asyncio.get_running_loop().create_task(run(), name=self.name)

    def check(self) -> Check:
        if self._task is None:
            return Check(self.name, False, "not started")
        # A task that returned has done its work; only one that failed is not fine.
        if self._task.done() and not self._task.cancelled() and self._task.exception():
            return Check(self.name, False, "failed")
        return Check(self.name, True, "running" if not self._task.done() else "ended")

    async def ended(self) -> None:
        assert self._task is not None
        try:
            await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if not (self._task.cancelled() and self._cancelled_by_group):
                raise

    async def stop(self, timeout: float) -> None:
        task = self._task
        if task is None or task.done():
            return
        if self._on_stop == "wait":
            await asyncio.wait((task,), timeout=timeout)
            if task.done():
                return
        self._cancelled_by_group = True
        task.cancel()
        await asyncio.wait((task,))


def _connection_check(name: str, subscriber: object) -> Check:
    """A running subscription's check: fine unless its transport says it is disconnected."""
    connected = getattr(subscriber, "connected", None)
    if connected is False:
        return Check(name, False, "disconnected (reconnecting)")
    return Check(name, True, "running")


def _owned_connection_check(resource: object) -> Check | None:
    """The check of an owned nats-py connection (``is_connected``), None for other resources."""
    connected = getattr(resource, "is_connected", None)
    if not isinstance(connected, bool):
        return None
    where = _configured_servers(resource)
    if connected:
        return Check(f"connection to {where}", True, "connected")
    reconnecting = getattr(resource, "is_reconnecting", False) is True
    return Check(f"connection to {where}", False, "reconnecting" if reconnecting else "closed")


def _configured_servers(client: object) -> str:
    """The servers a nats-py client was given (not those it discovered), credentials left out.

    The name of its check stays the same through reconnects and cluster gossip.
    """
    servers = list(getattr(client, "servers", None) or ())
    discovered = list(getattr(client, "discovered_servers", None) or ())
    given = [url for url in servers if url not in discovered] or servers
    names = [f"{url.scheme}://{url.hostname}:{url.port}" for url in given]
    return ", ".join(names) or "NATS"


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
        self._members: list[_Member] = []
        self._owned: list[_Closeable] = []
        self._watchers: list[asyncio.Task[None]] = []
        self._started = False
        self._stopping: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._signalled: signal.Signals | None = None
        self._stop_requested: asyncio.Event | None = None
        self._start_finished: asyncio.Event | None = None  # set when start() is through
        self._start_through = False

    # -------------------------------------------------------------- members

    def _add(self, member: _Member) -> None:
        if self._started:
            raise RuntimeError("add members to a Group before it starts")
        self._members.append(member)

    def subscribe(self, subscriber: Subscriber[T], subject: str, handler: Handler[T]) -> None:
        """Add a subscription of ``handler`` to ``subject``, started with the group.

        Raises:
            RuntimeError: The group has started.
        """
        self._add(_SubscriptionMember(subscriber, subject, handler))

    def process(
        self, stream: MessageStream[T], handler: Handler[T], *, concurrency: int = 1
    ) -> None:
        """Add :func:`goflux.process` of ``stream``; the group starts, stops and closes it.

        Raises:
            RuntimeError: The group has started.
            ValueError: ``concurrency`` < 1.
        """
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self._add(_ProcessMember(stream, handler, concurrency))

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
        self._add(_TaskMember(fn, label, on_stop))

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
            check = _owned_connection_check(resource)
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
            results = await asyncio.gather(
                *(member.start() for member in self._members), return_exceptions=True
            )
            loop = asyncio.get_running_loop()
            for member, result in zip(self._members, results, strict=True):
                if isinstance(result, BaseException):
                    self._fail(member, result)
                else:
                    self._watchers.append(
                        loop.create_task(self._watch(member), name=f"goflux-group-{member.name}")
                    )
        finally:
            self._start_through = True
            finished.set()  # a drain requested meanwhile may go ahead now
        if self._failure is not None:
            await self.stop()
            raise self._failure

    async def _watch(self, member: _Member) -> None:
        try:
            await member.ended()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - recorded and raised from wait()
            self._fail(member, exc)

    def _fail(self, member: _Member, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
            logger.error(
                "%s failed: %s: %s; stopping the group", member.name, type(exc).__name__, exc
            )
        else:
            logger.error("%s failed too: %s: %s", member.name, type(exc).__name__, exc)
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
