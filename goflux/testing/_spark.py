"""Real Spark servers for tests and demos, started from the jars the ``pyspark`` wheel ships.

- :class:`SparkConnectServer`: a Spark Connect server (``sc://127.0.0.1:<port>``).
- :class:`SparkStandaloneCluster`: a standalone master and workers
  (``spark://127.0.0.1:<port>``); executors run in the workers' JVMs.

Both listen on loopback ports the JVM picks, run their Python workers with this
interpreter, keep their files in a temporary directory, and are ready when their own
log says so (never after a fixed sleep). Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

from goflux._errors import GofluxError
from goflux.testing import _abandoned, _process
from goflux.testing._process import LoggedProcess

__all__ = ("SparkConnectServer", "SparkProcessError", "SparkStandaloneCluster", "spark_home")

_LOG_LINES = 400
_SWEEP_PREFIX = "goflux-spark-"  # every server's temporary directory starts so
_CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_CONNECT_STARTED = re.compile(r"Spark Connect server started at: (\S+):(\d+)")
_MASTER_STARTED = re.compile(r"Starting Spark master at (spark://\S+:\d+)")
_MASTER_LEADER = re.compile(r"I have been elected leader")
_WORKER_REGISTERED = re.compile(r"Successfully registered with master")
_CAUSE = re.compile(r"\bERROR\b|Exception:|Caused by:")


class SparkProcessError(GofluxError):
    """A Spark server process could not be found, did not start, or exited early."""


def spark_home() -> Path:
    """The installed ``pyspark`` package directory, which is a complete ``SPARK_HOME``.

    Raises:
        SparkProcessError: pyspark is not installed (``pip install 'goflux[spark]'``).
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SparkProcessError("pyspark is not installed: pip install 'goflux[spark]'")
    home = Path(next(iter(spec.submodule_search_locations)))
    if not (home / "bin" / "spark-class").is_file():
        raise SparkProcessError(f"{home} has no bin/spark-class: not a full pyspark install")
    return home


class _Jvm(LoggedProcess):
    """One Spark JVM, its log (kept in memory and in a file), and what the log said."""

    def __init__(
        self, name: str, argv: list[str], env: Mapping[str, str], cwd: Path, log: Path
    ) -> None:
        super().__init__(
            name, argv, log_stdout=True, cwd=cwd, env=env, log_path=log, keep_lines=_LOG_LINES
        )

    def _first(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        for line in self.lines:
            if found := pattern.search(line):
                return found
        return None

    def wait_for(
        self, pattern: re.Pattern[str], timeout: float, *, limit: float | None = None
    ) -> re.Match[str]:
        """Block until a log line matches ``pattern``; return the match.

        ``timeout`` is what is left of a start-up whose whole ``limit`` (if given) the
        error names.

        Raises:
            SparkProcessError: The process exited, or no line matched in time.
        """
        found = self.wait_until(lambda: self._first(pattern), timeout)
        if found is not None:
            return found
        if self.exited:
            code = self.popen.wait()
            raise SparkProcessError(
                f"{self.name} exited during startup (code {code}):\n{self.log_tail()}"
            )
        within = f"{timeout:.1f}s" if limit is None else f"the start-up's {limit:.1f}s"
        raise SparkProcessError(
            f"{self.name} did not report {pattern.pattern!r} within {within}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        """The first error lines (the cause), then the last ``lines`` lines."""
        kept = list(self.lines)
        causes = [line for line in kept if _CAUSE.search(line)][:5]
        return "\n".join([*causes, "...", *kept[-lines:]] if causes else kept[-lines:])


class _Resources:
    """Processes and the temporary directory, released even if the owner is collected."""

    def __init__(self) -> None:
        self.processes: list[_Jvm] = []
        self.temp_dir: Path | None = None
        self.lock_fd: int | None = None  # held while we own temp_dir

    def release(self) -> None:
        for process in reversed(self.processes):
            process.terminate(timeout=30.0)  # SIGTERM: Spark stops cleanly
        self.processes.clear()
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


class _SparkProcesses:
    """What both servers share: the environment, the temporary directory, the lifecycle."""

    _prefix = "goflux-spark-"
    # Seconds a start-up may take on an idle machine (see startup_timeout()). A JVM
    # starts in 5-25 s on 2 idle cores, but on a busy machine well past 60 s, sooner
    # than the load average (the last minute's) says so: the limit is a ceiling, which
    # a start-up that works never waits for, so it is set for a busy machine.
    _startup_timeout = 180.0

    def __init__(self, host: str, startup_timeout: float | None, daemon_memory: str) -> None:
        self.home = spark_home()
        self.host = host
        self.startup_timeout = _process.startup_timeout(
            startup_timeout, self._startup_timeout, _process.SPARK_STARTUP_TIMEOUT
        )
        self.daemon_memory = daemon_memory
        self.startup_seconds: float | None = None
        self._resources = _Resources()
        self._finalizer = weakref.finalize(self, self._resources.release)

    @property
    def running(self) -> bool:
        """True while every process is alive."""
        processes = self._resources.processes
        return bool(processes) and all(p.popen.poll() is None for p in processes)

    @property
    def work_dir(self) -> Path:
        """The temporary directory holding logs, Spark's scratch space and work dirs.

        Raises:
            SparkProcessError: Not started.
        """
        if self._resources.temp_dir is None:
            raise SparkProcessError(f"{type(self).__name__} has not been started")
        return self._resources.temp_dir

    def log_tail(self, lines: int = 30) -> str:
        """The last lines each process logged."""
        return "\n".join(f"--- {p.name}\n{p.log_tail(lines)}" for p in self._resources.processes)

    def _env(self) -> dict[str, str]:
        work = self.work_dir
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(self.home),
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            SPARK_LOCAL_IP=self.host,
            SPARK_LOCAL_DIRS=str(work / "local"),
            SPARK_LOG_DIR=str(work / "logs"),
            SPARK_PID_DIR=str(work),
            SPARK_CONF_DIR=str(work / "conf"),
            SPARK_DAEMON_MEMORY=self.daemon_memory,
        )
        return env

    def _spawn(self, name: str, script: str, args: list[str], **env: str) -> _Jvm:
        if self._resources.temp_dir is None:
            work = Path(tempfile.mkdtemp(prefix=self._prefix))
            self._resources.lock_fd = _abandoned.claim(work)
            for sub in ("local", "logs", "conf"):
                (work / sub).mkdir()
            self._resources.temp_dir = work
        full_env = self._env()
        full_env.update(env)
        process = _Jvm(
            name,
            ["bash", str(self.home / "bin" / script), *args],
            full_env,
            self.work_dir,
            self.work_dir / "logs" / f"{name}.log",
        )
        self._resources.processes.append(process)
        # The JVMs' command lines name the directory (its conf/ is on the class path):
        # a sweep kills them if we die unstopped.
        _abandoned.record(self.work_dir, (p.popen.pid for p in self._resources.processes))
        return process

    def _launch(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        """Start the processes and block until they report readiness in their logs.

        Raises:
            SparkProcessError: Already running, pyspark missing, or a process failed
                to start (the message carries its last log lines).
        """
        if self._resources.processes:
            raise SparkProcessError(f"{type(self).__name__} is already started")
        _abandoned.sweep(_SWEEP_PREFIX, b"java")
        began = time.perf_counter()
        try:
            self._launch()
        except BaseException:
            self._resources.release()
            raise
        self.startup_seconds = time.perf_counter() - began
        return self

    def stop(self) -> None:
        """Stop every process (SIGTERM, SIGKILL after 30 s) and delete the directory."""
        self._resources.release()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class SparkConnectServer(_SparkProcesses):
    """A real Spark Connect server on a free loopback port.

    ::

        with SparkConnectServer() as server:
            spark = SparkSession.builder.remote(server.url).getOrCreate()

    The server runs its own Spark driver (``master``, ``local[2]`` by default); the
    client needs ``goflux[spark-connect]``. foreachBatch functions and Python data
    sources run in server-side Python processes using this interpreter.

    Args:
        master: The server's Spark master URL.
        host: Interface to listen on.
        driver_memory: The server JVM's heap (``--driver-memory``).
        conf: Extra Spark settings for the server.
        startup_timeout: Seconds to wait for "Spark Connect server started"; default:
            ``$GOFLUX_SPARK_STARTUP_TIMEOUT`` if set, else 180 times the machine's
            load factor (``max(1, load average / CPUs)``, when the object is made).

    Raises:
        SparkProcessError: pyspark is not installed.
        ValueError: ``startup_timeout`` or ``$GOFLUX_SPARK_STARTUP_TIMEOUT`` is not a
            positive number of seconds.
    """

    _prefix = "goflux-spark-connect-"

    def __init__(
        self,
        master: str = "local[2]",
        *,
        host: str = "127.0.0.1",
        driver_memory: str = "1g",
        conf: Mapping[str, str] | None = None,
        startup_timeout: float | None = None,
    ) -> None:
        super().__init__(host, startup_timeout, driver_memory)
        self.master = master
        self.conf = dict(conf or {})
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The gRPC port.

        Raises:
            SparkProcessError: Not started.
        """
        if self._port is None:
            raise SparkProcessError("the Spark Connect server has not been started")
        return self._port

    @property
    def url(self) -> str:
        """The client URL, ``sc://127.0.0.1:<port>``."""
        return f"sc://{self.host}:{self.port}"

    def _launch(self) -> None:
        conf = {
            "spark.connect.grpc.binding.address": self.host,
            "spark.connect.grpc.binding.port": "0",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.sql.session.timeZone": "UTC",
            **self.conf,
        }
        args = ["org.apache.spark.deploy.SparkSubmit", "--class", _CONNECT_CLASS]
        args += ["--name", "goflux Spark Connect server", "--master", self.master]
        args += ["--driver-memory", self.daemon_memory]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        process = self._spawn("spark-connect", "spark-class", args)
        started = process.wait_for(_CONNECT_STARTED, self.startup_timeout)
        self._port = int(started.group(2))


class SparkStandaloneCluster(_SparkProcesses):
    """A real standalone Spark cluster: one master and ``workers`` workers on loopback.

    ::

        with SparkStandaloneCluster() as cluster:
            spark = local_session(cluster.master_url, **{"spark.executor.memory": "1g"})

    Executors run in the workers' JVMs with Python workers of this interpreter, so
    everything a task uses must be importable there (goflux installed). Drivers must
    be reachable from the executors: bind them to loopback
    (``spark.driver.host=127.0.0.1``). A session returns before its executors have
    registered unless ``spark.scheduler.minRegisteredResourcesRatio=1.0`` is set.

    Args:
        workers: How many worker JVMs.
        cores: Cores each worker offers.
        memory: Memory each worker offers its executors.
        host: Interface everything listens on.
        daemon_memory: The heap of the master and worker daemons themselves.
        startup_timeout: Seconds the whole start-up may take, from the master's
            launch until every worker has registered with it; default:
            ``$GOFLUX_SPARK_STARTUP_TIMEOUT`` if set, else 180 times the machine's
            load factor (``max(1, load average / CPUs)``, when the object is made).

    Raises:
        SparkProcessError: pyspark is not installed.
        ValueError: ``workers`` or ``cores`` is below 1, or ``startup_timeout`` or
            ``$GOFLUX_SPARK_STARTUP_TIMEOUT`` is not a positive number of seconds.
    """

    _prefix = "goflux-spark-cluster-"

    def __init__(
        self,
        *,
        workers: int = 1,
        cores: int = 2,
        memory: str = "2g",
        host: str = "127.0.0.1",
        daemon_memory: str = "256m",
        startup_timeout: float | None = None,
    ) -> None:
        if workers < 1 or cores < 1:
            raise ValueError(f"workers and cores must be >= 1, got {workers} and {cores}")
        super().__init__(host, startup_timeout, daemon_memory)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self._master_url: str | None = None

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``: the URL sessions pass as their master.

        Raises:
            SparkProcessError: Not started.
        """
        if self._master_url is None:
            raise SparkProcessError("the cluster has not been started")
        return self._master_url

    def _launch(self) -> None:
        ports = ["--host", self.host, "--port", "0", "--webui-port", "0"]
        master = self._spawn(
            "spark-master",
            "spark-class",
            ["org.apache.spark.deploy.master.Master", *ports],
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        )
        limit = self.startup_timeout  # one for the whole cluster
        deadline = time.monotonic() + limit

        def left() -> float:
            return max(deadline - time.monotonic(), 0.0)

        url = master.wait_for(_MASTER_STARTED, left(), limit=limit).group(1)
        master.wait_for(_MASTER_LEADER, left(), limit=limit)
        self._master_url = url
        started = [
            self._spawn(
                f"spark-worker-{n}",
                "spark-class",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    *ports,
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--work-dir",
                    str(self.work_dir / f"worker-{n}"),
                ],
            )
            for n in range(self.workers)
        ]
        for worker in started:
            worker.wait_for(_WORKER_REGISTERED, left(), limit=limit)
