"""Interleaved A/B timing and the tables it fills.

Every case runs once per round, in turn (A B A B ...), so drifting load hits all cases
alike; a table reports each case's median, min and max rate, its client CPU time per
operation, and its ratio to the table's raw baseline (and to FastStream, where the
table has a FastStream row).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Result:
    """Measurements of one case: a rate and a CPU cost per round."""

    name: str
    rates: list[float] = field(default_factory=list)  # operations per second
    cpu_us: list[float] = field(default_factory=list)  # client CPU microseconds per operation

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpu_us)


def interleave(cases: dict[str, Callable[[], int]], rounds: int) -> dict[str, Result]:
    """Run each case once per round (A B A B ...); a case returns how many ops it did."""
    results = {name: Result(name) for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            gc.collect()  # every case starts without garbage left by the one before
            wall, cpu = time.perf_counter(), time.process_time()
            ops = case()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            results[name].rates.append(ops / wall)
            results[name].cpu_us.append(cpu / ops * 1e6)
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
        head = "| case | median ops/s | min | max | CPU µs/op | vs raw |"
        rule = "|---|---:|---:|---:|---:|---:|"
        if rival is not None:
            head += " vs FastStream |"
            rule += "---:|"
        lines = [f"### {self.title}", ""]
        if self.note:
            lines += [self.note, ""]
        lines += [head, rule]
        for r in self.results.values():
            row = (
                f"| {r.name} | {r.median:,.0f} | {min(r.rates):,.0f} | {max(r.rates):,.0f} | "
                f"{r.cpu:.2f} | {self.ratio(r.name):.2f} |"
            )
            if rival is not None:
                row += f" {self.ratio(r.name, rival):.2f} |"
            lines.append(row)
        return "\n".join(lines)
