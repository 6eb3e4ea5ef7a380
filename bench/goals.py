"""The issue's goals, checked against one run's tables."""

from __future__ import annotations

from dataclasses import dataclass

from bench import faststream_cases, latency
from bench.harness import Table

GOFLUX_CONSUME = "goflux Subscriber (auto-ack)"
NOOP_CONSUME = "goflux, no-op telemetry providers"
PLAIN_CHANNEL = "goflux channel, telemetry not configured"
NOOP_CHANNEL = "goflux channel, no-op telemetry"


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
) -> list[Goal]:
    goals: list[Goal] = []

    def ratio_goal(key: str, row: str, target: float, what: str) -> None:
        if key in tables:
            value = tables[key].ratio(row)
            goals.append(Goal(what, f">= {target:.2f}", f"{value:.2f}", value >= target))

    ratio_goal("consume", GOFLUX_CONSUME, 0.80, "consume with ack (typed) vs raw callback pull")
    consume = tables.get("consume")
    if consume is not None:
        for rival, setup in (
            (faststream_cases.PUSH_LOGGING, "its default setup: push, INFO logging"),
            (faststream_cases.PUSH, "its fastest setup: push, logger=None"),
        ):
            if rival in consume.results:
                value = consume.ratio(GOFLUX_CONSUME, rival)
                goals.append(
                    Goal(f"consume vs FastStream, {setup}", ">= 5.0x", f"{value:.1f}x", value >= 5)
                )
    for key, row, baseline, where in (
        ("channel", NOOP_CHANNEL, PLAIN_CHANNEL, "channel transport, in-process"),
        ("consume", NOOP_CONSUME, GOFLUX_CONSUME, "JetStream consume"),
    ):
        if key in tables:
            cost = 1 - tables[key].ratio(row, baseline)
            goals.append(
                Goal(
                    f"throughput cost of no-op telemetry providers ({where})",
                    "<= 5%",
                    f"{cost:.1%}",
                    cost <= 0.05,
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
    ratio_goal("spark_source", "goflux source (local[2])", 0.50, "Spark source vs raw read")
    ratio_goal(
        "spark_sink", "goflux foreach_batch_publisher (local[2])", 0.70, "Spark sink vs raw publish"
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
    lines += ["| goal | target | measured | met |", "|---|---:|---:|:---:|"]
    lines.extend(
        f"| {g.what} | {g.target} | {g.measured} | {'yes' if g.met else '**no**'} |" for g in goals
    )
    return "\n".join(lines)
