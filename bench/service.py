"""``goflux run``: a service's consume throughput with one and with two worker processes.

Each case runs ``goflux run examples.payments_service:service --workers N`` as a user
would (a subprocess of ``python -m goflux``, from the repository's root, ``NATS_URL``
set to the suite's server) over orders stored beforehand: every round of every case
deletes and re-creates the stream ``ORDERS`` (so the example's durable consumer
``payments`` starts afresh), stores the orders, starts the command, and stops it with
SIGTERM once the server has them all acknowledged; anything but exit status 0 stops
the run.

The rate is steady-state and the server's view. Start-up is left out: timing waits
until every worker is ready (the supervisor's "worker N (pid P) is ready" lines, or the
in-process worker's "... is running"), takes one ``consumer_info`` then, and starts at
the first poll that shows the ack floor moved past it; it ends at the first poll that
shows the ack floor at the total. The polls go on a connection of their own, one every
:data:`POLL_INTERVAL` (5 ms: each end of the window is late by less than that, a few
tenths of a percent of a full-size window). Polled back to back, the poller took about
half a core and the server spent more CPU answering the polls than on the messages,
on a machine of two cores: two workers then measured no faster than one. The case
reports the server's ack floor at the end (the orders acknowledged, in order), which
must be every order stored.

CPU time over the same window is read from ``/proc/<pid>/stat`` (user + system, all
threads) for the worker processes (their pids from the supervisor's "worker N started
(pid P)" lines; with one worker, the ``goflux run`` process itself), the supervisor and
nats-server; this process's own CPU (the poller) is shown too. Right after the window,
with the workers idle, the polls go on alone for a moment, so that the server's CPU per
poll is known and its CPU per message can be shown without them. A paper estimate for
machines with more cores follows from the CPU per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nats
import nats.js.errors
from nats.js import JetStreamContext

from bench import harness
from bench.harness import Result, Table, check_count
from bench.sizes import Sizes
from examples.payments_service import Order
from goflux import JsonCodec
from goflux.testing import NatsServer
from goflux.transports import jetstream

SERVICE = "examples.payments_service:service"
STREAM = "ORDERS"  # the example's stream, consumer and subject
CONSUMER = "payments"
SUBJECT = "orders.created"
ROOT = Path(__file__).resolve().parent.parent  # the example is imported from here
WORKERS = (1, 2)
ESTIMATE_CORES = (4, 8, 16)
STOP_TIMEOUT = 60.0  # seconds from SIGTERM to the command's exit
READY_TIMEOUT = 120.0  # seconds from the start to every worker ready
POLL_INTERVAL = 0.005
"""Seconds between the polls of the ack floor in the window (back to back: see the module)."""
CPU_NOTE = (
    "This machine has 2 cores, shared by the worker processes, nats-server and the "
    "benchmark's poller: two workers cannot get two cores to themselves here."
)

STARTED = re.compile(r"worker (\d+) started \(pid (\d+)\)")
READY = re.compile(r"worker (\d+) \(pid (\d+)\) is ready")
RUNNING = re.compile(re.escape(f"{SERVICE} is running"))


def case_name(workers: int) -> str:
    return f"--workers {workers}"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads).

    Raises:
        OSError: No such process (or no /proc).
    """
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------- the command


class GofluxRun:
    """``python -m goflux run SERVICE --workers N``, its log lines read as they come.

    A thread reads the lines (stderr and stdout together) and notes the worker pids
    and which workers are ready. The command runs in a session of its own so that
    :meth:`kill` can end it and its workers by its process group.
    """

    def __init__(self, workers: int, url: str) -> None:
        self.workers = workers
        env = {k: v for k, v in os.environ.items() if not k.startswith("PAYMENTS_")}
        env.pop("GOFLUX_WORKER_ID", None)
        env["NATS_URL"] = url
        self.lines: list[str] = []
        self.pids: dict[int, int] = {}
        self.ready: set[int] = set()
        self.restarted: list[int] = []
        self.started = time.perf_counter()
        self.ready_at: float | None = None
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "goflux", "run", SERVICE, "--workers", str(workers)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        if workers == 1:
            self.pids[1] = self.process.pid  # the service runs in the command's process
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.rstrip("\n")
            with self._lock:
                self.lines.append(line)
                if (found := STARTED.search(line)) is not None:
                    worker = int(found[1])
                    if worker in self.pids:
                        self.restarted.append(worker)
                    self.pids[worker] = int(found[2])
                elif (found := READY.search(line)) is not None:
                    self.ready.add(int(found[1]))
                elif self.workers == 1 and RUNNING.search(line):
                    self.ready.add(1)
                if self.ready_at is None and len(self.ready) == self.workers:
                    self.ready_at = time.perf_counter()

    @property
    def all_ready(self) -> bool:
        with self._lock:
            return len(self.ready) == self.workers

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [self.pids[w] for w in sorted(self.pids)]

    @property
    def output(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def tail(self, lines: int = 30) -> str:
        with self._lock:
            return "\n".join(self.lines[-lines:])

    def stop(self) -> tuple[int, float]:
        """SIGTERM the command; its exit status and the seconds it took to exit."""
        began = time.perf_counter()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(
                f"goflux run --workers {self.workers} did not exit within {STOP_TIMEOUT:.0f}s "
                f"of SIGTERM; its last lines:\n{self.tail()}"
            ) from None
        took = time.perf_counter() - began
        self._reader.join(10)
        return code, took

    def kill(self) -> None:
        """SIGKILL the command and its workers (its process group) if still running."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self._reader.join(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


# ---------------------------------------------------------------- measurement


@dataclass(frozen=True)
class Snapshot:
    """CPU seconds so far of the workers, the supervisor, nats-server and this process."""

    at: float  # perf_counter
    floor: int  # the ack floor seen by the poll just before
    workers: float
    supervisor: float
    server: float
    poller: float


def snapshot(run: GofluxRun, server_pid: int, at: float, floor: int) -> Snapshot:
    """The CPU used so far by ``run``'s processes, nats-server and this process.

    Raises:
        RuntimeError: A worker process (or the server) is gone.
    """
    try:
        return Snapshot(
            at,
            floor,
            sum(cpu_seconds(pid) for pid in run.worker_pids()),
            cpu_seconds(run.process.pid) if run.workers > 1 else 0.0,
            cpu_seconds(server_pid),
            time.process_time(),
        )
    except FileNotFoundError as exc:
        raise RuntimeError(
            f"a process of goflux run --workers {run.workers} (or nats-server) is gone "
            f"({exc.filename}); its last lines:\n{run.tail()}"
        ) from None


@dataclass
class Round:
    """One case's round: what the server acknowledged, and the window measured."""

    acked: int
    messages: int  # acknowledged within the window
    seconds: float
    workers_us: float  # CPU µs per message in the window
    supervisor_us: float
    server_us: float
    server_net_us: float  # less the server's CPU for the polls (measured after)
    poller_us: float
    polls: int
    start_up: float  # seconds from the command's start to every worker ready
    stopped: float  # seconds from SIGTERM to exit
    coarse: bool = False  # too few orders: no window of steady state (see cpu_table)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


async def acked(js: JetStreamContext) -> int:
    """The consumer's ack floor (stream sequence): 0 until the example has created it."""
    try:
        info = await js.consumer_info(STREAM, CONSUMER)
    except nats.js.errors.NotFoundError:
        return 0
    return (info.ack_floor.stream_seq or 0) if info.ack_floor is not None else 0


async def preload(js: JetStreamContext, count: int, window: int) -> None:
    """A fresh ORDERS stream (as the example makes it) holding ``count`` orders.

    Raises:
        RuntimeError: The stream does not hold ``count`` orders afterwards.
    """
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await js.delete_stream(STREAM)
    await jetstream.ensure_stream(js, name=STREAM, subjects=["orders.>"])
    publisher = jetstream.Publisher(js, JsonCodec(Order))
    await publisher.publish_many(
        (
            jetstream.Outgoing(SUBJECT, Order(id=f"o-{n}", customer="c", amount=1.0))
            for n in range(count)
        ),
        window=window,
    )
    held = (await js.stream_info(STREAM)).state.messages
    if held != count:
        raise RuntimeError(f"stream {STREAM} holds {held:,} orders, not {count:,}")


async def until_ready(run: GofluxRun) -> None:
    """Wait (without polling the server) until every worker is ready.

    Raises:
        RuntimeError: The command exited, a worker was restarted, or it took too long.
    """
    while not run.all_ready:
        if run.process.poll() is not None:
            raise RuntimeError(
                f"goflux run --workers {run.workers} exited with status "
                f"{run.process.returncode} before it was ready:\n{run.tail()}"
            )
        if time.perf_counter() - run.started > READY_TIMEOUT:
            raise RuntimeError(
                f"goflux run --workers {run.workers} was not ready within "
                f"{READY_TIMEOUT:.0f}s:\n{run.tail()}"
            )
        await asyncio.sleep(0.005)


async def measure(
    run: GofluxRun, poll: JetStreamContext, server_pid: int, total: int, calibration: float
) -> Round:
    """Time the ack floor from its first move after readiness to ``total``; see the module."""
    # The command's start, should everything be acked before every worker is ready.
    launched = Snapshot(run.started, 0, 0.0, 0.0, cpu_seconds(server_pid), time.process_time())
    await until_ready(run)
    start_up = (run.ready_at or time.perf_counter()) - run.started
    baseline = await acked(poll)
    ready = snapshot(run, server_pid, time.perf_counter(), baseline)
    coarse = baseline >= total  # a tiny smoke run: the report says so
    first: Snapshot | None = launched if coarse else None
    floor, polls, last_change = baseline, 0, time.perf_counter()
    while floor < total:
        if POLL_INTERVAL:
            await asyncio.sleep(POLL_INTERVAL)
        seen = await acked(poll)
        polls += 1
        now = time.perf_counter()
        if seen != floor:
            floor, last_change = seen, now
            if first is None:
                first, polls = snapshot(run, server_pid, now, floor), 0
                if floor >= total:  # all of it between two polls: from the ready poll
                    first, polls, coarse = ready, 1, True
        elif now - last_change >= harness.PATIENCE or run.process.poll() is not None:
            break  # no progress for a long while, or the command died: the count says so
    if first is None or floor < total:
        return Round(floor, 0, 1.0, 0, 0, 0, 0, 0, polls, start_up, 0.0)
    last = snapshot(run, server_pid, time.perf_counter(), floor)
    if run.restarted:
        raise RuntimeError(
            f"goflux run --workers {run.workers} restarted worker(s) {run.restarted} "
            f"while measured:\n{run.tail()}"
        )
    per_poll = await poll_cost(poll, server_pid, calibration)
    messages = floor - first.floor
    seconds = last.at - first.at

    def us(used: float) -> float:
        return used / messages * 1e6

    server = last.server - first.server
    return Round(
        acked=floor,
        messages=messages,
        seconds=seconds,
        workers_us=us(last.workers - first.workers),
        supervisor_us=us(last.supervisor - first.supervisor),
        server_us=us(server),
        server_net_us=us(max(0.0, server - polls * per_poll)),
        poller_us=us(last.poller - first.poller),
        polls=polls,
        start_up=start_up,
        stopped=0.0,
        coarse=coarse,
    )


async def poll_cost(poll: JetStreamContext, server_pid: int, seconds: float) -> float:
    """The server's CPU seconds per ``consumer_info`` poll, polled alone for ``seconds``."""
    began, cpu, polls = time.perf_counter(), cpu_seconds(server_pid), 0
    while time.perf_counter() - began < seconds:
        await acked(poll)
        polls += 1
    return (cpu_seconds(server_pid) - cpu) / polls


async def consume_round(
    js: JetStreamContext, poll: JetStreamContext, server: NatsServer, workers: int, sizes: Sizes
) -> Round:
    """One round of one case: fresh stream, the command, the window, SIGTERM, exit 0."""
    assert server.pid is not None
    await preload(js, sizes.service_orders, sizes.window)
    run = GofluxRun(workers, server.url)
    try:
        measured = await measure(
            run, poll, server.pid, sizes.service_orders, sizes.service_calibration
        )
        code, stopped = await asyncio.to_thread(run.stop)
    finally:
        run.kill()
    if code != 0:
        raise RuntimeError(
            f"goflux run --workers {workers} exited with status {code} after SIGTERM:\n{run.tail()}"
        )
    measured.stopped = stopped
    return measured


# --------------------------------------------------------------------- report


@dataclass
class Detail:
    """Every round of one case, for the CPU table and the estimate."""

    name: str
    rounds: list[Round] = field(default_factory=list)

    def median(self, what: str) -> float:
        return float(statistics.median(getattr(r, what) for r in self.rounds))


def ratio_line(table: Table, one: str, two: str) -> str:
    return (
        f"{two} / {one}: **{table.ratio(two, one):.2f}** (ratio of medians; median of "
        f"per-round ratios {table.paired_ratio(two, one):.2f}). {CPU_NOTE}"
    )


def cpu_table(details: list[Detail], total: int) -> str:
    lines = [
        "### goflux run: CPU per message over the measured window",
        "",
        "Medians over the rounds. Workers: the worker processes' CPU (user + system) over "
        "the window per message acknowledged in it; nats-server likewise, then without "
        "the CPU its `consumer_info` polls cost (the server's CPU per poll measured right "
        "after the window, the workers idle, times the polls made in it); the supervisor "
        "(with two workers) and this benchmark's poller likewise. Start-up runs from the "
        "command's start until every worker is ready; stop from SIGTERM to exit (status 0 "
        "every time, or the run would have stopped).",
        "",
        "| case | workers CPU µs/msg | nats-server CPU µs/msg | nats-server without polls "
        "| supervisor | poller | msgs in window | polls | start-up s | stop s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines.extend(
        f"| {d.name} | {d.median('workers_us'):.1f} | {d.median('server_us'):.1f} | "
        f"{d.median('server_net_us'):.1f} | {d.median('supervisor_us'):.1f} | "
        f"{d.median('poller_us'):.1f} | {d.median('messages'):,.0f} of {total:,} | "
        f"{d.median('polls'):,.0f} | {d.median('start_up'):.2f} | "
        f"{d.median('stopped'):.2f} |"
        for d in details
    )
    coarse = sum(r.coarse for d in details for r in d.rounds)
    if coarse:
        lines += [
            "",
            f"In {coarse} round(s) the orders were all acknowledged before every worker was "
            "ready, or between two polls: too few orders for a steady state. Those windows "
            "run from the command's start (start-up included) or from the poll made once "
            "every worker was ready.",
        ]
    return "\n".join(lines)


def estimate(cores: int, worker_us: float, server_us: float) -> tuple[int, float, float, float]:
    """Workers (cores - 1), their bound, the server's one-core bound, and the estimate."""
    workers = cores - 1
    by_workers = workers * 1e6 / worker_us
    by_server = 1e6 / server_us
    return workers, by_workers, by_server, min(by_workers, by_server)


def estimates(details: list[Detail], one_worker_rate: float) -> str:
    worker_us = max(d.median("workers_us") for d in details)
    server_us = max(d.median("server_net_us") for d in details)
    busy = one_worker_rate * details[0].median("workers_us") / 1e6
    lines = ["### goflux run: a paper estimate for more cores", ""]
    if worker_us <= 0 or server_us <= 0:  # a smoke run: windows shorter than a clock tick
        lines.append(
            "Not estimated: too little CPU time was measured (the kernel counts it in "
            f"ticks of {1 / os.sysconf('SC_CLK_TCK') * 1000:.0f} ms)."
        )
        return "\n".join(lines)
    lines += [
        f"From the CPU per message measured above, taking the larger of the two cases: "
        f"a worker needs {worker_us:.1f} µs of CPU per message, nats-server "
        f"{server_us:.1f} µs (without the benchmark's polls). With C cores and W = C - 1 "
        "workers (one core left for the server), throughput is at most "
        "`W * 1e6 / worker µs per msg` (each worker on a core of its own) and at most "
        "`1e6 / server µs per msg` (the server on its one core); the estimate is the "
        "smaller. nats-server is multi-threaded and can use more than one core, so its "
        "bound is conservative in that sense (though one consumer's deliveries are sent "
        "from a single goroutine, so it does not scale without limit either). The "
        "workers' bound is optimistic: one worker reached "
        f"{one_worker_rate:,.0f} msg/s here while busy {busy:.0%} of a core (the rest "
        "waiting on the server), so a worker's own rate lies between that and "
        f"{1e6 / worker_us:,.0f} msg/s. The estimate also assumes the workers scale "
        "linearly (no contention on the one consumer, nothing else on the machine) and "
        "leaves out publishing: the orders were stored beforehand, and a live system "
        "pays the server's publish path too. It is arithmetic, not a measurement.",
        "",
        "| cores | workers | workers' bound msg/s | server's one-core bound msg/s "
        "| estimate msg/s |",
        "|---:|---:|---:|---:|---:|",
    ]
    for cores in ESTIMATE_CORES:
        workers, by_workers, by_server, best = estimate(cores, worker_us, server_us)
        lines.append(
            f"| {cores} | {workers} | {by_workers:,.0f} | {by_server:,.0f} | {best:,.0f} |"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------ run


def run(rounds: int, sizes: Sizes) -> tuple[list[Table], list[str]]:
    """The service table, and the sections that follow it (CPU, ratio, estimate)."""
    loop = asyncio.new_event_loop()
    server = NatsServer().start()
    try:
        nc = loop.run_until_complete(nats.connect(server.url))
        poller = loop.run_until_complete(nats.connect(server.url))  # polls only
        js = nc.jetstream(publish_async_max_pending=sizes.window)
        poll = poller.jetstream()
        names = [case_name(w) for w in WORKERS]
        results = {name: Result(name) for name in names}
        details = {name: Detail(name) for name in names}
        total = sizes.service_orders
        for _ in range(rounds):
            for workers, name in zip(WORKERS, names, strict=True):
                measured = loop.run_until_complete(consume_round(js, poll, server, workers, sizes))
                check_count(name, measured.acked, total)
                results[name].rates.append(measured.rate)
                results[name].cpu_us.append(measured.workers_us)
                results[name].counts.append(measured.acked)
                details[name].rounds.append(measured)
        with contextlib.suppress(nats.js.errors.NotFoundError):
            loop.run_until_complete(js.delete_stream(STREAM))
        loop.run_until_complete(poller.close())
        loop.run_until_complete(nc.close())
    finally:
        server.stop()
        loop.close()
    one, two = names
    table = Table(
        "service",
        f"goflux run: consume throughput by worker processes ({total:,} orders per round)",
        results,
        one,
        note=(
            f"`goflux run {SERVICE} --workers N` over the durable consumer `{CONSUMER}` "
            f"(concurrency 16, max_in_flight 256 per worker), the orders stored "
            "beforehand. The rate is the server's: from the first move of the ack floor "
            "once every worker is ready to the ack floor at the total (start-up left "
            "out); ops per round is the ack floor at the end. CPU µs/op is the worker "
            "processes' CPU per message over that window (the next table has the "
            f"server's). {CPU_NOTE}"
        ),
        versus=one,
    )
    sections = [
        ratio_line(table, one, two),
        cpu_table(list(details.values()), total),
        estimates(list(details.values()), results[one].median),
    ]
    return [table], sections
