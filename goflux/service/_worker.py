"""One process running one service: what ``goflux run`` does in each worker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable
from typing import Any, NoReturn

from goflux._compose.group import Group
from goflux._compose.poison import install_guard
from goflux._errors import GofluxError
from goflux.service._crashes import worker_guard
from goflux.service._health import health_app
from goflux.service._http import serve_probes
from goflux.service._link import WorkerLink
from goflux.service._load import ServiceLoadError, load_service
from goflux.service._options import RunOptions
from goflux.service._routes import NoRoutes, WorkerRoutes, warn_unserved
from goflux.service._signals import stop_signals

__all__ = ("EXIT_BAD_SERVICE", "EXIT_FAILED", "REPORT_INTERVAL", "run_worker")

logger = logging.getLogger("goflux.run")

EXIT_FAILED = 1
"""Exit status of a worker whose service failed to start or failed while running."""
EXIT_BAD_SERVICE = 2
"""Exit status when ``MODULE:ATTR`` cannot be loaded, or has no HTTP routes for ``--http-port``."""
MAX_REASON = 2000
"""Longest failure reason logged and sent to the supervisor (one line, not a dump)."""
REPORT_INTERVAL = 0.25
"""Seconds between readiness samples sent to the supervisor (sent only on change)."""


class _Worker:
    def __init__(
        self, spec: str, options: RunOptions, link: WorkerLink | None, http_fd: int | None
    ) -> None:
        self._spec = spec
        self._options = options
        self._link = link
        self._http_fd = http_fd
        self._routes: WorkerRoutes | None = None
        self._stop = asyncio.Event()
        self._report_now = asyncio.Event()  # a state change to report without delay
        self._group = Group(drain_timeout=options.drain_timeout, signals=())

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._stop.is_set():
            if sig == signal.SIGINT and self._link is None:
                self._fail("interrupted again: exiting without finishing the drain")
                self._exit_now(EXIT_FAILED)
            logger.info("%s received: already draining", sig.name)
            return
        logger.info("%s received: draining (deadline %.1fs)", sig.name, self._options.drain_timeout)
        if self._link is not None:
            self._link.send({"signalled": sig.name})
        self._stop.set()
        self._report_now.set()

    def _exit_now(self, status: int) -> NoReturn:
        """Leave at once: the drain cannot finish (a handler ignores cancellation)."""
        if self._link is not None:
            self._link.close()
        logging.shutdown()
        os._exit(status)

    async def _drain(self) -> None:
        """Stop the group; past the drain timeout and a grace, exit without it."""
        limit = self._options.drain_timeout + self._options.kill_grace
        if self._routes is not None:
            self._routes.drain()  # new requests: 503 at once, those in flight finish
        try:
            async with asyncio.timeout(limit):
                await self._group.stop()
        except TimeoutError:
            self._fail(f"the drain did not finish within {limit:.1f}s: exiting without it")
            self._exit_now(EXIT_FAILED)

    async def _watch_supervisor(self, link: WorkerLink) -> None:
        await link.supervisor_gone()
        if not self._stop.is_set():
            logger.warning("the supervisor is gone: draining")
            self._stop.set()

    async def _report(self, link: WorkerLink) -> None:
        last: dict[str, object] | None = None
        while True:
            now = self._group.readiness().as_dict()
            if now != last:
                link.send({"readiness": now})
                last = now
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REPORT_INTERVAL):
                    await self._report_now.wait()
            self._report_now.clear()

    def _fail(self, reason: str) -> None:
        if len(reason) > MAX_REASON:
            reason = reason[: MAX_REASON - 1] + "…"
        logger.error("%s", reason)
        if self._link is not None:
            self._link.send({"readiness": self._group.readiness().as_dict()})
            self._link.send({"failed": reason})

    async def _until_stop(self, task: asyncio.Future[Any]) -> bool:
        """Wait until ``task`` ends or a stop is asked; True if it ended."""
        stopper = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait((task, stopper), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        return task.done()

    async def run(self) -> int:
        with stop_signals(self._on_signal):
            return await self._run()

    async def _run(self) -> int:
        try:
            service = load_service(self._spec, app_dir=self._options.app_dir)
        except ServiceLoadError as exc:
            self._fail(f"cannot load {self._spec}: {exc}")
            return EXIT_BAD_SERVICE
        async with contextlib.AsyncExitStack() as stack:
            background: list[asyncio.Task[None]] = []
            stack.callback(lambda: [task.cancel() for task in background])
            if self._link is not None:
                background.append(asyncio.create_task(self._watch_supervisor(self._link)))
                background.append(asyncio.create_task(self._report(self._link)))
            if self._options.health_port is not None:
                app = health_app(self._group.readiness, liveness=lambda: {"pid": os.getpid()})
                try:
                    await serve_probes(stack, app, self._options)
                except OSError as exc:
                    self._fail(str(exc))
                    return EXIT_FAILED
            if self._options.http_port is not None:
                try:
                    routes = WorkerRoutes(self._options, self._http_fd)
                    self._routes = await stack.enter_async_context(routes)
                except OSError as exc:
                    self._fail(str(exc))
                    return EXIT_FAILED
            return await self._serve(service(self._group))
        raise AssertionError("unreachable")  # pragma: no cover - mypy: the stack may swallow

    async def _serve(self, filling: Awaitable[object]) -> int:
        failed = await self._fill(filling)
        if failed is not None:
            return failed
        group = self._group
        starting = asyncio.ensure_future(group.start())
        if not await self._until_stop(starting):
            await self._drain()  # once every member is up, so that none is left running
        try:
            await starting
        except Exception as exc:
            logger.debug("%s failed to start", self._spec, exc_info=exc)
            self._fail(f"{self._spec} failed to start: {type(exc).__name__}: {exc}")
            return EXIT_FAILED
        self._report_now.set()
        if not self._stop.is_set() and group.failure is None:
            if self._routes is not None:
                await self._routes.serve()
            logger.info("%s is running", self._spec)
        ended = asyncio.ensure_future(group.wait())
        if not await self._until_stop(ended):
            self._report_now.set()
            await self._drain()
        try:
            await ended
        except Exception as exc:
            logger.debug("%s failed", self._spec, exc_info=exc)
            self._fail(f"{self._spec} failed: {type(exc).__name__}: {exc}")
            return EXIT_FAILED
        if self._stop.is_set():
            logger.info("drained; exiting")
        else:
            logger.info("every member of %s ended; exiting", self._spec)
        return 0

    async def _fill(self, filling: Awaitable[object]) -> int | None:
        """Run the service function; None when the group is ready to start, else a status."""
        group = self._group
        filled = asyncio.ensure_future(filling)
        if not await self._until_stop(filled):
            filled.cancel()
            await asyncio.wait((filled,))
            await self._drain()
            logger.info("stopped before %s was up", self._spec)
            return 0
        error = None if filled.cancelled() else filled.exception()
        if filled.cancelled() or error is not None:
            logger.debug("%s failed to start", self._spec, exc_info=error)
            await group.stop()
            said = f"{type(error).__name__}: {error}" if error is not None else "cancelled"
            self._fail(f"{self._spec} failed to start: {said}")
            return EXIT_FAILED
        if not group.members:
            await group.stop()
            self._fail(f"{self._spec} added nothing to run: no subscription, process or task")
            return EXIT_FAILED
        return await self._find_routes()

    async def _find_routes(self) -> int | None:
        """With ``--http-port``, find the group's HTTP app; without, warn if it has one."""
        if self._routes is None:
            warn_unserved(self._group, self._spec)
            return None
        try:
            self._routes.prepare(self._group, self._spec)
        except NoRoutes as exc:
            await self._group.stop()
            self._fail(str(exc))
            return EXIT_BAD_SERVICE
        except GofluxError as exc:
            await self._group.stop()
            self._fail(f"{self._spec} failed to start: {type(exc).__name__}: {exc}")
            return EXIT_FAILED
        return None


async def _run_worker(
    spec: str, options: RunOptions, status_fd: int | None, http_fd: int | None
) -> int:
    # What the service execs must not inherit the supervisor's link or the shared
    # listening socket (it would hold the port open after goflux exits).
    for fd in (status_fd, http_fd):
        if fd is not None:
            os.set_inheritable(fd, False)
    link = None
    if status_fd is not None:
        link = WorkerLink(status_fd)
        await link.open()
        # Under a supervisor: its subscriptions keep what they run where it sees it.
        install_guard(worker_guard(int(os.environ.get("GOFLUX_WORKER_ID", "1"))))
    try:
        return await _Worker(spec, options, link, http_fd).run()
    finally:
        install_guard(None)
        if link is not None:
            await link.flush()
            link.close()


def run_worker(
    spec: str, options: RunOptions, *, status_fd: int | None = None, http_fd: int | None = None
) -> int:
    """Run the service ``spec`` in this process until a signal; return the exit status.

    SIGTERM or SIGINT (or, under a supervisor, its exit) drains the group within
    ``options.drain_timeout``. With ``options.health_port``, ``/livez`` and
    ``/readyz`` are served from this process; under a supervisor (``status_fd``),
    readiness changes are reported to it instead. With ``options.http_port``, the
    group's HTTP routes are served there (on ``http_fd``, the supervisor's listening
    socket, when given) once the group has started; a drain answers new requests 503
    while those in flight finish. A service with HTTP members but no port is warned
    about: nothing serves their routes.

    Returns:
        0 after a drain or when every member ended; :data:`EXIT_FAILED` when the
        service failed to start (the HTTP port in use included) or failed while
        running; :data:`EXIT_BAD_SERVICE` when ``spec`` cannot be loaded, or has no
        HTTP routes for ``http_port``. The reason is logged as one line.
    """
    return asyncio.run(_run_worker(spec, options, status_fd, http_fd))
