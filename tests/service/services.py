"""Services for the ``goflux run`` tests, steered by environment variables."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path

import nats

from goflux import BytesCodec, DeadLetter, Group, Message, StrCodec
from goflux.transports import channel, jetstream


async def gated(group: Group) -> None:
    """Subscribe to ``work.>`` only after a message arrives on the stream GATE.

    Until then the group has not started, so ``/readyz`` must say 503.
    """
    nc = group.own(
        await nats.connect(
            os.environ["NATS_URL"], max_reconnect_attempts=-1, reconnect_time_wait=0.1
        )
    )
    js = nc.jetstream()
    gate = await js.subscribe("gate.open", ordered_consumer=True)
    await gate.next_msg(timeout=60)
    await gate.unsubscribe()
    await jetstream.ensure_stream(js, name="WORK", subjects=["work.>"])
    subscriber = group.own(jetstream.Subscriber(js, BytesCodec(), stream="WORK"))

    async def handle(msg: Message[bytes]) -> None:
        return None

    group.subscribe(subscriber, "work.>", handle)


async def broken_at_start(group: Group) -> None:
    """Fail while starting, after owning a connection."""
    group.own(await nats.connect(os.environ["NATS_URL"]))
    raise ConnectionRefusedError("the ledger database refused the connection")


def _note(event: str) -> None:
    """Append ``<event> <worker> <pid> <seconds since boot>`` to the file ``CRASH_LOG``.

    For ``start``, the time is when the kernel started this process (from
    /proc/self/stat), not when this code ran; for ``crash``, now. Both on the clock
    since boot, so that a test reads the real time between a crash and the restart.
    """
    path = os.environ.get("CRASH_LOG")
    if not path:
        return
    if event == "start":
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        at = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in ticks
    else:
        at = time.clock_gettime(time.CLOCK_BOOTTIME)
    worker = os.environ.get("GOFLUX_WORKER_ID")
    with open(path, "a") as file:
        file.write(f"{event} {worker} {os.getpid()} {at:.3f}\n")


async def crashing(group: Group) -> None:
    """Run, then make the whole process die hard (like a segfault) after a moment.

    ``CRASH_WORKERS`` (default 1) name the workers that crash, ``CRASH_AFTER`` the
    seconds of running before (``start``: at once, before the group starts, so before
    the worker is ready); with ``CRASH_LOG``, starts and crashes are noted there.
    """
    _note("start")

    async def crash() -> None:
        await asyncio.sleep(float(os.environ.get("CRASH_AFTER", "0.3")))
        _note("crash")
        os._exit(3)

    async def idle() -> None:
        await asyncio.Event().wait()

    group.task(idle, name="idle")
    if os.environ.get("GOFLUX_WORKER_ID") in os.environ.get("CRASH_WORKERS", "1").split(","):
        if os.environ.get("CRASH_AFTER") == "start":
            _note("crash")
            os._exit(3)
        group.task(crash, name="crash")


async def failing_member(group: Group) -> None:
    """A member fails while running: the worker exits 1 with the reason."""

    async def fail() -> None:
        raise RuntimeError("the tax table is corrupt")

    group.task(fail, name="tax update")


not_a_function = 42


def not_async(group: Group) -> None:
    """A plain function: refused."""


class Marker:
    """Writes ``closed <pid>`` to a file in ``MARKER_DIR`` when the group closes it."""

    async def close(self) -> None:
        path = os.path.join(os.environ["MARKER_DIR"], f"closed-{os.getpid()}")
        with open(path, "w") as file:  # noqa: ASYNC230 - a tiny file, once
            file.write("closed after the drain\n")


async def idle(group: Group) -> None:
    """Runs until stopped; records its drain through an owned resource."""
    group.own(Marker())
    group.task(asyncio.Event().wait, name="idle")


def _sleep_a_minute() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # forked from a loop that handles it
    time.sleep(60)


async def forking(group: Group) -> None:
    """Fork a helper (it inherits every descriptor), then crash once; run normally after.

    The helper's pid goes to ``FORK_DIR``/helpers so the test can end it.
    """
    directory = os.environ["FORK_DIR"]
    helper = multiprocessing.get_context("fork").Process(target=_sleep_a_minute, daemon=True)
    helper.start()
    with open(os.path.join(directory, "helpers"), "a") as file:  # noqa: ASYNC230
        file.write(f"{helper.pid}\n")
    crashed = os.path.join(directory, "crashed")

    async def crash_once() -> None:
        try:  # the first worker process to get here crashes; no other does
            os.close(os.open(crashed, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        await asyncio.sleep(0.2)  # a moment of running, then a hard crash
        os._exit(3)

    group.task(crash_once, name="crash once")
    group.task(asyncio.Event().wait, name="idle")


async def crowded(group: Group) -> None:
    """A thousand subscriptions: the readiness report is far longer than 64 KiB."""
    bus: channel.Bus[str] = channel.Bus(codec=StrCodec())
    subscriber = channel.Subscriber(bus)

    async def handle(msg: Message[str]) -> None:
        return None

    for n in range(1000):
        group.subscribe(subscriber, f"a.rather.long.subject.name.number.{n:04d}", handle)


async def chatty(group: Group) -> None:
    """Log 50 lines of 20 kB each, then idle: far over a pipe's atomic write size."""
    log = logging.getLogger("chatty")

    async def talk() -> None:
        for n in range(50):
            log.info("line %d %s", n, "x" * 20_000)
        await asyncio.Event().wait()

    group.task(talk, name="talk")


async def stubborn(group: Group) -> None:
    """A task that swallows cancellation: the drain can never finish."""

    async def refuse() -> None:
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                continue

    group.task(refuse, name="refuse")


async def empty(group: Group) -> None:
    """Adds nothing: a mistake ``goflux run`` should name."""


class _Owned:
    """A resource that says when it is closed (on stdout's log)."""

    async def close(self) -> None:
        logging.getLogger("services").info("owned resource closed")


async def slow_start_up(group: Group) -> None:
    """A start-up function that waits forever (provisioning against a stuck server)."""
    group.own(_Owned())

    async def provision() -> None:
        logging.getLogger("services").info("provisioning")
        await asyncio.Event().wait()

    async def never() -> None:
        logging.getLogger("services").info("second start-up function ran")

    group.on_start(provision)
    group.on_start(never)
    group.task(asyncio.Event().wait, name="ticker")


async def poisoned(group: Group) -> None:
    """Orders from the durable consumer ``work`` of the stream POISON, one of them poison.

    The order ``poison`` kills the process handling it: ``os._exit(1)`` with
    ``POISON_CRASH=exit``, else SIGKILL. Every other order is appended to the file
    ``POISON_LEDGER`` as ``<order> <pid> <delivery count>``, one ``os.write`` before
    its ack, so the ledger survives any crash. With ``POISON_DEAD_LETTER``, the
    subscriber dead-letters to that subject.
    """
    nc = group.own(await nats.connect(os.environ["NATS_URL"]))
    js = nc.jetstream()
    dead_letter = None
    if subject := os.environ.get("POISON_DEAD_LETTER"):
        dead_letter = DeadLetter(group.own(jetstream.Publisher(js, BytesCodec())), subject)
    subscriber = group.own(
        jetstream.Subscriber(
            js, StrCodec(), stream="POISON", consumer="work", dead_letter=dead_letter
        )
    )
    ledger = os.open(os.environ["POISON_LEDGER"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    async def handle(msg: Message[str]) -> None:
        await asyncio.sleep(0.001)  # looks the order up
        if msg.payload == "poison":
            if os.environ.get("POISON_CRASH") == "exit":
                os._exit(1)
            if os.environ.get("POISON_CRASH") == "sys.exit":
                sys.exit()  # status 0: not the service ending, a crash mid-message
            os.kill(os.getpid(), signal.SIGKILL)
        delivered = msg.delivery.num_delivered if msg.delivery else 0
        os.write(ledger, f"{msg.payload} {os.getpid()} {delivered}\n".encode())

    group.subscribe(subscriber, "poison.orders", handle)
