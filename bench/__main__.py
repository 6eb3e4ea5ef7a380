"""Run the benchmarks and print markdown tables with ratios: ``python -m bench``.

Options: ``--rounds N`` (default 5), ``--only codecs,channel,jetstream,spark``. Every table
is measured in one run, its cases interleaved (A B A B ...). The report is also
written to ``bench/results/latest.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

from bench import channel, codecs, jetstream
from bench.harness import table

SUITES = ("codecs", "channel", "jetstream", "spark")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=",".join(SUITES), help="comma-separated suites")
    args = parser.parse_args()
    selected = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(selected) - set(SUITES)
    if unknown:
        parser.error(f"unknown suite(s) {sorted(unknown)}; choose from {SUITES}")

    load = os.getloadavg()
    sections = [
        "# goflux benchmarks",
        "",
        f"Python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load average {load[0]:.2f} at start, {args.rounds} interleaved rounds.",
        "",
    ]
    if "codecs" in selected:
        enc, dec, size = codecs.run(args.rounds)
        sections += [
            table(
                f"Encode a 10-field model ({size} bytes of JSON)", enc, "raw TypeAdapter.dump_json"
            ),
            "",
            table("Decode the same", dec, "raw TypeAdapter.validate_json"),
            "",
        ]
    if "channel" in selected:
        sections += [
            table("In-process publish -> handler", channel.run(args.rounds), "raw asyncio.Queue"),
            "",
        ]
    if "jetstream" in selected:
        js = jetstream.run(args.rounds)
        sections += [
            table("JetStream publish, waiting for each PubAck", js["sequential"], "raw js.publish"),
            "",
            table(
                f"JetStream pipelined publish ({jetstream.WINDOW} in flight)",
                js["pipelined"],
                "raw publish_async",
            ),
            "",
            table(
                "JetStream consume with ack, typed handler",
                js["consume"],
                "raw callback pull + ack",
            ),
            "",
        ]
    if "spark" in selected:
        from bench import spark  # noqa: PLC0415 - starts a JVM; only when asked for

        measured = spark.run(args.rounds)
        sections += [
            table(
                f"Spark source: typed rows/s over {spark.SOURCE_ROWS:,} messages "
                "(CPU column: this process only)",
                measured["source"],
                "raw nats-py read (1 process)",
            ),
            "",
            table(
                f"Spark sink: messages/s for {spark.SINK_ROWS:,} rows "
                f"({spark.WINDOW} PubAcks in flight per task)",
                measured["sink"],
                "raw publish_async (1 process)",
            ),
            "",
            spark.overhead_table(measured["overhead"]),
            "",
        ]
    report = "\n".join(sections)
    print(report)
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.md").write_text(report)


if __name__ == "__main__":
    main()
