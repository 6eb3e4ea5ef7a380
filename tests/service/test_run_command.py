"""``goflux run``: exit statuses and their one-line reasons, restarts, logs, reload."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from goflux.testing import NatsServer
from tests.service.runner import GofluxRun

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

SERVICES = "tests.service.services"


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (an exited, unreaped one is a zombie: not live)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def last_error(run: GofluxRun) -> str:
    errors = [line for line in run.lines if " ERROR " in line]
    assert errors, run.output
    return errors[-1]


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("nosuch.module:service", "no module named 'nosuch.module'"),
        (f"{SERVICES}:missing", f"module '{SERVICES}' has no attribute 'missing'"),
        (f"{SERVICES}:not_a_function", "is of type int, not an async function"),
        (f"{SERVICES}:not_async", "must be an async function taking a Group"),
        ("no-colon", "expected MODULE:ATTR"),
    ],
)
def test_a_service_that_cannot_be_loaded_exits_2_with_the_reason(spec: str, reason: str) -> None:
    with GofluxRun(spec) as run:
        assert run.wait() == 2
    assert f"cannot load {spec}: " in last_error(run)
    assert reason in last_error(run)
    assert "Traceback" not in run.output


def test_a_service_that_fails_to_start_exits_1_and_closes_what_it_owned(
    nats_server: NatsServer,
) -> None:
    with GofluxRun(f"{SERVICES}:broken_at_start", env={"NATS_URL": nats_server.url}) as run:
        assert run.wait() == 1
    assert last_error(run).endswith(
        f"{SERVICES}:broken_at_start failed to start: ConnectionRefusedError: "
        "the ledger database refused the connection"
    )
    assert "Traceback" not in run.output


def test_a_member_failing_while_running_exits_1_with_the_reason() -> None:
    with GofluxRun(f"{SERVICES}:failing_member", "--log-format", "json") as run:
        assert run.wait() == 1
    lines = [json.loads(line) for line in run.lines]  # every line is a JSON object
    assert {line["worker"] for line in lines} == {"1"}
    assert lines[-1]["level"] == "ERROR"
    assert lines[-1]["message"] == (
        f"{SERVICES}:failing_member failed: RuntimeError: the tax table is corrupt"
    )
    assert {"time", "level", "worker", "logger", "message"} <= set(lines[-1])


def test_a_supervisor_gives_up_when_a_worker_fails_before_it_was_ever_ready(
    nats_server: NatsServer,
) -> None:
    args = (f"{SERVICES}:broken_at_start", "--workers", "2")
    with GofluxRun(*args, env={"NATS_URL": nats_server.url}) as run:
        assert run.wait() == 1
    giving_up = next(line for line in run.lines if "giving up" in line)
    assert "before it was ready" in giving_up
    assert "ConnectionRefusedError: the ledger database refused the connection" in giving_up
    assert "restarting worker" not in run.output


def restart_delays(log: Path, worker: str) -> list[float]:
    """Seconds from each crash of ``worker`` to the start of its next process (the kernel's
    times, noted by the ``crashing`` service)."""
    events = [line.split() for line in log.read_text().splitlines()]
    times = [(event, float(at)) for event, w, _, at in events if w == worker]
    return [
        later - at
        for (event, at), (next_event, later) in itertools.pairwise(times)
        if (event, next_event) == ("crash", "start")
    ]


def test_crashed_workers_are_restarted_with_backoff_until_the_cap(tmp_path: Path) -> None:
    args = (f"{SERVICES}:crashing", "--workers", "2", "--max-restarts", "2", "--log-format", "json")
    log = tmp_path / "times.txt"
    env = {"CRASH_WORKERS": "1", "CRASH_AFTER": "0.2", "CRASH_LOG": str(log)}
    with GofluxRun(*args, env=env) as run:
        assert run.wait() == 1
    # The real time between a crash and the next process: the backoff was waited out
    # (a tick of the kernel's clock is 10 ms), and not much longer.
    delays = restart_delays(log, "1")
    assert len(delays) == 2, log.read_text()
    for delay, backoff in zip(delays, (0.5, 1.0), strict=True):
        assert backoff - 0.02 <= delay < backoff + 3, delays
    lines = [json.loads(line) for line in run.lines]
    assert {line["worker"] for line in lines} == {"supervisor", "1", "2"}
    supervisor = [line["message"] for line in lines if line["worker"] == "supervisor"]
    delays = [m.removeprefix("restarting worker 1 in ") for m in supervisor if "restarting" in m]
    assert delays == ["0.5s", "1.0s"]  # doubling per restart within the window
    crashes = [m for m in supervisor if m.startswith("worker 1 (pid ") and "exited" in m]
    assert len(crashes) == 3
    assert all(m.endswith("exited with status 3") for m in crashes)
    assert any(
        m.startswith("giving up: 3 worker restarts within 60s (at most 2)") for m in supervisor
    )
    # Worker 2 never crashed: it was drained and exited cleanly.
    assert any(line["worker"] == "2" and line["message"] == "drained; exiting" for line in lines)


def test_a_worker_dying_before_it_was_ready_is_restarted_with_backoff_beside_the_others(
    tmp_path: Path,
) -> None:
    # A crash before "ready" (os._exit while the service starts) is not a bad service:
    # restarted like any other, within the budget; the other worker runs on.
    args = (f"{SERVICES}:crashing", "--workers", "2", "--max-restarts", "2")
    log = tmp_path / "times.txt"
    env = {"CRASH_WORKERS": "1", "CRASH_AFTER": "start", "CRASH_LOG": str(log)}
    with GofluxRun(*args, env=env) as run:
        assert run.wait() == 1
    assert "before it was ready" not in run.output
    assert run.count(r"worker 1 \(pid \d+\) exited with status 3") == 3
    assert last_error(run).endswith(
        "giving up: 3 worker restarts within 60s (at most 2); worker 1 exited with status 3"
    )
    delays = restart_delays(log, "1")
    assert len(delays) == 2, log.read_text()
    for delay, backoff in zip(delays, (0.5, 1.0), strict=True):
        assert backoff - 0.02 <= delay < backoff + 3, delays
    # Worker 2 was never stopped until the supervisor gave up.
    assert run.count(r"worker 2 started") == 1
    assert run.count(r"worker 2 \(pid \d+\) (exited|was)") == 0


def test_workers_drain_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    args = (f"{SERVICES}:idle", "--workers", "2")
    with GofluxRun(*args, env={"MARKER_DIR": str(tmp_path)}) as run:
        for worker in (1, 2):
            run.wait_for(rf"worker {worker} \(pid \d+\) is ready")
        pids = [int(p) for p in re.findall(r"started \(pid (\d+)\)", run.output)]
        run.signal(signal.SIGKILL)
        assert run.process.wait(10) == -signal.SIGKILL
        # Each worker is gone (or a zombie) moments later...
        deadline = time.monotonic() + 10
        while any(running(pid) for pid in pids):
            assert time.monotonic() < deadline, f"workers {pids} outlived their supervisor"
            os.sched_yield()
    # ... after a drain: the group closed what it owned.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"closed-{pid}" for pid in pids)


def test_reload_restarts_the_workers_on_a_change_and_waits_out_a_broken_edit(
    tmp_path: Path,
) -> None:
    app = tmp_path / "app.py"
    source = """
import asyncio, logging
VERSION = {version}
async def service(group):
    logging.getLogger("app").info("version %d up", VERSION)
    group.task(asyncio.Event().wait, name="idle")
"""
    app.write_text(source.format(version=1))
    args = ("app:service", "--reload", "--app-dir", str(tmp_path), "--drain-timeout", "2")
    with GofluxRun(*args) as run:
        run.wait_for(r"version 1 up")
        run.wait_for(r"worker 1 \(pid \d+\) is ready")
        seen = len(run.lines)
        app.write_text(source.format(version=2))
        run.wait_for(r"changed: .*app\.py; restarting the workers", after=seen)
        run.wait_for(r"version 2 up", after=seen)

        seen = len(run.lines)
        app.write_text("def service(:\n")
        run.wait_for(r"cannot load app:service: importing 'app' failed: SyntaxError", after=seen)
        run.wait_for(r"worker 1 waits for a change to restart", after=seen)

        seen = len(run.lines)
        app.write_text(source.format(version=3))
        run.wait_for(r"version 3 up", after=seen)
        run.signal(signal.SIGTERM)
        assert run.wait() == 0, run.output


def test_sigterm_during_a_start_up_function_cancels_it_and_drains_cleanly() -> None:
    with GofluxRun(f"{SERVICES}:slow_start_up", "--drain-timeout", "30") as run:
        run.wait_for("provisioning")
        run.signal(signal.SIGTERM)
        # waiting out the start-up function would end at the hard drain limit: exit 1
        assert run.wait() == 0, run.output
    assert run.count("owned resource closed") == 1
    assert run.count("second start-up function ran") == 0
