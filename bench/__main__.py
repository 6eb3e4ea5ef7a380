"""Run every benchmark and print markdown tables with ratios: ``python -m bench``.

Options: ``--rounds N`` (default 5). Results also go to ``bench/results/latest.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

from bench import channel, codecs
from bench.harness import table


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    load = os.getloadavg()
    sections = [
        "# goflux benchmarks",
        "",
        f"Python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load average {load[0]:.2f} at start, {args.rounds} interleaved rounds.",
        "",
    ]
    enc, dec, size = codecs.run(args.rounds)
    sections += [
        table(f"Encode a 10-field model ({size} bytes of JSON)", enc, "raw TypeAdapter.dump_json"),
        "",
        table("Decode the same", dec, "raw TypeAdapter.validate_json"),
        "",
        table("In-process publish -> handler", channel.run(args.rounds), "raw asyncio.Queue"),
        "",
    ]
    report = "\n".join(sections)
    print(report)
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.md").write_text(report)


if __name__ == "__main__":
    main()
