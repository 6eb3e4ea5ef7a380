"""Consume shapes: goflux's JetStream Subscriber against raw nats-py in every shape users run.

The matrix is :mod:`bench.shape_cases`'s: durable-bound, ephemeral and ordered
consumers; 100 B, 1 KB and 64 KB JSON payloads; with and without a ``traceparent``
and two user headers; file and memory storage; one or two competing subscribers on a
durable: 48 shapes. Each is a pair of cases, raw nats-py's callback pull and goflux's
``Subscriber``, measured in turns, every other round in reverse order. One stream per
storage, payload and headers is filled once at the start. Raw nats-py runs on a
connection of its own (goflux keeps header lines on the connections it uses: nats-py's
own header parsing stays raw's). The report shows one compact matrix per payload.

One shape, for profiling::

    python -m bench.consume_shapes --shape durable-1k-plain-file-1 --rounds 3

prints the pair's table and ratios; ``--side goflux`` (or ``raw``) runs one side alone,
``--raw-pulls`` compares raw pull shapes on the shape, ``--messages N`` and
``--smoke`` change the size.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import nats

from bench import goals
from bench.harness import Table, interleave
from bench.shape_cases import (
    BY_NAME,
    GOFLUX,
    PAYLOADS,
    PULLS,
    RAW,
    RAW_PULLS,
    SHAPES,
    Pull,
    Shape,
    fill,
    goflux_case,
    key,
    payload,
    raw_case,
)
from bench.sizes import FULL, SMOKE, Sizes
from goflux.testing import NatsServer
from goflux.transports.jetstream._options import DEFAULT_MAX_IN_FLIGHT

Case = Callable[[], int]


class Bench:
    """A nats-server, one connection per side, and the streams filled for some shapes."""

    def __init__(self, sizes: Sizes, shapes: tuple[Shape, ...]) -> None:
        self.sizes = sizes
        self.loop = asyncio.new_event_loop()
        self.server = NatsServer().start()
        try:
            self.nc = self.run(nats.connect(self.server.url))
            self.raw_nc = self.run(nats.connect(self.server.url))
            self.js = self.nc.jetstream(publish_async_max_pending=sizes.window)
            self.raw_js = self.raw_nc.jetstream()
            streams = {shape.stream: shape for shape in shapes}
            for shape in streams.values():
                self.run(fill(self.js, shape, shape.messages(sizes), sizes.window))
        except BaseException:
            self.close()
            raise

    def run(self, work: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(work)

    def raw(self, shape: Shape, pull: Pull | None = None) -> Case:
        return lambda: self.run(raw_case(self.raw_js, shape, shape.messages(self.sizes), pull))

    def goflux(self, shape: Shape) -> Case:
        return lambda: self.run(goflux_case(self.js, shape, shape.messages(self.sizes)))

    def measure(self, shape: Shape, rounds: int) -> Table:
        """``shape``'s pair, raw first in odd rounds and goflux first in even ones."""
        cases = {RAW: self.raw(shape), GOFLUX: self.goflux(shape)}
        results = interleave(cases, rounds, expected=shape.messages(self.sizes), alternate=True)
        return Table(key(shape), f"Consume shape {shape.name}", results, RAW)

    def close(self) -> None:
        for nc in (getattr(self, "nc", None), getattr(self, "raw_nc", None)):
            if nc is not None:
                self.run(nc.close())
        self.server.stop()
        self.loop.close()


def charted(table: Table) -> bool:
    """Whether the report's chart shows ``table``: the file-storage, one-subscriber shapes.

    Those 12 cover every kind, payload and headers; all 48 would make the chart unreadable.
    """
    return table.key.endswith("-file-1")


def run(rounds: int, sizes: Sizes) -> tuple[list[Table], list[str]]:
    """Every shape's table, and the matrix sections the report shows instead of them."""
    bench = Bench(sizes, SHAPES)
    try:
        tables = [bench.measure(shape, rounds) for shape in SHAPES]
    finally:
        bench.close()
    return tables, matrix(tables, sizes)


def matrix(tables: list[Table], sizes: Sizes) -> list[str]:
    """One compact table per payload size: a row per shape, raw and goflux side by side."""
    by_key = {t.key: t for t in tables}
    sections = []
    for size, target in PAYLOADS.items():
        shapes = [s for s in SHAPES if s.payload == size and key(s) in by_key]
        if not shapes:
            continue
        count = shapes[0].messages(sizes)
        lines = [
            f"### Consume shapes, {len(payload(target)):,}-byte JSON payload "
            f"({count:,} messages per case and round)",
            "",
        ]
        if size == next(iter(PAYLOADS)):
            lines += [
                NOTE.format(
                    small_pull=RAW_PULLS["1k"].batch,
                    large_pull=RAW_PULLS["64k"].batch,
                    small=sizes.shapes_msgs,
                    large=sizes.shapes_large_msgs,
                    max_in_flight=DEFAULT_MAX_IN_FLIGHT,
                ),
                "",
            ]
        lines += [
            "| shape | messages per round | raw msg/s | goflux msg/s | throughput ratio "
            "(paired) | ratio of medians | raw CPU µs/msg | goflux CPU µs/msg | CPU ratio "
            "| goal met |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
        ]  # (ratios rounded down, as the goals show them: 0.949 is 0.94, not a 0.95 not met)
        for shape in shapes:
            table = by_key[key(shape)]
            raw, ours = table.results[RAW], table.results[GOFLUX]
            counted = "/".join(f"{c:,}" for c in sorted(set(ours.counts)))
            met = goals.shape_goal(table, shape).met
            lines.append(
                f"| {shape.name} | {counted} | {raw.median:,.0f} | {ours.median:,.0f} | "
                f"{goals.rounded_down(table.paired_ratio(GOFLUX))} | "
                f"{goals.rounded_down(table.ratio(GOFLUX))} | "
                f"{raw.cpu:.2f} | {ours.cpu:.2f} | {goals.rounded_down(table.cpu_ratio(GOFLUX))} | "
                f"{'yes' if met else '**no**'} |"
            )
        sections.append("\n".join(lines))
    return sections


NOTE = (
    "A shape reads kind-payload-headers-storage-subscribers. Each stream (one per "
    "storage, payload and headers) holds exactly the messages of one case ({small:,} "
    "of 100 B or 1 KB, {large:,} of 64 KB); every case "
    "reads all of them through a fresh consumer, made and deleted inside the timed "
    "region; the rounds alternate which side goes first. Raw nats-py: a callback "
    "subscription with hand-sent pull requests, two open at the start and another "
    "whenever the messages still expected fall to half a batch, the batch its fastest "
    "here: {small_pull} for 100 B and 1 KB, {large_pull} for 64 KB (larger pulls of 64 KB "
    "messages overran the server's write buffer for the client); `ack()` per message "
    "(ordered: none), on a "
    "connection of its own. goflux: `jetstream.Subscriber` with its defaults "
    "(auto-ack, max_in_flight {max_in_flight}). Both decode with the same pydantic `TypeAdapter`. "
    "Headers: a `traceparent` and two user headers on every message. Two subscribers: "
    "two competing pulls (or Subscribers) on one durable, their total counted. CPU: "
    "this process's per message; CPU ratio = raw's over goflux's. Ratios are rounded "
    "down, as the goals are (0.949 shows as 0.94). Goal: every shape "
    "at 0.95 of raw or more by both throughput ratios and 0.85 by CPU; the durable "
    "1 KB shapes 1.0."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.consume_shapes")
    parser.add_argument("--shape", required=True, choices=sorted(BY_NAME), metavar="SHAPE")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--messages", type=int, help="messages per case and round")
    parser.add_argument("--side", choices=("both", "raw", "goflux"), default="both")
    parser.add_argument(
        "--raw-pulls",
        nargs="?",
        const=",".join(p.name for p in PULLS),
        help="compare raw pull shapes (FIRSTxBATCH,...; default: all of PULLS)",
    )
    args = parser.parse_args(argv)
    shape = BY_NAME[args.shape]
    sizes = SMOKE if args.smoke else FULL
    if args.messages:
        sizes = dataclasses.replace(
            sizes, shapes_msgs=args.messages, shapes_large_msgs=args.messages
        )
    bench = Bench(sizes, (shape,))
    try:
        if args.raw_pulls:
            pulls = [Pull(*map(int, p.split("x")[::-1])) for p in args.raw_pulls.split(",")]
            cases = {f"raw {pull.name}": bench.raw(shape, pull) for pull in pulls}
        elif args.side == "both":
            table = bench.measure(shape, args.rounds)
            print(table.markdown())
            print(
                f"\n{shape.name}: throughput ratio {table.paired_ratio(GOFLUX):.3f} (paired), "
                f"{table.ratio(GOFLUX):.3f} (of medians); CPU ratio {table.cpu_ratio(GOFLUX):.3f}"
            )
            return 0
        else:
            cases = {args.side: bench.raw(shape) if args.side == "raw" else bench.goflux(shape)}
        results = interleave(cases, args.rounds, expected=shape.messages(sizes), alternate=True)
        first = next(iter(results))
        print(Table("pulls", f"{shape.name}: {', '.join(cases)}", results, first).markdown())
        return 0
    finally:
        bench.close()


if __name__ == "__main__":
    raise SystemExit(main())
