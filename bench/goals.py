"""The issue's goals, checked against one run's tables."""

from __future__ import annotations

from dataclasses import dataclass

from bench import faststream_cases, latency
from bench.harness import Table

GOFLUX_CONSUME = "goflux Subscriber (auto-ack)"
NOOP_CONSUME = "goflux, no-op telemetry providers"


@dataclass
class Goal:
    what: str
    target: str
    measured: str
    met: bool


def check(
    tables: dict[str, Table],
    latencies: dict[str, latency.Latencies] | None,
    overhead: list[float] | None,
    hooks_ns: float | None = None,
) -> list[Goal]:
    goals: list[Goal] = []

    def ratio_goal(key: str, row: str, target: float, what: str, *, cpu: bool = True) -> None:
        if key in tables:
            table = tables[key]
            value = table.paired_ratio(row)
            measured = f"{value:.2f}"
            if cpu:  # Spark works in its JVM and workers: this process's CPU says nothing
                measured += f" (CPU per message: {table.cpu_ratio(row):.2f})"
            goals.append(Goal(what, f">= {target:.2f}", measured, value >= target))

    ratio_goal("consume", GOFLUX_CONSUME, 0.80, "consume with ack (typed) vs raw callback pull")
    consume = tables.get("consume")
    if consume is not None:
        rivals = [r for r in faststream_cases.CONSUME_ROWS if r in consume.results]
        fastest = max(rivals, key=lambda r: consume.results[r].median, default=None)
        for rival, setup in (
            (faststream_cases.PUSH_LOGGING, "its default setup (push, INFO logging)"),
            (fastest, f"its fastest setup here ({fastest})"),
        ):
            if rival is not None and rival in consume.results:
                value = consume.paired_ratio(GOFLUX_CONSUME, rival)
                goals.append(
                    Goal(f"consume vs FastStream, {setup}", ">= 5.0x", f"{value:.1f}x", value >= 5)
                )
    if consume is not None and hooks_ns is not None:
        share = hooks_ns / (consume.results[NOOP_CONSUME].cpu * 1000)
        goals.append(
            Goal(
                "cost of no-op telemetry per consumed message (share of goflux's CPU per "
                f"message; {hooks_ns:.0f} ns of {consume.results[NOOP_CONSUME].cpu:.1f} µs)",
                "<= 5%",
                f"{share:.1%}",
                share <= 0.05,
            )
        )
    ratio_goal("publish", "goflux Publisher.publish", 0.90, "publish vs raw js.publish")
    ratio_goal("pipelined", "goflux publish_many", 0.85, "pipelined publish vs raw publish_async")
    if latencies is not None:
        raw, ours = latencies[latency.RAW], latencies[latency.GOFLUX]
        extra = ours.percentile(0.5) - raw.percentile(0.5)
        goals.append(
            Goal(
                "latency p50 at 1,000 msg/s over raw", "<= +50 µs", f"{extra:+,.0f} µs", extra <= 50
            )
        )
    ratio_goal(
        "spark_source", "goflux source (local[2])", 0.50, "Spark source vs raw read", cpu=False
    )
    ratio_goal(
        "spark_sink",
        "goflux foreach_batch_publisher (local[2])",
        0.70,
        "Spark sink vs raw publish",
        cpu=False,
    )
    if overhead:
        median = sorted(overhead)[len(overhead) // 2]
        goals.append(
            Goal(
                "Spark micro-batch overhead (100 messages)",
                "<= 0.300 s",
                f"{median:.3f} s",
                median <= 0.3,
            )
        )
    return goals


def markdown(goals: list[Goal], smoke: bool) -> str:
    lines = ["## Goals", ""]
    if smoke:
        lines += ["Smoke run: sizes far too small to judge; the marks are not meaningful.", ""]
    lines += [
        "Ratios here are medians of per-round ratios (each round's runs are back to back); "
        "the tables below show ratios of medians. In brackets: the same comparison by "
        "client CPU per message, which does not depend on how busy the machine was.",
        "",
    ]
    lines += ["| goal | target | measured | met |", "|---|---:|---:|:---:|"]
    lines.extend(
        f"| {g.what} | {g.target} | {g.measured} | {'yes' if g.met else '**no**'} |" for g in goals
    )
    return "\n".join(lines)
