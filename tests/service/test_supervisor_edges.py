"""The supervisor at awkward moments: forked helpers, long reports, signals to everyone,
a worker stopped from outside, SIGTERM while booting, big log lines, stubborn drains.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.service.runner import GofluxRun

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

SERVICES = "tests.service.services"


def pids_of(run: GofluxRun) -> dict[int, int]:
    """The latest pid of each worker, from the supervisor's log."""
    return {
        int(w): int(p) for w, p in re.findall(r"worker (\d+) started \(pid (\d+)\)", run.output)
    }


def both_ready(run: GofluxRun, after: int = 0) -> None:
    for worker in (1, 2):
        run.wait_for(rf"worker {worker} \(pid \d+\) is ready", after=after)


def test_a_worker_whose_forked_helper_holds_its_pipes_is_still_seen_dying_and_restarted(
    tmp_path: Path,
) -> None:
    env = {"FORK_DIR": str(tmp_path)}
    with GofluxRun(f"{SERVICES}:forking", "--workers", "2", env=env) as run:
        try:
            crashed = run.wait_for(r"worker (\d) \(pid (\d+)\) exited with status 3")
            worker = crashed.group(1)
            run.wait_for(rf"restarting worker {worker} in 0\.5s")
            run.wait_for(rf"worker {worker} started \(pid (?!{crashed.group(2)}\b)\d+\)")
            run.signal(signal.SIGTERM)
            assert run.process.wait(20) == 0, run.output
        finally:  # the crashed worker's helper outlives it, holding our output pipe too
            for line in (tmp_path / "helpers").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(line), signal.SIGKILL)


def test_a_report_far_longer_than_64_kib_is_read(tmp_path: Path) -> None:
    with GofluxRun(f"{SERVICES}:crowded", "--workers", "2") as run:
        both_ready(run)
        run.signal(signal.SIGTERM)
        assert run.wait() == 0, run.output
    assert "too long" not in run.output


@pytest.mark.parametrize("order", ["workers first", "supervisor first"])
def test_sigterm_to_every_process_at_once_is_a_clean_stop(order: str, tmp_path: Path) -> None:
    """What systemd (KillMode=control-group) or a container runtime's kill-all does."""
    with GofluxRun(f"{SERVICES}:idle", "--workers", "2", env={"MARKER_DIR": str(tmp_path)}) as run:
        both_ready(run)
        workers = list(pids_of(run).values())
        everyone = [*workers, run.process.pid]
        if order == "supervisor first":
            everyone.reverse()
        for pid in everyone:
            os.kill(pid, signal.SIGTERM)
        assert run.wait() == 0, run.output
    assert len(list(tmp_path.iterdir())) == 2  # both drained


def test_a_worker_stopped_by_someone_else_is_restarted(tmp_path: Path) -> None:
    with GofluxRun(f"{SERVICES}:idle", "--workers", "2", env={"MARKER_DIR": str(tmp_path)}) as run:
        both_ready(run)
        first = pids_of(run)[1]
        os.kill(first, signal.SIGTERM)
        run.wait_for(
            rf"worker 1 \(pid {first}\) was stopped by a SIGTERM the supervisor did not send"
        )
        run.wait_for(r"restarting worker 1 in 0\.5s")
        run.wait_for(rf"worker 1 started \(pid (?!{first}\b)\d+\)")
        assert pids_of(run)[1] != first
        run.signal(signal.SIGTERM)
        assert run.wait() == 0, run.output


def test_sigterm_while_the_workers_boot_is_a_clean_stop(tmp_path: Path) -> None:
    with GofluxRun(f"{SERVICES}:idle", "--workers", "2", env={"MARKER_DIR": str(tmp_path)}) as run:
        run.wait_for(r"worker 2 started")
        run.signal(signal.SIGTERM)
        assert run.wait() == 0, run.output
    assert "Traceback" not in run.output


def test_json_lines_of_workers_never_interleave_even_when_long() -> None:
    args = (f"{SERVICES}:chatty", "--workers", "2", "--log-format", "json")
    with GofluxRun(*args) as run:
        both_ready(run)
        run.wait_for(r'"message": "line 49 x', after=0)
        run.signal(signal.SIGTERM)
        assert run.wait() == 0
    lines = [json.loads(line) for line in run.lines]  # each one whole
    talk = [line for line in lines if line["logger"] == "chatty"]
    assert len(talk) == 100
    assert all(len(line["message"]) > 20_000 for line in talk)
    assert {line["worker"] for line in talk} == {"1", "2"}


def test_a_drain_that_cannot_finish_ends_the_process_after_the_deadline_and_grace() -> None:
    args = (f"{SERVICES}:stubborn", "--drain-timeout", "0.1", "--kill-grace", "0.4")
    with GofluxRun(*args) as run:
        run.wait_for(r"is running")
        asked = time.monotonic()
        run.signal(signal.SIGTERM)
        assert run.wait() == 1
        took = time.monotonic() - asked
    assert "the drain did not finish within 0.5s: exiting without it" in run.output
    assert took < 5


def test_a_second_ctrl_c_leaves_without_the_drain() -> None:
    with GofluxRun(f"{SERVICES}:stubborn", "--drain-timeout", "30") as run:
        run.wait_for(r"is running")
        run.signal(signal.SIGINT)
        run.wait_for(r"SIGINT received: draining")
        run.signal(signal.SIGINT)
        assert run.wait(10) == 1
    assert "interrupted again: exiting without finishing the drain" in run.output


def test_a_service_that_adds_nothing_is_refused() -> None:
    with GofluxRun(f"{SERVICES}:empty") as run:
        assert run.wait() == 1
    assert f"{SERVICES}:empty added nothing to run: no subscription, process or task" in run.output


def test_a_service_that_cannot_be_loaded_exits_2_under_a_supervisor_too() -> None:
    with GofluxRun("nosuch.module:service", "--workers", "2") as run:
        assert run.wait() == 2
    assert "giving up: worker " in run.output
    assert "no module named 'nosuch.module'" in run.output


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_health_port_in_use_is_one_line_and_exit_1(workers: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        args = (f"{SERVICES}:empty", "--workers", workers, "--health-port", str(port))
        with GofluxRun(*args, "--health-host", "127.0.0.1") as run:
            assert run.wait() == 1
    errors = [line for line in run.lines if " ERROR " in line]
    assert len(errors) == 1, run.output
    assert f"cannot serve the health probes on 127.0.0.1:{port}: " in errors[0]
    assert "in use" in errors[0]
