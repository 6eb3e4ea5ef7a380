"""The process handling the test servers share, and their start-up timeouts."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from goflux.testing import (
    NatsServer,
    NatsServerError,
    SparkConnectServer,
    SparkProcessError,
    SparkStandaloneCluster,
)
from goflux.testing._abandoned import LOCK_FILE
from goflux.testing._process import (
    NATS_STARTUP_TIMEOUT,
    SPARK_STARTUP_TIMEOUT,
    LoggedProcess,
    load_factor,
    startup_timeout,
)
from goflux.testing._spark import _Jvm
from tests.testing.test_server import alive, lockable


def python(code: str) -> list[str]:
    return [sys.executable, "-u", "-c", code]


@pytest.fixture
def idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with no load and none of the timeout variables set."""
    monkeypatch.delenv(SPARK_STARTUP_TIMEOUT, raising=False)
    monkeypatch.delenv(NATS_STARTUP_TIMEOUT, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.5, 0.5))


def loaded(monkeypatch: pytest.MonkeyPatch, load: float, cpus: int) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))


def test_the_load_factor_is_load_per_cpu_and_never_below_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded(monkeypatch, 16.0, 2)
    assert load_factor() == 8.0
    loaded(monkeypatch, 0.3, 2)
    assert load_factor() == 1.0

    def no_load_average() -> tuple[float, float, float]:
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", no_load_average)
    assert load_factor() == 1.0


@pytest.mark.usefixtures("idle")
def test_the_default_grows_with_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    assert startup_timeout(None, 60.0, SPARK_STARTUP_TIMEOUT) == 60.0
    loaded(monkeypatch, 18.0, 2)  # the overloaded machine of the issue: 9 per CPU
    assert startup_timeout(None, 60.0, SPARK_STARTUP_TIMEOUT) == 540.0


@pytest.mark.usefixtures("idle")
def test_the_variable_overrides_the_default_and_an_argument_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded(monkeypatch, 18.0, 2)
    monkeypatch.setenv(SPARK_STARTUP_TIMEOUT, " 300 ")
    assert startup_timeout(None, 60.0, SPARK_STARTUP_TIMEOUT) == 300.0  # not scaled
    assert startup_timeout(5, 60.0, SPARK_STARTUP_TIMEOUT) == 5.0  # the caller's word
    for bad in ("soon", "0", "-1", "nan"):
        monkeypatch.setenv(SPARK_STARTUP_TIMEOUT, bad)
        with pytest.raises(ValueError, match=re.escape(f"${SPARK_STARTUP_TIMEOUT} must be")):
            startup_timeout(None, 60.0, SPARK_STARTUP_TIMEOUT)
    with pytest.raises(ValueError, match="startup_timeout must be a positive"):
        startup_timeout(0, 60.0, SPARK_STARTUP_TIMEOUT)


@pytest.mark.usefixtures("idle")
def test_the_servers_take_their_timeouts_from_the_setting_or_the_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Nothing starts: the timeouts are decided when the objects are made.
    assert SparkConnectServer().startup_timeout == 180.0
    assert SparkStandaloneCluster().startup_timeout == 180.0
    assert NatsServer().startup_timeout == 10.0
    loaded(monkeypatch, 8.0, 2)
    assert SparkConnectServer().startup_timeout == 720.0
    assert SparkStandaloneCluster().startup_timeout == 720.0
    assert NatsServer().startup_timeout == 40.0
    assert SparkStandaloneCluster(startup_timeout=7).startup_timeout == 7.0
    monkeypatch.setenv(SPARK_STARTUP_TIMEOUT, "900")
    monkeypatch.setenv(NATS_STARTUP_TIMEOUT, "25")
    assert SparkConnectServer().startup_timeout == 900.0
    assert SparkStandaloneCluster().startup_timeout == 900.0
    assert NatsServer().startup_timeout == 25.0
    monkeypatch.setenv(SPARK_STARTUP_TIMEOUT, "later")
    with pytest.raises(ValueError, match=SPARK_STARTUP_TIMEOUT):
        SparkConnectServer()


def test_a_process_log_is_read_line_by_line_into_memory_and_a_file(tmp_path: Path) -> None:
    seen: list[str] = []

    class Counting(LoggedProcess):
        def on_line(self, line: str) -> None:
            seen.append(line)

    log = tmp_path / "p.log"
    code = "import sys, time; print('one'); print('two', file=sys.stderr); time.sleep(60)"
    process = Counting("p", python(code), log_stdout=True, log_path=log, keep_lines=1)
    try:
        assert process.wait_until(lambda: "two" in seen, 10)
        assert process.running
        assert not process.exited
        assert list(process.lines) == ["two"]  # keep_lines=1: only the last
        assert process.wait_until(lambda: "three" in seen, 0.2) is False  # in time
    finally:
        process.terminate()
    assert process.exited
    assert not process.running
    assert seen == ["one", "two"]
    assert log.read_text() == "one\ntwo\n"


def test_only_stderr_is_read_unless_stdout_is_asked_for() -> None:
    code = "import sys; print('out'); print('err', file=sys.stderr)"
    process = LoggedProcess("p", python(code))
    assert not process.wait_until(lambda: False, 10)  # returns when the log ends
    assert process.exited
    process.terminate()
    assert list(process.lines) == ["err"]
    assert process.log_tail(1) == "err"


def test_terminate_kills_a_process_that_ignores_sigterm() -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(60)"
    )
    process = LoggedProcess("stubborn", python(code), log_stdout=True)
    assert process.wait_until(lambda: "up" in process.lines, 10)
    began = time.monotonic()
    process.terminate(timeout=0.5)
    assert time.monotonic() - began < 5
    assert process.popen.returncode == -9  # SIGKILL after the half second
    assert process.exited


def test_a_nats_server_not_ready_in_time_is_killed_with_its_log(tmp_path: Path) -> None:
    silent = tmp_path / "nats-server"
    silent.write_text("#!/bin/sh\necho 'starting, slowly' >&2\nexec sleep 60\n")
    silent.chmod(0o755)
    server = NatsServer(jetstream=False, binary=silent, startup_timeout=0.5)
    with pytest.raises(NatsServerError, match=r"not become ready within 0\.5s") as info:
        server.start()
    assert "starting, slowly" in str(info.value)
    assert not server.running


@pytest.mark.slow  # a start-up timer
def test_a_spark_process_not_ready_in_time_is_stopped_with_its_directory() -> None:
    cluster = SparkStandaloneCluster(startup_timeout=0.5)
    with pytest.raises(
        SparkProcessError, match=r"spark-master did not report .* within the start-up's 0\.5s"
    ):
        cluster.start()
    assert not cluster.running
    with pytest.raises(SparkProcessError, match="has not been started"):
        _ = cluster.work_dir  # deleted with the processes


def naming(directory: str) -> list[int]:
    """The processes whose command line names ``directory``."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if directory.encode() in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def wait_until_unlocked(lock_file: Path, timeout: float = 10.0) -> None:
    """Return once nobody holds ``lock_file``'s flock (the owner and all it forked are gone)."""
    deadline = time.monotonic() + timeout
    while not lockable(lock_file):
        if time.monotonic() > deadline:
            raise AssertionError(f"{lock_file} still locked after {timeout} s")
        time.sleep(0.001)


@pytest.mark.slow  # a child process and Spark JVMs started
def test_the_jvms_of_a_killed_owner_are_stopped_by_the_next_spark_start() -> None:
    """A process killed with its Spark server running (a timeout's SIGKILL) cannot stop
    it: the next Spark server's start kills the orphaned JVMs, also one started but not
    yet recorded when the owner died, and removes their directory."""
    code = (
        "import threading, time\n"
        "from goflux.testing import SparkStandaloneCluster\n"
        "from goflux.testing._spark import _MASTER_LEADER\n"
        "cluster = SparkStandaloneCluster(startup_timeout=600)\n"
        "threading.Thread(target=cluster.start, daemon=True).start()\n"
        "while not cluster._resources.processes:\n"
        "    time.sleep(0.01)\n"
        "master = cluster._resources.processes[0]\n"
        "master.wait_for(_MASTER_LEADER, 600)  # running, its files open\n"
        "print(master.popen.pid, cluster.work_dir, flush=True)\n"
        "time.sleep(600)\n"
    )
    with subprocess.Popen(python(code), stdout=subprocess.PIPE, text=True) as owner:
        assert owner.stdout is not None
        pid_text, work_dir = owner.stdout.readline().split()
        owner.kill()  # SIGKILL: no cleanup ran (the worker may be starting meanwhile)
        owner.wait()
    orphan = int(pid_text)
    try:
        assert alive(orphan)
        assert Path(work_dir).is_dir()
        (Path(work_dir) / ".goflux-server").write_text("")  # as if killed before recording
        # The owner was killed while its thread may have been starting the worker: a
        # child forked but not yet exec'd shares the lock for a few milliseconds more.
        wait_until_unlocked(Path(work_dir) / LOCK_FILE)

        with pytest.raises(SparkProcessError, match="did not report"):
            SparkStandaloneCluster(startup_timeout=0.5).start()  # sweeps, then gives up

        assert not alive(orphan)
        assert naming(work_dir) == []
        assert not Path(work_dir).exists()
    finally:
        for pid in naming(work_dir):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow  # start-up timers
def test_a_cluster_start_up_is_one_limit_for_all_its_processes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Master and worker each log their lines in time, but together they are late."""
    said = {
        "spark-master": [
            "Starting Spark master at spark://127.0.0.1:7077",
            "I have been elected leader",
        ],
        "spark-worker-0": ["Successfully registered with master"],
    }

    def spawn(
        self: SparkStandaloneCluster, name: str, script: str, args: list[str], **env: str
    ) -> _Jvm:
        if self._resources.temp_dir is None:
            self._resources.temp_dir = tmp_path / "work"
            self._resources.temp_dir.mkdir()
        code = (
            f"import time\nfor line in {said[name]!r}:\n    time.sleep(0.4)\n    print(line)\n"
            "time.sleep(60)"
        )
        process = _Jvm(name, python(code), dict(os.environ), tmp_path, tmp_path / f"{name}.log")
        self._resources.processes.append(process)
        return process

    monkeypatch.setattr(SparkStandaloneCluster, "_spawn", spawn)
    cluster = SparkStandaloneCluster(startup_timeout=1.0)  # each line within 0.4 s, all in 1.2
    with pytest.raises(SparkProcessError, match=r"did not report .* within the start-up's 1\.0s"):
        cluster.start()
    assert not cluster.running
