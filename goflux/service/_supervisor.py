"""Several worker processes of one service: the supervisor of ``goflux run --workers N``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from goflux._extras import require
from goflux._urls import http_url
from goflux.service._crashes import CRASH_DIR_ENV, CrashBook
from goflux.service._health import health_app
from goflux.service._http import serve_probes
from goflux.service._link import LINE_LIMIT, read_reports
from goflux.service._options import RunOptions
from goflux.service._routes import bind_routes
from goflux.service._signals import stop_signals
from goflux.service._worker import EXIT_BAD_SERVICE, EXIT_FAILED

__all__ = ("run_supervisor",)

logger = logging.getLogger("goflux.run")

PIPE_GRACE = 1.0
"""Seconds a worker's link and stderr get to end after its process exits.

A process it forked may hold them open (multiprocessing with fork): the supervisor
reads what was written, then stops waiting.
"""


@dataclass
class _Worker:
    id: int
    process: asyncio.subprocess.Process | None = None
    report: dict[str, object] | None = None
    failed: str | None = None
    signalled: str | None = None  # the signal that made this process drain
    ever_ready: bool = False
    ready_seen: bool = False  # its current process has reported ready (logged once each)
    replacing: bool = False
    unclean: bool = False  # its last exit, while the supervisor stopped, was not clean
    held: list[str] = field(default_factory=list)  # what it was handling when it died
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    pipes: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def ready(self) -> bool:
        return self.alive and self.report is not None and self.report.get("ready") is True

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def on_message(self, message: dict[str, object]) -> None:
        report = message.get("readiness")
        if isinstance(report, dict):
            self.report = report
            if report.get("ready") is True and not self.ready_seen:
                self.ever_ready = self.ready_seen = True
                logger.info("worker %d (pid %s) is ready", self.id, self.pid)
        failed = message.get("failed")
        if isinstance(failed, str):
            self.failed = failed
        signalled = message.get("signalled")
        if isinstance(signalled, str):
            self.signalled = signalled


@dataclass(frozen=True)
class _FleetReadiness:
    """The supervisor's ``/readyz``: ready when every worker is."""

    stopping: bool
    workers: tuple[_Worker, ...]

    @property
    def ready(self) -> bool:
        return not self.stopping and all(worker.ready for worker in self.workers)

    def as_dict(self) -> dict[str, object]:
        return {
            "ready": self.ready,
            "state": "stopping" if self.stopping else "running",
            "workers": {
                str(w.id): {**(w.report or {}), "pid": w.pid, "alive": w.alive, "ready": w.ready}
                for w in self.workers
            },
        }


def _describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _relative(paths: Iterable[str]) -> list[str]:
    """Changed files, relative to the current directory when under it, sorted."""
    here = os.getcwd()
    return sorted({os.path.relpath(path) if path.startswith(here) else path for path in paths})


async def _read_end(fd: int) -> asyncio.StreamReader:
    """An asyncio reader over the read end of a pipe (closed with the reader)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb"))
    return reader


async def _relay(stream: asyncio.StreamReader) -> None:
    """Copy a worker's stderr to ours line by line, so lines of workers never interleave."""
    out = sys.stderr.buffer
    while True:
        try:
            line = await stream.readline()
        except ValueError:  # longer than the limit: pass the piece on as it is
            line = await stream.read(LINE_LIMIT)
        if not line:
            return
        out.write(line)
        out.flush()


class _Supervisor:
    def __init__(self, spec: str, options: RunOptions) -> None:
        self._spec = spec
        self._options = options
        self._workers = tuple(_Worker(n) for n in range(1, options.workers + 1))
        self._stopping = asyncio.Event()
        self._failure: str | None = None
        self._status = EXIT_FAILED  # the exit status when giving up
        self._restarts: list[float] = []
        self._crashes: CrashBook | None = None  # made when the workers start
        self._routes: socket.socket | None = None  # the HTTP routes' socket, every worker's

    # ---------------------------------------------------------------- signals

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._stopping.is_set():
            logger.info("%s received: already stopping", sig.name)
            return
        logger.info("%s received: stopping the workers", sig.name)
        self._stop()

    def _stop(self) -> None:
        self._stopping.set()
        if self._routes is not None:
            # No worker starts any more: once the last worker has closed its copy too,
            # a new connection is refused (clearly not delivered), not reset.
            self._routes.close()
        for worker in self._workers:
            worker.changed.set()  # a worker waiting for a change gives up waiting
            if worker.alive and worker.process is not None:
                worker.process.send_signal(signal.SIGTERM)

    def _give_up(self, reason: str, status: int = EXIT_FAILED) -> None:
        if self._failure is None:
            self._failure = reason
            self._status = status
            logger.error("giving up: %s", reason)
        self._stop()

    # ---------------------------------------------------------------- workers

    async def _start(self, worker: _Worker) -> asyncio.subprocess.Process:
        ours, theirs = socket.socketpair()
        # stderr is a pipe of our own, not asyncio's: Process.wait() waits for asyncio's
        # pipes to close too, and a process the worker forked may hold them for ever.
        errors, their_errors = os.pipe()
        command = [sys.executable, "-m", "goflux", "run", self._spec, *self._worker_arguments()]
        command += ["--worker-id", str(worker.id), "--status-fd", str(theirs.fileno())]
        passed = [theirs.fileno()]
        if self._routes is not None:  # every worker, restarted ones too, serves this socket
            host, port = self._routes.getsockname()[:2]
            command += ["--http-host", host, "--http-port", str(port)]
            command += ["--http-fd", str(self._routes.fileno())]
            passed.append(self._routes.fileno())
        env = {**os.environ, "GOFLUX_WORKER_ID": str(worker.id)}
        env.pop(CRASH_DIR_ENV, None)
        if self._crashes is not None:
            env[CRASH_DIR_ENV] = self._crashes.directory
        try:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stderr=their_errors,
                pass_fds=passed,
                env=env,
                # Its own process group: a terminal's Ctrl-C reaches the supervisor
                # only, which forwards SIGTERM once to each worker.
                process_group=0,
            )
        except BaseException:
            os.close(errors)
            raise
        finally:
            theirs.close()
            os.close(their_errors)
        worker.process = process
        worker.report = worker.failed = worker.signalled = None
        worker.ready_seen = False
        reader, writer = await asyncio.open_connection(sock=ours, limit=LINE_LIMIT)
        worker.pipes = [
            asyncio.create_task(self._read(worker, reader, writer)),
            asyncio.create_task(_relay(await _read_end(errors))),
        ]
        logger.info("worker %d started (pid %d)", worker.id, process.pid)
        if self._stopping.is_set():  # a stop came while it was being started
            process.send_signal(signal.SIGTERM)
        return process

    async def _read(
        self, worker: _Worker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            await read_reports(reader, worker.on_message)
        finally:
            writer.close()

    async def _pipes_closed(self, worker: _Worker) -> None:
        """Wait for the last lines of an exited worker (briefly: see PIPE_GRACE)."""
        _, open_ = await asyncio.wait(worker.pipes, timeout=PIPE_GRACE)
        for pipe in open_:
            pipe.cancel()
        if open_:
            await asyncio.wait(open_)

    def _worker_arguments(self) -> list[str]:
        o = self._options
        return [
            "--drain-timeout", str(o.drain_timeout),
            "--kill-grace", str(o.kill_grace),
            "--log-format", o.log_format,
            "--log-level", o.log_level,
            "--app-dir", o.app_dir,
        ]  # fmt: skip

    async def _keep(self, worker: _Worker) -> None:
        """Run ``worker`` until the supervisor stops, restarting it when it dies."""
        while not self._stopping.is_set():
            try:
                process = await self._start(worker)
            except OSError as exc:  # no process could be made: out of memory, pids, fds
                if self._stopping.is_set():
                    return  # stopped meanwhile (the routes' socket is closed)
                self._give_up(f"cannot start worker {worker.id}: {exc}")
                return
            code = await process.wait()
            worker.held = []
            if self._crashes is not None and not (self._stopping.is_set() or worker.replacing):
                # At once: a message it held may be redelivered to another worker soon.
                how = f"worker {worker.id} (pid {worker.pid}) {_describe_exit(code)}"
                worker.held = self._crashes.died(worker.id, how)
            await self._pipes_closed(worker)
            if self._stopping.is_set():
                self._judge_stop(worker, code)
                return
            if worker.replacing:
                worker.replacing = False
                continue
            if not await self._after_exit(worker, code):
                return

    def _judge_stop(self, worker: _Worker, code: int) -> None:
        """Whether a worker's exit while the supervisor stops was clean."""
        if code == 0:
            return
        if code == EXIT_BAD_SERVICE and self._status == EXIT_BAD_SERVICE:
            return  # the reason the supervisor gives up: said once already
        if code == -signal.SIGTERM and worker.report is None:
            return  # killed while booting, before its service began: nothing to drain
        worker.unclean = True
        logger.error("worker %d %s while stopping", worker.id, _describe_exit(code))

    async def _after_exit(self, worker: _Worker, code: int) -> bool:
        """Decide on a worker that exited on its own; True to start it again.

        A worker that said why it failed before it was ever ready (its service cannot
        be loaded or started) makes the supervisor give up at once; one that died
        without a word (a signal, ``os._exit``: a crash, maybe on a message) is
        restarted like any other, within the restart budget.
        """
        reason = f": {worker.failed}" if worker.failed else ""
        if worker.held:
            reason = f" while handling {'; '.join(worker.held)}{reason}"
        if code == 0 and worker.signalled is None:
            if not worker.held:
                logger.info("worker %d exited: its service ended", worker.id)
                return False
            # A handler called sys.exit(): the service did not end, it stopped mid-message.
            logger.warning("worker %d (pid %s) exited%s", worker.id, worker.pid, reason)
        elif code == 0:
            logger.warning(
                "worker %d (pid %s) was stopped by a %s the supervisor did not send",
                worker.id, worker.pid, worker.signalled,
            )  # fmt: skip
        else:
            logger.warning(
                "worker %d (pid %s) %s%s", worker.id, worker.pid, _describe_exit(code), reason
            )
        if self._options.reload:
            logger.info("worker %d waits for a change to restart", worker.id)
            worker.changed.clear()
            await worker.changed.wait()
            return True
        if not worker.ever_ready and code != 0 and worker.failed is not None:
            status = EXIT_BAD_SERVICE if code == EXIT_BAD_SERVICE else EXIT_FAILED
            self._give_up(
                f"worker {worker.id} {_describe_exit(code)} before it was ready{reason}", status
            )
            return False
        return await self._back_off(worker, code, reason)

    async def _back_off(self, worker: _Worker, code: int, reason: str) -> bool:
        """Wait before a restart; False when the restart cap is reached or stopping."""
        now = time.monotonic()
        window = self._options.restart_window
        self._restarts = [t for t in self._restarts if now - t < window]
        self._restarts.append(now)
        if len(self._restarts) > self._options.max_restarts:
            self._give_up(
                f"{len(self._restarts)} worker restarts within {window:.0f}s "
                f"(at most {self._options.max_restarts}); worker {worker.id} "
                f"{_describe_exit(code)}{reason}"
            )
            return False
        delay = min(
            self._options.backoff * 2 ** (len(self._restarts) - 1), self._options.max_backoff
        )
        logger.info("restarting worker %d in %.1fs", worker.id, delay)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._stopping.wait()
        return not self._stopping.is_set()

    async def _reload(self) -> None:
        import watchfiles  # noqa: PLC0415 - the service extra, needed only with --reload

        dirs = self._options.reload_dirs or (self._options.app_dir,)
        async for changes in watchfiles.awatch(
            *dirs, watch_filter=watchfiles.PythonFilter(), stop_event=self._stopping
        ):
            names = _relative(path for _, path in changes)
            logger.info("changed: %s; restarting the workers", ", ".join(names))
            for worker in self._workers:
                if worker.alive and worker.process is not None:
                    worker.replacing = True
                    worker.process.send_signal(signal.SIGTERM)
                worker.changed.set()

    async def _wait_workers(self, keepers: list[asyncio.Task[None]]) -> None:
        """Wait for the workers; once stopping, kill those past the drain deadline."""
        pending = set(keepers)
        stopped = asyncio.ensure_future(self._stopping.wait())
        try:
            while pending and not self._stopping.is_set():
                await asyncio.wait({*pending, stopped}, return_when=asyncio.FIRST_COMPLETED)
                pending = {task for task in pending if not task.done()}
        finally:
            stopped.cancel()
        if not pending:
            return
        limit = self._options.drain_timeout + self._options.kill_grace
        _, late = await asyncio.wait(pending, timeout=limit)
        if late:
            for worker in self._workers:
                if worker.alive and worker.process is not None:
                    logger.error("worker %d did not exit in time: killing it", worker.id)
                    self._failure = self._failure or f"worker {worker.id} did not drain in time"
                    worker.process.kill()
            await asyncio.wait(late)

    async def run(self) -> int:
        with stop_signals(self._on_signal):
            return await self._run()

    async def _serve_probes(self, stack: contextlib.AsyncExitStack) -> bool:
        """Serve the fleet's probes with ``--health-port``; False when they cannot be."""
        if self._options.health_port is None:
            return True
        app = health_app(
            lambda: _FleetReadiness(self._stopping.is_set(), self._workers),
            liveness=lambda: {"pid": os.getpid(), "workers": {w.id: w.pid for w in self._workers}},
        )
        try:
            await serve_probes(stack, app, self._options)
        except OSError as exc:
            logger.error("%s", exc)
            return False
        return True

    def _bind_routes(self, stack: contextlib.AsyncExitStack) -> bool:
        """Bind the HTTP routes' socket once, for every worker; False when it cannot be."""
        if self._options.http_port is None:
            return True
        try:
            self._routes = bind_routes(self._options)
        except OSError as exc:
            logger.error("%s", exc)
            return False
        stack.callback(self._routes.close)
        host, port = self._routes.getsockname()[:2]
        logger.info(
            "HTTP routes on %s, shared by %d workers", http_url(host, port), len(self._workers)
        )
        return True

    async def _run(self) -> int:
        if self._options.reload:  # before any worker starts: a clear error, at once
            require("watchfiles", "service", "goflux run --reload")
        async with contextlib.AsyncExitStack() as stack:
            if not await self._serve_probes(stack) or not self._bind_routes(stack):
                return EXIT_FAILED
            if self._options.quarantine_after:
                try:
                    self._crashes = CrashBook(self._options.quarantine_after)
                except OSError as exc:
                    logger.warning("poison messages will not be recognised: %s", exc)
                else:
                    stack.callback(self._crashes.close)
            logger.info("starting %d workers of %s", len(self._workers), self._spec)
            _warn_budget(self._options)
            keepers = [asyncio.create_task(self._keep(worker)) for worker in self._workers]
            reloading = asyncio.create_task(self._reload()) if self._options.reload else None
            try:
                await self._wait_workers(keepers)
            finally:
                if reloading is not None:
                    reloading.cancel()
                    await asyncio.wait((reloading,))
            for keeper in keepers:
                if not keeper.cancelled() and (error := keeper.exception()) is not None:
                    logger.error("keeping a worker failed", exc_info=error)
                    self._failure = self._failure or f"{type(error).__name__}: {error}"
        if self._failure is not None:
            return self._status
        unclean = [w.id for w in self._workers if w.unclean]
        if unclean:
            logger.error("workers %s did not exit cleanly", unclean)
            return EXIT_FAILED
        logger.info("every worker has exited")
        return 0


def _warn_budget(options: RunOptions) -> None:
    """Warn when a poison message would exhaust the restarts before its quarantine."""
    if 0 < options.max_restarts < options.quarantine_after:
        logger.warning(
            "--quarantine-after %d is above --max-restarts %d: a poison message "
            "makes the supervisor give up before it is quarantined",
            options.quarantine_after,
            options.max_restarts,
        )


def run_supervisor(spec: str, options: RunOptions) -> int:
    """Run ``options.workers`` worker processes of ``spec``; return the exit status.

    Each worker is ``goflux run spec`` in its own process (and process group), with its
    own group and connections; its stderr is passed on line by line. A worker that
    dies (before or after it was ready), or is stopped by a signal the supervisor did
    not send, is restarted after a backoff (0.5 s, doubling per restart within the
    window, at most ``max_backoff``) while the others go on; more than
    ``max_restarts`` restarts within ``restart_window`` seconds, or a worker that
    reports a failure to load or start its service before it was ever ready, makes
    the supervisor stop the others and exit non-zero. The JetStream messages a worker
    was handling when it died are counted in a crash record every worker reads; one
    counted ``quarantine_after`` times is quarantined on its next delivery
    (:class:`~goflux.PoisonMessage`). A worker whose service ended by itself (exit 0
    without a signal) is not restarted. SIGTERM or SIGINT is forwarded to every
    worker, and their drains are awaited (a worker still running ``kill_grace`` seconds
    after the drain timeout is killed). With ``reload``, the workers are restarted
    when a Python file changes, and a failed worker waits for the next change instead
    of being restarted. With ``http_port``, the supervisor binds it once and every
    worker (a restarted one too) serves the group's HTTP routes on that socket: the
    kernel hands each connection to one of the workers taking connections.

    Returns:
        0 when every worker drained (or ended) cleanly; 2 when the service cannot be
        loaded; else 1.
    """
    return asyncio.run(_Supervisor(spec, options).run())
