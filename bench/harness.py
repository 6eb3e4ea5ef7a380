"""Interleaved A/B timing: every case runs in turn each round, so load drifts hit all."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Result:
    name: str
    rates: list[float] = field(default_factory=list)  # operations per second
    cpu_us: list[float] = field(default_factory=list)  # CPU microseconds per operation

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


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


def table(title: str, results: dict[str, Result], baseline: str) -> str:
    base = results[baseline].median
    lines = [
        f"### {title}",
        "",
        "| case | median ops/s | min | max | CPU µs/op | ratio vs " + baseline + " |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines.extend(
        f"| {r.name} | {r.median:,.0f} | {min(r.rates):,.0f} | {max(r.rates):,.0f} | "
        f"{statistics.median(r.cpu_us):.2f} | {r.median / base:.2f} |"
        for r in results.values()
    )
    return "\n".join(lines)
