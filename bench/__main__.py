"""Run the benchmarks: ``python -m bench`` (see ``bench/README.md``).

Options: ``--rounds N`` (default 5), ``--only SUITE,...``, ``--smoke`` (tiny sizes, one
round: proves every case still runs, in seconds), ``--out DIR``. Each suite starts its
own nats-server (the ``http`` suite a uvicorn process instead); within a table the
cases are interleaved (A B A B ...). The report (markdown, with machine notes and the
goals) and a PNG chart are written to ``DIR`` (default ``bench/results/latest``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import (
    chart,
    codec_consume,
    codecs,
    consume_shapes,
    goals,
    http,
    kv,
    latency,
    machine,
    memory,
    serial_codecs,
    service,
    subjects,
)
from bench.harness import Table
from bench.sizes import FULL, SMOKE, Sizes

SUITES = (
    "codecs",
    "channel",
    "jetstream",
    "telemetry",
    "kv",
    "latency",
    "memory",
    "service",
    "http",
    "spark",
    "server-features",
    "consume-shapes",
)
DEFAULT_OUT = Path(__file__).parent / "results" / "latest"


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str], int]:
    """The options, the suites selected and the rounds; exits on a bad option."""
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--rounds", type=int, default=None, help="default 5 (smoke: 1)")
    parser.add_argument("--only", default=",".join(SUITES), help="comma-separated suites")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="report directory")
    args = parser.parse_args(argv)
    selected = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(selected) - set(SUITES)
    if unknown:
        parser.error(f"unknown suite(s) {sorted(unknown)}; choose from {SUITES}")
    rounds = args.rounds or (1 if args.smoke else 5)
    if rounds < 1:
        parser.error("--rounds must be >= 1")
    return args, selected, rounds


def server_features(rounds: int, sizes: Sizes) -> list[Table]:
    """The tables of the server-features suite (nats-server 2.11-2.14 features)."""
    from bench import batch_get, fast_ingest  # noqa: PLC0415

    return [*fast_ingest.run(rounds, sizes), *batch_get.run(rounds, sizes)]


def shapes_suite(
    rounds: int, sizes: Sizes, tables: list[Table], sections: list[str]
) -> list[Table]:
    """Run the consume-shapes suite; return its 48 tables (the goals judge them all).

    The report shows its compact matrices (added to ``sections``), not a table per
    shape, and the chart the shapes :func:`consume_shapes.charted` picks (added to
    ``tables``).
    """
    shape_tables, matrix = consume_shapes.run(rounds, sizes)
    tables.extend(filter(consume_shapes.charted, shape_tables))
    sections.extend(matrix)
    return shape_tables


def main(argv: list[str] | None = None) -> int:
    args, selected, rounds = parse(argv)
    sizes = SMOKE if args.smoke else FULL

    started = time.monotonic()
    notes = machine.notes(rounds, args.smoke)
    tables: list[Table] = []
    sections: list[str] = []
    latencies = None
    overhead = None
    hooks_ns = None
    costs = None
    memory_peaks = None
    http_latencies = None

    def add(new: list[Table], after: Sequence[str] = ()) -> None:
        tables.extend(new)
        sections.extend([*(t.markdown() for t in new), *after])

    if "codecs" in selected:
        add(
            [
                *codecs.run(rounds, sizes),
                *serial_codecs.run(rounds, sizes),
                *codec_consume.run(rounds, sizes),
                *subjects.run(rounds, sizes),
            ]
        )
    if "channel" in selected:
        from bench import channel  # noqa: PLC0415 - imports the OpenTelemetry SDK

        add(channel.run(rounds, sizes))
    if "jetstream" in selected:
        from bench import jetstream  # noqa: PLC0415

        js_tables, hooks_ns = jetstream.run(rounds, sizes)
        add(js_tables)
    if "telemetry" in selected:
        from bench import telemetry  # noqa: PLC0415 - imports the OpenTelemetry SDK

        tel_tables, costs, cost_table = telemetry.run(rounds, sizes)
        add(tel_tables)
        sections.append(cost_table)
    if "kv" in selected:
        add(kv.run(rounds, sizes))
    if "latency" in selected:
        latencies = latency.run(rounds, sizes)
        sections.append(latency.markdown(latencies, sizes))
    if "memory" in selected:
        memory_peaks = memory.run(min(rounds, 3), sizes)
        sections.append(memory.markdown(memory_peaks, sizes))
    if "service" in selected:
        add(*service.run(rounds, sizes))
    if "http" in selected:
        http_tables, http_sections, http_latencies = http.run(rounds, sizes)
        add(http_tables, http_sections)
    if "spark" in selected:
        from bench import spark  # noqa: PLC0415 - starts a JVM; only when asked for

        spark_tables, overhead = spark.run(rounds, sizes)
        add(spark_tables)
        sections.append(spark.overhead_table(overhead))
    add(server_features(rounds, sizes) if "server-features" in selected else [])
    shapes = shapes_suite(rounds, sizes, tables, sections) if "consume-shapes" in selected else []

    write(
        args.out,
        [notes, machine.finish(time.monotonic() - started)],
        goals.check(
            {t.key: t for t in [*tables, *shapes]},
            latencies,
            overhead,
            hooks_ns,
            costs,
            memory_peaks,
            http_latencies,
        ),
        tables,
        sections,
        args.smoke,
    )
    return 0


def write(
    out: Path,
    notes: list[str],
    checked: list[goals.Goal],
    tables: list[Table],
    sections: list[str],
    smoke: bool,
) -> None:
    """Write the report and the chart to ``out``, and print the report."""
    out.mkdir(parents=True, exist_ok=True)
    drawn = chart.draw(tables, out / "chart.png") if tables else False
    report = "\n\n".join(
        [
            "# goflux benchmarks",
            *notes,
            goals.markdown(checked, smoke),
            "## Results",
            *sections,
            "![ratios to raw](chart.png)" if drawn else "(No chart: matplotlib is not installed.)",
        ]
    )
    (out / "report.md").write_text(report + "\n")
    print(report)
    print(f"\nwritten to {out}/", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
