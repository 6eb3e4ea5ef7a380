"""The one SparkContext of the pytest process, handed out only while it works.

A Python process holds at most one SparkContext (one driver), and every session of the
process talks to one JVM (the gateway) over Py4J. A test that fails can leave that JVM
dead, or its Py4J connection out of step: pytest-timeout raises inside whatever the
main thread was doing, and when that was a Py4J call, the answer to it is still on
its way and becomes the answer to the next call (``SparkConf does not exist in the
JVM``, ``KeyError: 'c'``), for every later test of the run.

:class:`OneContext` hands out a session only after checking it when something went
wrong: after a test that used it failed (:meth:`OneContext.failed`, called from
tests/spark/conftest.py's report hook) it asks the JVM to echo a fresh value
(:func:`healthy`), and a session that fails the check, a test interrupted in the
middle of a call, and a start that failed are thrown away with their JVM
(:func:`discard_jvm`). The next session then starts a new JVM: one failure fails one
test.
"""

from __future__ import annotations

import contextlib
import gc
import subprocess
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession, SQLContext

from goflux.transports import spark as gspark


def _local() -> SparkSession:
    session = gspark.local_session("local[2]", app_name="goflux-tests")
    session.sparkContext.setLogLevel("ERROR")
    return session


def gateway_process() -> subprocess.Popen[bytes] | None:
    """The process of the current Py4J gateway JVM, if this process launched one."""
    return getattr(SparkContext._gateway, "proc", None)


def healthy(session: SparkSession) -> bool:
    """True if ``session`` is pyspark's current one and its JVM answers in step.

    Checks that the gateway JVM runs, then asks it to echo a fresh random value on
    this thread's Py4J connection: a connection out of step returns the answer to an
    earlier call instead (or fails), a dead JVM fails at once. Do not call it while a
    call may still run in the JVM (a test interrupted mid-call): it would wait for it.
    """
    context = session.sparkContext
    jvm = SparkContext._jvm
    if context is not SparkContext._active_spark_context or context._jsc is None or jvm is None:
        return False
    process = gateway_process()
    if process is not None and process.poll() is not None:
        return False
    nonce = uuid.uuid4().hex
    try:
        echoed = jvm.java.util.Objects.toString(nonce)
        return bool(echoed == nonce and not context._jsc.sc().isStopped())
    except Exception:  # noqa: BLE001 - Py4JError, or an earlier call's answer of any shape
        return False


def _gateway_processes() -> list[subprocess.Popen[Any]]:
    """Every gateway JVM pyspark launched in this process (and still knows).

    The current gateway's, and one whose launch was interrupted before pyspark kept
    it anywhere (a timeout while ``launch_gateway`` waits for the JVM): only the
    garbage collector still knows it.
    """
    return [
        obj
        for obj in gc.get_objects()
        if isinstance(obj, subprocess.Popen)
        and isinstance(obj.args, list)
        and obj.args
        and Path(str(obj.args[0])).name == "spark-submit"
    ]


def discard_jvm() -> None:
    """Kill the gateway JVM and forget pyspark's gateway, context and sessions.

    Nothing is asked of the JVM (it may be dead, or its connection out of step): it
    is killed, the Python side's sockets and servers are closed, and pyspark's
    singletons are cleared, so the next ``local_session`` launches a new JVM.
    """
    for process in _gateway_processes():
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdin is not None:
            process.stdin.close()  # the pipe whose end would tell the JVM to exit
    context = SparkContext._active_spark_context
    if context is not None:
        server = getattr(context, "_accumulatorServer", None)
        if server is not None:
            server.shutdown()  # a Python thread and socket: no JVM involved
            context._accumulatorServer = None  # type: ignore[assignment]
        context._jsc = None
    gateway = SparkContext._gateway
    if gateway is not None:
        # The JVM is gone: the shutdown command fails; what matters is that the
        # connections, the callback server and the finalizer thread are closed.
        with contextlib.suppress(Exception):
            gateway.shutdown()
    with SparkContext._lock:
        SparkContext._gateway = None
        SparkContext._jvm = None
        SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None


class OneContext:
    """The one SparkContext of this process: the local[2] session or a borrowed one.

    Sessions are handed out by :meth:`local` (or, while :meth:`borrowed`, by the
    callable it yields); after :meth:`failed`, a session is checked before it is
    handed out again, and replaced (with a new JVM) if it is broken.
    """

    def __init__(self, make_local: Callable[[], SparkSession] = _local) -> None:
        self._make_local = make_local
        self._make = make_local
        self._session: SparkSession | None = None
        self._borrowed = False
        self._doubt: str | None = None  # None, "failed" or "interrupted"
        self.discarded = 0  # JVMs thrown away because a session was broken

    def local(self) -> SparkSession:
        """The local[2] session, started (again) if there is none or it was broken."""
        if self._borrowed:
            raise RuntimeError("a test asked for the local session while another one runs")
        return self._current()

    def failed(self, *, interrupted: bool) -> None:
        """A test that used the session failed: check the session before handing it out.

        ``interrupted``: it failed by an exception raised wherever it happened to be
        (pytest-timeout's, KeyboardInterrupt), perhaps in the middle of a Py4J call;
        its JVM is then replaced without asking it anything.
        """
        if interrupted or self._doubt is None:
            self._doubt = "interrupted" if interrupted else "failed"

    def _suspect(self) -> bool:
        """True if the current session must not be used: it failed its check."""
        doubt, self._doubt = self._doubt, None
        if self._session is None or doubt is None:
            return False
        return doubt == "interrupted" or not healthy(self._session)

    def _discard(self) -> None:
        self._session = None
        self.discarded += 1
        discard_jvm()

    def _current(self) -> SparkSession:
        if self._suspect():
            self._discard()
        if self._session is None:
            try:
                self._session = self._make()
            except BaseException:
                # A start that failed or was interrupted can leave a gateway whose
                # connection is out of step, or a JVM nobody holds: never reuse it.
                self._discard()
                raise
        return self._session

    @contextmanager
    def borrowed(self, make: Callable[[], SparkSession]) -> Iterator[Callable[[], SparkSession]]:
        """Stop the local session and run ``make``'s session instead, until done.

        Yields the function that hands out that session (made again, with a new JVM,
        when a failed test broke it); the session is stopped afterwards.
        """
        if self._borrowed:
            raise RuntimeError("the SparkContext is borrowed already")
        self.stop()
        self._borrowed, self._make = True, make
        try:
            yield self._current
        finally:
            try:
                self.stop()
            finally:
                self._borrowed, self._make = False, self._make_local

    def stop(self) -> None:
        """Stop the session, if one runs (throwing its JVM away if it is broken)."""
        if self._suspect():
            self._discard()
        session, self._session = self._session, None
        if session is None:
            return
        try:
            session.stop()
        except BaseException:
            discard_jvm()
            raise
