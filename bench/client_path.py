"""The client's side of JetStream consume alone: goflux against raw nats-py, per message.

The consume suites run against a nats-server on the same 2 cores, so a ratio moves by
±0.1 from run to run with whatever else the machine does. This takes the server out:
deliveries are written as nats-server writes them (``MSG``/``HMSG`` lines with
``$JS.ACK`` reply subjects, addressed to the subscription's inbox) and fed to nats-py's
parser in chunks of whole frames of about 32 KB, as its read loop would, the event
loop turning after each chunk. What is measured is everything the client does from
the parser on: goflux's route, engine, worker, decode, handler and acks against raw
nats-py's ``_process_msg``, queue, callback task, decode and ``msg.ack()``.

- ``ordered``: goflux's ordered ``Subscriber`` against a raw callback that decodes
  (no acks, as on an ``ack_policy`` ``none`` consumer).
- ``acked``: goflux's ``Subscriber`` (an ephemeral consumer, auto-ack) against a raw
  callback that decodes and acks each message. Both sides' acks name a consumer that
  does not exist, which the server drops without a word (see :func:`decoy`).

Two more sides count what both share, for a profile of where a message's cost goes
(``--floors``): ``parser``, nats-py's reader and parser alone (each delivery handed
to a ``_process_msg`` that only counts it), and ``decoding``, the same plus the
``TypeAdapter.validate_json`` both sides decode with. A side's own path is its count
less ``decoding``'s.

Plainly run, it reports process CPU per message (median of ``--rounds``, rounds
alternating the order). With ``--instructions`` it runs each side once under
valgrind's callgrind and reports CPU instructions per message, counted between the
start and the end of the feed: the same for the same code, whatever else the machine
does (valgrind must be installed)::

    python -m bench.client_path --kind ordered --size 1024 --instructions [--floors]

It is a profiling aid, not a suite of ``python -m bench``: it has no goal.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from bench.pull import Tally
from bench.shape_cases import ADAPTER, CODEC, HEADERS, payload
from goflux import Message
from goflux.testing import NatsServer
from goflux.transports import jetstream

STREAM = "CLIENT_PATH"
SUBJECT = "client.path"
CHUNK = 32 * 1024  # nats-py reads at most this much at a time
# The consumer name in raw's reply subjects: as long as the names nats-server gives the
# consumers raw nats-py creates in the consume suites (8 characters). goflux's side has
# its consumer's name (12 characters), or for acks a decoy as long (see decoy): nats-py's
# parser costs more for a longer line.
RAW_CONSUMER = "RAWCONS8"
_ZERO = "GOFLUX_CLIENT_PATH_ZERO"  # set: zero and dump callgrind's counts around the feed


def frames(sid: int, consumer: str, count: int, size: int, headers: bool) -> list[bytes]:
    """``count`` deliveries of ``consumer`` to subscription ``sid``, in chunks of whole frames.

    Whole frames only: nats-py's read loop feeds the same parser whatever the server
    sends meanwhile (a heartbeat, a PONG), which must not land inside a frame.
    """
    data = payload(size)
    block = b""
    if headers:
        lines = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in HEADERS.items())
        block = b"NATS/1.0\r\n" + lines + b"\r\n"
    chunks: list[bytes] = []
    current: list[bytes] = []
    size_now = 0
    for seq in range(1, count + 1):
        reply = b"$JS.ACK.%s.%s.1.%d.%d.1764300000000000000.%d" % (
            STREAM.encode(),
            consumer.encode(),
            seq,
            seq,
            count - seq,
        )
        if headers:
            frame = b"HMSG %s %d %s %d %d\r\n%s%s\r\n" % (
                SUBJECT.encode(),
                sid,
                reply,
                len(block),
                len(block) + len(data),
                block,
                data,
            )
        else:
            frame = b"MSG %s %d %s %d\r\n%s\r\n" % (SUBJECT.encode(), sid, reply, len(data), data)
        current.append(frame)
        size_now += len(frame)
        if size_now >= CHUNK:
            chunks.append(b"".join(current))
            current, size_now = [], 0
    if current:
        chunks.append(b"".join(current))
    return chunks


def _callgrind(command: str) -> None:
    if os.environ.get(_ZERO):
        pid = str(os.getpid())
        subprocess.run(["callgrind_control", command, pid], check=False, capture_output=True)


async def _feed(nc: Client, chunks: list[bytes], count: Tally) -> float:
    """Feed ``chunks`` to nats-py's parser; return the CPU seconds until all were handled."""
    parser: Any = nc._ps
    gc.collect()
    _callgrind("-z")
    started = time.process_time()
    for chunk in chunks:
        await parser.parse(chunk)
        await asyncio.sleep(0)  # (what the read loop's next read gives the workers)
        await asyncio.sleep(0)
    await asyncio.wait_for(count.done.wait(), 60)
    spent = time.process_time() - started
    _callgrind("-d")
    return spent


async def goflux_side(nc: Client, kind: str, messages: int, size: int, headers: bool) -> float:
    """goflux's Subscriber fed ``messages`` deliveries; CPU seconds spent."""
    js = nc.jetstream()
    count = Tally(messages)

    async def handle(message: Message[Any]) -> None:
        count.add()

    subscriber = jetstream.Subscriber(js, CODEC, stream=STREAM, ordered=kind == "ordered")
    subscription = await subscriber.start(SUBJECT, handle)
    engine: Any = subscription._engine
    name = engine.consumer.name  # (an ordered consumer takes only its own deliveries)
    chunks = frames(
        engine._sub._id, decoy(name) if kind == "acked" else name, messages, size, headers
    )
    try:
        return await _feed(nc, chunks, count)
    finally:
        await subscription.stop()


def decoy(consumer: str) -> str:
    """A consumer name as long as ``consumer``'s that names no consumer.

    Acks to a consumer the server does not know are dropped, as raw's are. Acks to the
    real one (which has none of these deliveries) each make nats-server log a warning,
    and the test server's log-reader thread reads each line: about 10,000 instructions
    a message counted in this process, and with 64 KB messages (one to an event-loop
    step) about one context switch a message as that thread takes the GIL, all charged
    to goflux.
    """
    return "D" * len(consumer)


async def raw_side(nc: Client, kind: str, messages: int, size: int, headers: bool) -> float:
    """Raw nats-py's callback fed ``messages`` deliveries; CPU seconds spent."""
    count = Tally(messages)
    validate = ADAPTER.validate_json
    ack = kind != "ordered"

    async def on_message(msg: Msg) -> None:
        validate(msg.data)
        if ack:
            await msg.ack()
        count.add()

    sub = await nc.subscribe(nc.new_inbox(), cb=on_message)
    chunks = frames(sub._id, RAW_CONSUMER, messages, size, headers)
    try:
        return await _feed(nc, chunks, count)
    finally:
        await sub.unsubscribe()


async def _floor_side(nc: Client, messages: int, size: int, headers: bool, decode: bool) -> float:
    """nats-py's parser fed ``messages`` deliveries, each only counted (and decoded)."""
    count = Tally(messages)
    validate = ADAPTER.validate_json
    process: Any = nc._process_msg

    async def counted(sid: int, subject: bytes, reply: bytes, data: bytes, hdr: bytes) -> None:
        if decode:
            validate(data)
        count.add()

    nc._process_msg = counted  # type: ignore[method-assign]
    try:
        return await _feed(nc, frames(1, RAW_CONSUMER, messages, size, headers), count)
    finally:
        nc._process_msg = process  # type: ignore[method-assign]


async def parser_side(nc: Client, kind: str, messages: int, size: int, headers: bool) -> float:
    """nats-py's reader and parser alone, fed ``messages`` deliveries; CPU seconds spent."""
    return await _floor_side(nc, messages, size, headers, decode=False)


async def decoding_side(nc: Client, kind: str, messages: int, size: int, headers: bool) -> float:
    """The parser, and each delivery decoded as both sides do; CPU seconds spent."""
    return await _floor_side(nc, messages, size, headers, decode=True)


SIDES = {"goflux": goflux_side, "raw": raw_side}
FLOORS = {"parser": parser_side, "decoding": decoding_side}
ALL_SIDES = {**SIDES, **FLOORS}


async def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    """CPU µs per message of each side, per round."""
    chosen = [*SIDES, *(FLOORS if args.floors else ())] if args.side == "both" else [args.side]
    spent: dict[str, list[float]] = {side: [] for side in chosen}
    async with NatsServer() as server:
        nc = await nats.connect(server.url)
        await jetstream.ensure_stream(
            nc.jetstream(), name=STREAM, subjects=[SUBJECT], storage="memory"
        )
        for round_ in range(args.rounds):
            order = list(spent) if round_ % 2 == 0 else list(reversed(spent))
            for side in order:
                seconds = await ALL_SIDES[side](
                    nc, args.kind, args.messages, args.size, args.headers
                )
                spent[side].append(seconds / args.messages * 1e6)
        await nc.close()
    return spent


def instructions(args: argparse.Namespace, side: str) -> int:
    """Instructions per message of ``side``, counted by callgrind over one feed.

    Raises:
        RuntimeError: valgrind is not installed, or its run failed.
    """
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise RuntimeError("--instructions needs valgrind (callgrind) installed")
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={scratch}/out.%p",
            sys.executable,
            "-m",
            "bench.client_path",
            f"--kind={args.kind}",
            f"--size={args.size}",
            f"--messages={args.messages}",
            "--rounds=1",
            f"--side={side}",
            *(["--headers"] if args.headers else []),
        ]
        env = {**os.environ, _ZERO: "1", "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        dumps = sorted(Path(scratch).glob("out.*.1"))
        if done.returncode != 0 or not dumps:
            raise RuntimeError(f"callgrind run of {side} failed:\n{done.stderr[-2000:]}")
        found = re.search(r"^summary: (\d+)", dumps[0].read_text(), re.MULTILINE)
        if found is None:
            raise RuntimeError(f"no summary in {dumps[0]}")
        messages: int = args.messages
        return int(found.group(1)) // messages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client_path")
    parser.add_argument("--kind", choices=("ordered", "acked"), default="acked")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes")
    parser.add_argument("--headers", action="store_true", help="a traceparent and two more")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--side", choices=("both", *ALL_SIDES), default="both")
    parser.add_argument(
        "--floors",
        action="store_true",
        help="also the parser alone, and the parser with decoding (what both sides share)",
    )
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions with callgrind"
    )
    args = parser.parse_args(argv)
    shape = f"{args.kind}, {args.size:,} B{', headers' if args.headers else ''}"
    if args.instructions:
        if args.messages == parser.get_default("messages"):
            args.messages = 3_000  # (about 50 times slower under valgrind)
        sides = [*SIDES, *(FLOORS if args.floors else ())]
        counted = {side: instructions(args, side) for side in sides}
        print(f"{shape}: instructions per message, {args.messages:,} messages")
        for side, value in counted.items():
            print(f"  {side:8} {value:>9,}")
        print(f"  raw / goflux {counted['raw'] / counted['goflux']:.3f}")
        if args.floors:
            shared = counted["decoding"]
            own = {side: counted[side] - shared for side in SIDES}
            print(f"  own path (less decoding): goflux {own['goflux']:,}, raw {own['raw']:,}")
        return 0
    spent = asyncio.run(measure(args))
    print(f"{shape}: process CPU µs per message, {args.rounds} rounds of {args.messages:,}")
    for side, values in spent.items():
        print(f"  {side:8} median {statistics.median(values):7.2f}  min {min(values):7.2f}")
    if "goflux" in spent and "raw" in spent:
        paired = [raw / ours for raw, ours in zip(spent["raw"], spent["goflux"], strict=True)]
        print(f"  raw / goflux, median of rounds {statistics.median(paired):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
