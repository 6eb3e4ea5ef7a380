"""Interleaved A/B timing and the tables it fills.

Every case runs once per round, in turn (A B A B ...), so drifting load hits all cases
alike; a table reports each case's median, min and max rate, its client CPU time per
operation, and its ratio to the table's raw baseline (and to FastStream, where the
table has a FastStream row).

A case returns what it measured: the messages it actually read (counted where they
arrive) or published (counted by the server), never the number it was asked for. A
run whose count differs from the request stops the benchmark with :class:`CountError`:
a rate over work that did not happen means nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

PATIENCE = 60.0
"""Seconds a case waits without progress before it gives up and reports what it got."""


class CountError(RuntimeError):
    """A case measured a different number of operations than it was asked to do."""


def check_count(name: str, measured: int, expected: int) -> None:
    """Raise :class:`CountError` unless ``measured == expected``."""
    if measured != expected:
        raise CountError(
            f"{name}: measured {measured:,} operations where {expected:,} were asked for; "
            "its rate would describe work that did not happen"
        )


async def wait_for(done: asyncio.Event, progress: Callable[[], int]) -> None:
    """Wait until ``done`` is set, or until ``progress()`` has not grown for a while.

    A case waiting for messages gives up once :data:`PATIENCE` seconds pass in which
    none arrived (checked ten times per period), and returns what it counted: the
    harness reports the short count instead of the run hanging, while a slow but
    steady case on a loaded machine goes on.
    """
    loop = asyncio.get_running_loop()
    last, since = progress(), loop.time()
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PATIENCE / 10):
                await done.wait()
        now = progress()
        if now != last:
            last, since = now, loop.time()
        elif loop.time() - since >= PATIENCE:
            return


@dataclass
class Result:
    """Measurements of one case: a rate and a CPU cost per round."""

    name: str
    rates: list[float] = field(default_factory=list)  # operations per second
    cpu_us: list[float] = field(default_factory=list)  # client CPU microseconds per operation
    counts: list[int] = field(default_factory=list)  # operations measured per round
    peer_cpu_us: list[float] = field(default_factory=list)  # of them, a server process's

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpu_us)


def interleave(
    cases: dict[str, Callable[[], int]],
    rounds: int,
    *,
    expected: int,
    peer_cpu: Callable[[], float] | None = None,
    alternate: bool = False,
) -> dict[str, Result]:
    """Run each case once per round (A B A B ...); a case returns how many ops it did.

    With ``alternate`` every other round runs the cases in reverse order (A B B A ...),
    so that no case always runs right after the same other. ``peer_cpu``, if given,
    reads the CPU seconds a server process has used so far: a case's CPU per operation
    is then this process's and the server's together (the server's share also in
    :attr:`Result.peer_cpu_us`).

    Raises:
        CountError: A case measured other than ``expected`` operations in a round.
    """
    results = {name: Result(name) for name in cases}
    for round_ in range(rounds):
        order = list(cases.items())
        if alternate and round_ % 2:
            order.reverse()
        for name, case in order:
            gc.collect()  # every case starts without garbage left by the one before
            peer = peer_cpu() if peer_cpu is not None else 0.0
            wall, cpu = time.perf_counter(), time.process_time()
            ops = case()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            peer = peer_cpu() - peer if peer_cpu is not None else 0.0
            check_count(name, ops, expected)
            results[name].rates.append(ops / wall)
            results[name].cpu_us.append((cpu + peer) / ops * 1e6)
            if peer_cpu is not None:
                results[name].peer_cpu_us.append(peer / ops * 1e6)
            results[name].counts.append(ops)
    return results


@dataclass
class Table:
    """One comparison: cases measured side by side against a raw baseline."""

    key: str  # short name the goals and the chart refer to
    title: str
    results: dict[str, Result]
    baseline: str  # the raw client's row
    rival: str | None = None  # the FastStream row, if the table has one
    note: str = ""
    versus: str = "raw"  # what the baseline row is, in the ratio column's heading

    def ratio(self, name: str, against: str | None = None) -> float:
        """``name``'s median rate over the baseline's (or ``against``'s)."""
        return self.results[name].median / self.results[against or self.baseline].median

    def paired_ratio(self, name: str, against: str | None = None) -> float:
        """The median of per-round ratios: each round's two runs were measured back to back.

        Less sensitive to load drifting between rounds than the ratio of medians; the
        goals are judged on it.
        """
        ours = self.results[name].rates
        theirs = self.results[against or self.baseline].rates
        return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))

    def cpu_ratio(self, name: str, against: str | None = None) -> float:
        """The baseline's CPU per operation over ``name``'s (1.0: as efficient)."""
        return self.results[against or self.baseline].cpu / self.results[name].cpu

    def markdown(self) -> str:
        rival = self.rival if self.rival in self.results else None
        head = f"| case | ops per round | median ops/s | min | max | CPU µs/op | vs {self.versus} |"
        rule = "|---|---:|---:|---:|---:|---:|---:|"
        if rival is not None:
            head += " vs FastStream |"
            rule += "---:|"
        lines = [f"### {self.title}", ""]
        if self.note:
            lines += [self.note, ""]
        lines += [head, rule]
        for r in self.results.values():
            counted = "/".join(f"{count:,}" for count in sorted(set(r.counts)))
            row = (
                f"| {r.name} | {counted} | {r.median:,.0f} | {min(r.rates):,.0f} | "
                f"{max(r.rates):,.0f} | {r.cpu:.2f} | {self.ratio(r.name):.2f} |"
            )
            if rival is not None:
                row += f" {self.ratio(r.name, rival):.2f} |"
            lines.append(row)
        return "\n".join(lines)
