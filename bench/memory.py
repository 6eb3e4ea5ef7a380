"""Peak memory of a consumer holding 10,000 messages in flight (received, decoded, unacked).

Each case runs in a fresh Python process (``python -m bench.memory CASE URL COUNT``)
so peaks do not mix: it connects, records its peak RSS, then takes ``COUNT`` messages
without acking any until it holds them all, records the peak again (with how many it
held: short of ``COUNT`` stops the run with ``CountError``), and acks them.
goflux holds them through ``Subscriber.stream`` (``max_in_flight=COUNT``); raw nats-py
keeps each ``Msg`` and its decoded model in a list, fed by the callback pull consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bench.harness import PATIENCE, check_count, wait_for
from bench.payload import ADAPTER, ORDER, Order
from bench.sizes import Sizes
from goflux import JsonCodec
from goflux.testing import NatsServer
from goflux.transports import jetstream

STREAM = "MEMBENCH"
SUBJECT = "membench.data"
RAW = "raw nats-py (Msg + model in a list)"
GOFLUX = "goflux Subscriber.stream"


def peak_kb() -> int:
    """This process's peak RSS in KiB.

    Linux's ``ru_maxrss`` keeps the peak of the process that forked us (it survives
    exec), so the kernel's high-water mark of our own memory comes first.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def hold_raw(js: JetStreamContext, count: int) -> None:
    nc = js._nc
    info = await js.add_consumer(
        STREAM, filter_subject=SUBJECT, ack_policy="explicit", max_ack_pending=count
    )
    inbox = nc.new_inbox()
    held: list[tuple[Msg, Order]] = []
    done = asyncio.Event()

    async def on_message(msg: Msg) -> None:
        if not msg.reply:
            return
        held.append((msg, ADAPTER.validate_json(msg.data)))
        if len(held) == count:
            done.set()

    sub = await nc.subscribe(inbox, cb=on_message, pending_msgs_limit=2 * count)
    request = json.dumps({"batch": count, "expires": 60_000_000_000}).encode()
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{info.name}", request, reply=inbox)
    await wait_for(done, lambda: len(held))
    print(json.dumps({"held": peak_kb(), "count": len(held)}), flush=True)
    for msg, _ in held:
        await msg.ack()
    await sub.unsubscribe()


async def hold_goflux(js: JetStreamContext, count: int) -> None:
    sub = jetstream.Subscriber(js, JsonCodec(Order), stream=STREAM, max_in_flight=count)
    held = []
    async with sub.stream(SUBJECT, buffer=count) as messages:

        async def take() -> None:
            async for message in messages:
                held.append(message)
                if len(held) == count:
                    return

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(take(), PATIENCE)
        print(json.dumps({"held": peak_kb(), "count": len(held)}), flush=True)
        for message in held:
            await message.ack()


async def child(case: str, url: str, count: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.stream_info(STREAM)
    print(json.dumps({"connected": peak_kb()}), flush=True)
    await (hold_goflux if case == "goflux" else hold_raw)(js, count)
    await nc.close()


@dataclass
class Peak:
    name: str
    connected_kb: int
    held_kb: int
    count: int

    @property
    def per_message(self) -> float:
        return (self.held_kb - self.connected_kb) * 1024 / self.count


def measure(case: str, url: str, count: int) -> tuple[int, int, int]:
    """Run one case in a fresh process: its peak RSS (KiB) connected and holding, and how
    many messages it held.

    Raises:
        CountError: The process held fewer than ``count`` messages.
    """
    out = subprocess.run(
        [sys.executable, "-m", "bench.memory", case, url, str(count)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    facts: dict[str, int] = {}
    for line in out.splitlines():
        facts.update(json.loads(line))
    check_count(f"memory, {case}: messages held", facts["count"], count)
    return facts["connected"], facts["held"], facts["count"]


def run(rounds: int, sizes: Sizes) -> dict[str, Peak]:
    server = NatsServer().start()
    try:

        async def setup() -> None:
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            await jetstream.ensure_stream(js, name=STREAM, subjects=["membench.>"])
            await jetstream.Publisher(js, JsonCodec(Order)).publish_many(
                (jetstream.Outgoing(SUBJECT, ORDER) for _ in range(sizes.in_flight)), window=1000
            )
            await nc.close()

        asyncio.run(setup())
        peaks: dict[str, list[tuple[int, int, int]]] = {"raw": [], "goflux": []}
        for _ in range(rounds):
            for case, samples in peaks.items():
                samples.append(measure(case, server.url, sizes.in_flight))
    finally:
        server.stop()
    names = {"raw": RAW, "goflux": GOFLUX}
    result = {}
    for case, samples in peaks.items():
        connected, held, count = sorted(samples, key=lambda s: s[1] - s[0])[len(samples) // 2]
        result[case] = Peak(names[case], connected, held, count)
    return result


def markdown(peaks: dict[str, Peak], sizes: Sizes) -> str:
    raw = peaks["raw"].per_message

    def versus(p: Peak) -> str:
        return f"{p.per_message / raw:.2f}" if raw > 0 else "n/a"

    lines = [
        f"### Memory: a consumer holding {sizes.in_flight:,} messages in flight",
        "",
        "Peak RSS of a fresh process, connected and then holding every message "
        "(median of the rounds by growth).",
        "",
        "| case | messages held | connected MiB | holding MiB | growth MiB | bytes per message "
        "| vs raw |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines.extend(
        f"| {p.name} | {p.count:,} | {p.connected_kb / 1024:.1f} | {p.held_kb / 1024:.1f} | "
        f"{(p.held_kb - p.connected_kb) / 1024:.1f} | {p.per_message:,.0f} | "
        f"{versus(p)} |"
        for p in peaks.values()
    )
    return "\n".join(lines)


if __name__ == "__main__":
    asyncio.run(child(sys.argv[1], sys.argv[2], int(sys.argv[3])))
