"""``goflux run --http-port``: a group's HTTP routes served by real processes over real HTTP.

The service is ``tests/service/http_services.py:routes``; the tests wait on its log
lines and on FIFOs it reads (real signals), never on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import resource
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.processes import ProcessLines
from tests.service.probes import until_status
from tests.service.runner import GofluxRun

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

SERVICE = "tests.service.http_services:routes"
LOOPBACK = ("--http-host", "127.0.0.1")
DEADLINE = 10.0
BOUND = r"HTTP routes on http://127\.0\.0\.1:(\d+)"


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def release(path: Path, text: str) -> None:
    """Write to a FIFO the service reads (blocks until it opens it for reading)."""
    path.write_text(text)


def last_error(run: GofluxRun) -> str:
    errors = [line for line in run.lines if " ERROR " in line]
    assert errors, run.output
    return errors[-1]


async def routes_url(run: GofluxRun) -> str:
    match = await asyncio.to_thread(run.wait_for, BOUND)
    return f"http://127.0.0.1:{match[1]}"


async def test_routes_are_taken_once_the_group_runs_and_refused_while_it_drains(
    tmp_path: Path,
) -> None:
    gate, hold = fifo(tmp_path / "gate"), fifo(tmp_path / "hold")
    args = (SERVICE, "--http-port", "0", *LOOPBACK, "--health-port", "0", "--health-host")
    env = {"HTTP_GATE": str(gate), "HTTP_HOLD": str(hold)}
    with GofluxRun(*args, "127.0.0.1", env=env) as run:
        url = await routes_url(run)
        await asyncio.to_thread(run.wait_for, "waiting for the gate")
        async with httpx.AsyncClient(base_url=url, timeout=DEADLINE) as http:
            # Sent while the group starts: it waits in the socket's backlog, unanswered,
            # however often the process answers its probes meanwhile (404 would be wrong).
            early = asyncio.create_task(http.post("/whoami", content="early"))
            readyz = f"{run.health_url()}/readyz"
            for _ in range(20):
                await until_status(http, readyz, 503)
            assert not early.done()
            await asyncio.to_thread(release, gate, "open")
            answered = await early
            assert answered.status_code == 200, answered.text
            assert answered.text == f"1 {run.process.pid}"

            slow = asyncio.create_task(http.post("/work.slow", content="s-1"))
            await asyncio.to_thread(run.wait_for, "handling work.slow s-1")
            run.signal(signal.SIGTERM)
            await asyncio.to_thread(run.wait_for, "SIGTERM received: draining")
            for path in ("/whoami", "/hooks/orders.created", "/no.such.route"):
                refused = await http.post(path, content="late")
                assert refused.status_code == 503, (path, refused.text)
                assert refused.headers["retry-after"] == "1"
                assert refused.headers["connection"] == "close"
                assert refused.text == "the service is draining: try again\n"
            assert not slow.done()  # in flight: the drain waits for it
            await asyncio.to_thread(release, hold, "the drain began")
            finished = await slow
            assert finished.status_code == 200
            assert finished.text == "s-1 done after the drain began"
        assert await asyncio.to_thread(run.wait) == 0, run.output
    assert "hook late" not in run.output
    async with httpx.AsyncClient(base_url=url) as http:
        with pytest.raises(httpx.ConnectError):  # the worker is gone: nothing listens
            await http.post("/whoami", content="after")


async def answered_by(url: str, want: set[int], *, requests: int = 400) -> set[int]:
    """POST ``/whoami`` over new connections, 4 at a time, until ``want`` pids answered.

    Returns every pid that answered. Each handler holds its worker's event loop for a
    moment, so a connection made meanwhile goes to a worker that is free.
    """
    seen: set[int] = set()
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=DEADLINE, limits=limits) as http:

        async def ask() -> None:
            answer = await http.post("/whoami", content="who")
            assert answer.status_code == 200, answer.text
            seen.add(int(answer.text.split()[1]))

        for _ in range(requests // 4):
            await asyncio.gather(*(ask() for _ in range(4)))
            if want <= seen:
                break
    return seen


def worker_pids(run: GofluxRun) -> dict[int, int]:
    """The pid of each worker's latest process, from the supervisor's lines."""
    started = re.findall(r"worker (\d+) started \(pid (\d+)\)", run.output)
    return {int(worker): int(pid) for worker, pid in started}


async def until_serving(run: GofluxRun, worker: int, *, after: int = 0) -> None:
    pattern = rf"worker={worker} goflux\.run: serving HTTP routes: POST /whoami"
    await asyncio.to_thread(run.wait_for, pattern, after=after)


async def test_workers_share_one_socket_and_a_restarted_worker_takes_it_over() -> None:
    args = (SERVICE, "--workers", "2", "--http-port", "0", *LOOPBACK)
    with GofluxRun(*args, env={"HTTP_BLOCK_MS": "20"}) as run:
        url = await routes_url(run)
        assert "shared by 2 workers" in run.output
        for worker in (1, 2):
            await until_serving(run, worker)
        pids = worker_pids(run)
        assert await answered_by(url, set(pids.values())) == set(pids.values())

        mark = len(run.lines)
        os.kill(pids[1], signal.SIGKILL)
        await asyncio.to_thread(run.wait_for, r"restarting worker 1 in", after=mark)
        await until_serving(run, 1, after=mark)
        restarted = worker_pids(run)[1]
        assert restarted != pids[1]
        assert restarted in await answered_by(url, {restarted})
        run.signal(signal.SIGTERM)
        assert await asyncio.to_thread(run.wait) == 0, run.output


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port some other server listens on."""
    with socket.create_server(("127.0.0.1", 0)) as other:
        yield other.getsockname()[1]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_in_use_fails_at_start_naming_it(taken_port: int, workers: str) -> None:
    args = (SERVICE, "--workers", workers, "--http-port", str(taken_port), *LOOPBACK)
    with GofluxRun(*args) as run:
        assert run.wait() == 1
    assert f"cannot serve the HTTP routes on 127.0.0.1:{taken_port}: " in last_error(run)
    assert "Address already in use" in last_error(run)
    assert "Traceback" not in run.output
    assert "is running" not in run.output
    assert "worker 1 started" not in run.output  # the supervisor starts none


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_service_without_http_routes_on_an_http_port_exits_2(
    workers: str, tmp_path: Path
) -> None:
    args = ("tests.service.services:idle", "--workers", workers, "--http-port", "0", *LOOPBACK)
    with GofluxRun(*args, env={"MARKER_DIR": str(tmp_path)}) as run:
        assert run.wait() == 2
    assert len(list(tmp_path.glob("closed-*"))) == int(workers)  # what it owned: closed
    reason = (
        "tests.service.services:idle has no HTTP routes for --http-port to serve: "
        "its group has no HTTP subscriber or responder (goflux.transports.http)"
    )
    said = next(line for line in run.lines if " ERROR " in line and "idle" in line)
    assert said.endswith(reason)
    if workers == "2":  # and the supervisor gives up at once, with the worker's reason
        giving_up = next(line for line in run.lines if "giving up" in line)
        assert "before it was ready" in giving_up
        assert reason in giving_up
        assert "while stopping" not in run.output  # the workers' exit 2 is that reason
        assert "did not exit cleanly" not in run.output
    assert "Traceback" not in run.output


def test_http_routes_without_an_http_port_are_warned_about() -> None:
    with GofluxRun(SERVICE) as run:
        run.wait_for("is running")  # the warning comes before: once the group is filled
        run.signal(signal.SIGTERM)
        assert run.wait() == 0, run.output
    warnings = [line for line in run.lines if " WARNING " in line]
    assert len(warnings) == 1, run.output
    assert warnings[0].endswith(
        f"{SERVICE} takes messages over HTTP (responder on 'whoami', responder on "
        "'work.slow', subscription to 'orders.created'), but nothing serves its routes: "
        "give goflux run --http-port"
    )


def test_what_a_worker_spawns_does_not_keep_the_shared_socket(tmp_path: Path) -> None:
    args = (SERVICE, "--workers", "2", "--http-port", "0", *LOOPBACK)
    with GofluxRun(*args, env={"HTTP_SPAWN": str(tmp_path)}) as run:
        port = int(run.wait_for(BOUND)[1])
        for worker in (1, 2):
            run.wait_for(rf"worker={worker} goflux\.run: serving HTTP routes")
        run.signal(signal.SIGTERM)
        assert run.wait() == 0, run.output
    children = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    try:
        assert len(children) == 2
        with pytest.raises(ConnectionRefusedError):  # nobody holds the port any more
            socket.create_connection(("127.0.0.1", port), timeout=DEADLINE).close()
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _loopback6() -> bool:
    try:
        with socket.create_server(("::1", 0), family=socket.AF_INET6):
            return True
    except OSError:
        return False


@pytest.mark.skipif(not _loopback6(), reason="this machine has no IPv6 loopback")
@pytest.mark.parametrize("host", ["::1", "[::1]"])
async def test_an_ipv6_host_is_logged_as_a_url_that_works(host: str) -> None:
    with GofluxRun(SERVICE, "--http-port", "0", "--http-host", host) as run:
        match = await asyncio.to_thread(run.wait_for, r"HTTP routes on (http://\[::1\]:\d+)")
        await asyncio.to_thread(run.wait_for, "is running")
        async with httpx.AsyncClient(base_url=match[1], timeout=DEADLINE) as http:
            answer = await http.post("/whoami", content="x")
        assert answer.status_code == 200, answer.text
        run.signal(signal.SIGTERM)
        assert await asyncio.to_thread(run.wait) == 0, run.output


def test_goflux_run_raises_its_open_files_limit_to_the_hard_limit() -> None:
    """The server keeps clients' idle connections open 120 s: under a soft limit of 256,
    a few hundred clients stopped it from accepting any more (EMFILE). goflux run
    raises the soft limit to the hard one, as Go's runtime does."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard == resource.RLIM_INFINITY or hard > 256
    args = (SERVICE, "--http-port", "0", *LOOPBACK, "--log-level", "debug")
    argv = ["prlimit", f"--nofile=256:{hard}", sys.executable, "-m", "goflux", "run", *args]
    with ProcessLines(argv) as run:
        run.wait_for(BOUND)
        limits = Path(f"/proc/{run.process.pid}/limits").read_text()
        run.signal(signal.SIGTERM)
        assert run.wait() == 0, run.output
    line = next(line for line in limits.splitlines() if line.startswith("Max open files"))
    soft_now, hard_now = line.split()[3:5]
    assert soft_now == hard_now, line
    assert f"open files limit raised from 256 to {soft_now}" in run.output
