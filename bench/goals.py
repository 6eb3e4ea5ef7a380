"""The issue's goals, checked against one run's tables.

A throughput goal ("goflux reaches at least X of raw") is measured three ways, all
shown, from the same rounds:

- the median of per-round ratios (each round's two runs were back to back, so load
  drifting between rounds cancels out);
- the ratio of medians (each case's median rate over the rounds);
- the CPU ratio: the other side's client CPU per message over goflux's, which depends
  least on how busy the machine was.

Such a goal is met only when all three reach the target: the first two move with the
load on the two cores the client shares with the server, and one of them alone can
flatter. The Spark goals are judged on the two throughput ratios only: Spark works
in its JVM and Python workers, so this process's CPU says nothing about it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import (
    batch_get,
    codec_consume,
    fast_ingest,
    faststream_cases,
    http,
    kv,
    latency,
    memory,
    serial_codecs,
    shape_cases,
    subjects,
    telemetry,
)
from bench.harness import Table

GOFLUX_CONSUME = "goflux Subscriber (auto-ack)"
NOOP_CONSUME = "goflux, no-op telemetry providers"
NOT_MEASURED = "-"

ALL_THREE = "all three"
THROUGHPUT_ONLY = "both throughput ratios (CPU: Spark works in its JVM and workers)"
THROUGHPUT_CPU_SHOWN = "both throughput ratios (the goal is throughput; CPU shown)"


@dataclass
class Goal:
    """One goal: its target, what was measured, and whether it was met.

    ``measured`` is the median of per-round ratios for a ratio goal, else the single
    value; ``of_medians`` and ``cpu`` are the other two ratios (or ``NOT_MEASURED``).
    """

    what: str
    target: str
    measured: str
    met: bool
    of_medians: str = NOT_MEASURED
    cpu: str = NOT_MEASURED
    judged_on: str = "the value"


def rounded_down(value: float) -> str:
    """``value`` with two decimals, rounded down, as goals and the tables beside them show it.

    A value shown as reaching a target does reach it: 0.7996 shows as 0.79, not as a
    0.80 that was not met (the tiny addition keeps 0.29 from showing as 0.28 by binary
    rounding).
    """
    return f"{math.floor(value * 100 + 1e-9) / 100:.2f}"


def _ratio_goal(
    table: Table,
    row: str,
    target: float,
    what: str,
    *,
    against: str | None = None,
    cpu: bool = True,
    cpu_target: float | None = None,
    judge_cpu: bool = True,
    times: bool = False,
) -> Goal:
    """A throughput goal: ``row``'s rate against the baseline (or ``against``).

    ``cpu_target`` (default: ``target``) is what the CPU ratio must reach; with
    ``judge_cpu`` False it is shown only.
    """
    paired = table.paired_ratio(row, against)
    of_medians = table.ratio(row, against)
    met = paired >= target and of_medians >= target
    cpu_ratio = table.cpu_ratio(row, against) if cpu else None
    if cpu_ratio is not None and judge_cpu:
        met = met and cpu_ratio >= (target if cpu_target is None else cpu_target)

    def show(value: float) -> str:
        if times:  # (the tiny addition keeps 0.29 from showing as 0.28 by binary rounding)
            return f"{math.floor(value * 10 + 1e-9) / 10:.1f}x"
        return rounded_down(value)

    shown = f">= {target:.1f}x" if times else f">= {target:.2f}"
    if cpu and judge_cpu and cpu_target is not None:
        shown += f" (CPU >= {cpu_target:.2f})"
    return Goal(
        what,
        shown,
        show(paired),
        met,
        show(of_medians),
        show(cpu_ratio) if cpu_ratio is not None else NOT_MEASURED,
        (ALL_THREE if judge_cpu else THROUGHPUT_CPU_SHOWN) if cpu else THROUGHPUT_ONLY,
    )


def _within_goal(table: Table, row: str, most: float, what: str) -> Goal:
    """A cost goal: ``row`` takes at most ``most`` times the baseline's time per operation.

    The same three measures as a throughput goal, turned into time ratios (the
    baseline's rate over the row's, the row's CPU per operation over the baseline's),
    rounded up: a value shown within the target is within it.
    """
    paired = 1 / table.paired_ratio(row)
    of_medians = 1 / table.ratio(row)
    cpu = 1 / table.cpu_ratio(row)

    def show(value: float) -> str:
        return f"{math.ceil(value * 100 - 1e-9) / 100:.2f}x"

    return Goal(
        what,
        f"<= {most:.2f}x",
        show(paired),
        paired <= most and of_medians <= most and cpu <= most,
        show(of_medians),
        show(cpu),
        ALL_THREE,
    )


def _template_goals(tables: dict[str, Table]) -> list[Goal]:
    """A subject template's parse and format: CPU time per message, absolute."""
    found: list[Goal] = []
    for key, row, most, what in (
        ("template_parse", subjects.TEMPLATE_PARSE, 10.0, "SubjectTemplate.parse per message"),
        ("template_format", subjects.TEMPLATE_FORMAT, 15.0, "SubjectTemplate.format per message"),
    ):
        if key in tables:
            cpu_us = tables[key].results[row].cpu
            found.append(
                Goal(
                    f"{what} (a model of two str fields)",
                    f"<= {most:.0f} µs",
                    f"{cpu_us:.2f} µs",
                    cpu_us <= most,
                    judged_on="CPU µs per operation (median round)",
                )
            )
    return found


def _server_feature_goals(tables: dict[str, Table]) -> list[Goal]:
    """The goals of the server-features suite's tables that ran."""
    found: list[Goal] = []
    if "fast_ingest" in tables:
        table = tables["fast_ingest"]
        found.append(
            _ratio_goal(
                table,
                fast_ingest.FAST,
                1.3,
                "fast ingest: publish_fast vs publish_many",
                against=fast_ingest.MANY,
                times=True,
            )
        )
        found.append(
            _ratio_goal(
                table,
                fast_ingest.FAST,
                0.5,
                "fast ingest: publish_fast (typed, checked, traced) vs a raw fast batch by hand",
                against=fast_ingest.RAW_FAST,
            )
        )
    if "batch_get" in tables:
        found.append(
            _ratio_goal(
                tables["batch_get"],
                batch_get.GOFLUX_BATCH,
                2.0,
                "batch direct get (get_batch) vs one raw direct get per message",
                times=True,
            )
        )
        found.append(
            _ratio_goal(
                tables["batch_get"],
                batch_get.GOFLUX_BATCH,
                0.75,
                "batch direct get (get_batch, typed) vs a raw batched direct get by hand",
                against=batch_get.RAW_BATCH,
            )
        )
    return found


SHAPE_TARGET = 0.95  # every consume shape, by both throughput ratios
SHAPE_CPU_TARGET = 0.85  # every consume shape, by CPU per message
SHAPE_DURABLE_1K_TARGET = 1.0  # the durable-bound 1 KB shapes, by both throughput ratios


def shape_target(shape: shape_cases.Shape) -> float:
    """The throughput ``shape`` must reach against raw (its CPU: :data:`SHAPE_CPU_TARGET`)."""
    if shape.kind == "durable" and shape.payload == "1k":
        return SHAPE_DURABLE_1K_TARGET
    return SHAPE_TARGET


def shape_goal(table: Table, shape: shape_cases.Shape, target: float | None = None) -> Goal:
    """One consume shape's goal: goflux against raw at ``target`` (default: its own)."""
    return _ratio_goal(
        table,
        shape_cases.GOFLUX,
        shape_target(shape) if target is None else target,
        f"consume shape {shape.name} vs raw callback pull",
        cpu_target=SHAPE_CPU_TARGET,
    )


def _shape_goals(tables: dict[str, Table]) -> list[Goal]:
    """The consume-shapes goals, each over several shapes: met only if every shape meets it.

    The values shown are the lowest over the shapes (each ratio's own lowest); the
    goal's text names the shapes that fall short.
    """
    measured = [
        (shape, tables[shape_cases.key(shape)])
        for shape in shape_cases.SHAPES
        if shape_cases.key(shape) in tables
    ]
    found: list[Goal] = []
    for what, target, chosen in (
        ("every consume shape", SHAPE_TARGET, measured),
        (
            "the durable-bound 1 KB consume shapes",
            SHAPE_DURABLE_1K_TARGET,
            [(s, t) for s, t in measured if s.kind == "durable" and s.payload == "1k"],
        ),
    ):
        if not chosen:
            continue
        short = [s.name for s, t in chosen if not shape_goal(t, s, target).met]

        def lowest(ratio: Callable[[Table], float], chosen: list[Any] = chosen) -> str:
            return rounded_down(min(ratio(t) for _, t in chosen))

        found.append(
            Goal(
                f"{what} ({len(chosen)}) vs raw callback pull, the lowest of each ratio; "
                + _short(short),
                f">= {target:.2f} (CPU >= {SHAPE_CPU_TARGET:.2f})",
                lowest(lambda t: t.paired_ratio(shape_cases.GOFLUX)),
                not short,
                lowest(lambda t: t.ratio(shape_cases.GOFLUX)),
                lowest(lambda t: t.cpu_ratio(shape_cases.GOFLUX)),
                ALL_THREE,
            )
        )
    return found


def _short(names: list[str], most: int = 12) -> str:
    """The shapes that fall short, named (or counted, when there are more than ``most``)."""
    if not names:
        return "none short"
    if len(names) <= most:
        return f"short: {', '.join(names)}"
    return f"{len(names)} short (named in the matrices' goal column)"


def check(
    tables: dict[str, Table],
    latencies: dict[str, latency.Latencies] | None,
    overhead: list[float] | None,
    hooks_ns: float | None = None,
    costs: list[telemetry.Cost] | None = None,
    peaks: dict[str, memory.Peak] | None = None,
    http_latencies: dict[str, latency.Latencies] | None = None,
) -> list[Goal]:
    goals: list[Goal] = []

    def ratio_goal(
        key: str,
        row: str,
        target: float,
        what: str,
        *,
        cpu: bool = True,
        cpu_target: float | None = None,
        judge_cpu: bool = True,
    ) -> None:
        if key in tables:
            goals.append(
                _ratio_goal(
                    tables[key],
                    row,
                    target,
                    what,
                    cpu=cpu,
                    cpu_target=cpu_target,
                    judge_cpu=judge_cpu,
                )
            )

    ratio_goal(
        "consume",
        GOFLUX_CONSUME,
        0.90,
        "consume with ack (typed) vs raw callback pull",
        cpu_target=0.75,
    )
    consume = tables.get("consume")
    if consume is not None:
        rivals = [r for r in faststream_cases.CONSUME_ROWS if r in consume.results]
        fastest = max(rivals, key=lambda r: consume.results[r].median, default=None)
        for rival, setup in (
            (faststream_cases.PUSH_LOGGING, "its default setup (push, INFO logging)"),
            (fastest, f"its fastest setup here ({fastest})"),
        ):
            if rival is not None and rival in consume.results:
                goals.append(
                    _ratio_goal(
                        consume,
                        GOFLUX_CONSUME,
                        5.0,
                        f"consume vs FastStream, {setup}",
                        against=rival,
                        times=True,
                    )
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
                judged_on="the share (timed in a tight loop)",
            )
        )
    for setup, target in (
        (telemetry.METRICS, 0.60),
        (telemetry.SAMPLED, 0.45),
        (telemetry.TRACED, 0.25),
    ):
        ratio_goal(
            "telemetry",
            setup,
            target,
            f"consume with {setup} vs telemetry off",
            judge_cpu=False,
        )
    goals.extend(
        Goal(
            f"telemetry CPU per consumed message vs the SDK floor, {cost.setup} "
            f"({cost.goflux_us:.1f} µs vs {cost.floor_us:.1f} µs)",
            "<= 1.10",
            f"{cost.ratio:.2f}",
            cost.ratio <= 1.10,
            judged_on="the ratio (CPU per message)",
        )
        for cost in costs or ()
    )
    for name, libraries in serial_codecs.LIBRARIES.items():
        for step, library in zip(("encode", "decode"), libraries, strict=True):
            key = serial_codecs.key(name, step)
            if key in tables:
                goals.append(
                    _within_goal(
                        tables[key],
                        f"{name}.{step}",
                        serial_codecs.GOAL,
                        f"{name}.{step} time vs raw {library} + TypeAdapter",
                    )
                )
    ratio_goal(
        "codec_consume",
        codec_consume.MSGPACK,
        1.0,
        "typed JetStream consume with MsgpackCodec vs with JsonCodec",
    )
    ratio_goal(
        "publish", "goflux Publisher.publish", 0.95, "publish vs raw js.publish", cpu_target=0.90
    )
    ratio_goal(
        "pipelined",
        "goflux publish_many",
        0.90,
        "pipelined publish vs raw publish_async",
        cpu_target=0.85,
    )
    goals.extend(_template_goals(tables))
    ratio_goal("kv_put", kv.GOFLUX_PUT, 0.90, "typed Key-Value put vs raw kv.put")
    ratio_goal("kv_get", kv.GOFLUX_GET, 0.90, "typed Key-Value get vs raw kv.get + decode")
    ratio_goal("kv_watch", kv.GOFLUX_WATCH, 0.80, "Key-Value watch vs raw kv.watch + decode")
    goals.extend(_server_feature_goals(tables))
    goals.extend(_shape_goals(tables))
    if latencies is not None:
        raw, ours = latencies[latency.RAW], latencies[latency.GOFLUX]
        extra = ours.percentile(0.5) - raw.percentile(0.5)
        goals.append(
            Goal(
                "latency p50 at 1,000 msg/s over raw",
                "<= +30 µs",
                f"{extra:+,.0f} µs",
                extra <= 30,
                judged_on="the p50 difference over all rounds",
            )
        )
    if peaks is not None:
        ratio = peaks["goflux"].per_message / peaks["raw"].per_message
        goals.append(
            Goal(
                "memory per message held by a stream vs raw nats-py "
                f"({peaks['goflux'].per_message:,.0f} vs {peaks['raw'].per_message:,.0f} bytes)",
                "<= 1.50",
                f"{ratio:.2f}",
                ratio <= 1.5,
                judged_on="bytes per message (median round by growth)",
            )
        )
    ratio_goal(
        "http_publish",
        http.GOFLUX,
        0.85,
        "HTTP publish -> handler vs hand-written httpx + Starlette",
    )
    if http_latencies is not None:
        hand, ours = http_latencies[http.HAND_RR], http_latencies[http.GOFLUX_RR]
        extra = ours.percentile(0.5) - hand.percentile(0.5)
        goals.append(
            Goal(
                "HTTP request/reply latency p50 over hand-written httpx + Starlette "
                f"({ours.percentile(0.5):,.0f} µs vs {hand.percentile(0.5):,.0f} µs)",
                "<= +50 µs",
                f"{extra:+,.0f} µs",
                extra <= 50,
                judged_on="the p50 difference over all rounds",
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
                judged_on="the median batch",
            )
        )
    return goals


def markdown(goals: list[Goal], smoke: bool) -> str:
    lines = ["## Goals", ""]
    if smoke:
        lines += ["Smoke run: sizes far too small to judge; the marks are not meaningful.", ""]
    lines += [
        "A throughput goal is measured three ways on the same rounds: the median of "
        "per-round ratios (each round's runs are back to back), the ratio of medians (as "
        "in the tables below), and the CPU ratio (the other side's client CPU per message "
        "over goflux's, which depends least on how busy the machine was). It is met only "
        "when every one it is judged on reaches the target; the Spark goals leave out the "
        "CPU ratio, as Spark works in its JVM and Python workers. A codec's cost goal "
        "(target `<= 1.20x`) shows the same three as time ratios: the codec's time (or "
        "CPU) per operation over its library's, called directly.",
        "",
        "| goal | target | median of per-round ratios (or value) | ratio of medians "
        "| CPU ratio | met | judged on |",
        "|---|---:|---:|---:|---:|:---:|---|",
    ]
    lines.extend(
        f"| {g.what} | {g.target} | {g.measured} | {g.of_medians} | {g.cpu} | "
        f"{'yes' if g.met else '**no**'} | {g.judged_on} |"
        for g in goals
    )
    return "\n".join(lines)
