"""A poison message under ``goflux run --workers 2``: it crashes its worker, not the service.

Real processes: a nats-server, the supervisor and two workers of
``tests.service.services:poisoned``, whose handler kills its own process on the
message ``poison`` and appends every other message to a ledger file (one write each,
before the ack, so the ledger survives the crashes). The messages are published
right after ``goflux run`` starts, while the workers boot.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.js import JetStreamContext

from goflux import BytesCodec, StrCodec
from goflux.testing import NatsServer
from goflux.transports import jetstream
from tests.helpers import Inbox, drained
from tests.service.runner import GofluxRun
from tests.service.test_run_command import running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SERVICE = "tests.service.services:poisoned"
GOOD = [f"g-{n}" for n in range(20)]
ACK_WAIT = 2.0  # what a dead worker held comes back after this (1 s: a handler starved
# for a second on a loaded machine saw its message redelivered to the other worker)
CRASH = (
    r"worker (\d) \(pid (\d+)\) (?:exited with status 1|exited|was killed by SIGKILL) "
    r"while handling message 11 of stream 'POISON' \(consumer 'work'\)"
)


@pytest.fixture
async def js(nats_server: NatsServer) -> AsyncIterator[JetStreamContext]:
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name="POISON", subjects=["poison.>"])
    await jetstream.ensure_stream(js, name="DEAD", subjects=["dead.>"])
    await jetstream.ensure_consumer(
        js, stream="POISON", name="work", filter_subject="poison.orders", ack_wait=ACK_WAIT
    )
    yield js
    await nc.close()


@pytest.mark.parametrize(
    ("crash", "quarantine_after", "dead_letter"),
    [
        pytest.param("exit", 2, False, id="os._exit-default-terminated"),
        pytest.param("kill", 1, True, id="SIGKILL-after-1-dead-lettered"),
        pytest.param("sys.exit", 2, False, id="sys.exit()-status-0-terminated"),
    ],
)
async def test_a_poison_message_is_quarantined_and_the_others_handled_once(
    nats_server: NatsServer,
    js: JetStreamContext,
    tmp_path: Path,
    crash: str,
    quarantine_after: int,
    dead_letter: bool,
) -> None:
    ledger = tmp_path / "ledger.txt"
    env = {"NATS_URL": nats_server.url, "POISON_LEDGER": str(ledger), "POISON_CRASH": crash}
    if dead_letter:
        env["POISON_DEAD_LETTER"] = "dead.orders"
    args = ["--workers", "2"]
    if quarantine_after != 2:  # 2 is the default
        args += ["--quarantine-after", str(quarantine_after)]
    with GofluxRun(SERVICE, *args, env=env) as run:
        publisher = jetstream.Publisher(js, StrCodec())
        for payload in [*GOOD[:10], "poison", *GOOD[10:]]:
            await publisher.publish("poison.orders", payload)
        quarantined = await asyncio.to_thread(
            run.wait_for,
            r"poison message \d+ on 'poison.orders' quarantined, (.*?): (.*)",
            timeout=60,
        )
        async with asyncio.timeout(60):
            await drained(js, "POISON", "work")
        # Each worker is back (a crashed one restarted) and ready; the supervisor runs on.
        crashes = re.findall(CRASH, run.output)
        for worker in ("1", "2"):
            dead = "|".join(pid for w, pid in crashes if w == worker) or "0"
            pid = await asyncio.to_thread(
                run.wait_for, rf"worker {worker} started \(pid (?!(?:{dead})\b)(\d+)\)"
            )
            await asyncio.to_thread(run.wait_for, rf"worker {worker} \(pid {pid[1]}\) is ready")
            assert running(int(pid[1]))
        assert run.process.poll() is None, run.output
        output = run.output
        run.signal(signal.SIGTERM)
        assert await asyncio.to_thread(run.wait) == 0, run.output

    handled = Counter(line.split()[0] for line in ledger.read_text().splitlines())
    assert handled == Counter(GOOD), "a good message was lost or handled twice"

    # Every worker exit was a crash on the poison, and was followed by a restart.
    assert crashes == re.findall(CRASH, output)
    assert len(crashes) == quarantine_after, output
    assert len(re.findall(r"goflux.run: worker \d \(pid \d+\) (?:exited|was)", output)) == len(
        crashes
    )
    assert run.count("restarting worker") == len(crashes)
    assert "giving up" not in output
    starts = re.findall(r"worker (\d) started \(pid (\d+)\)", output)
    for worker in ("1", "2"):
        pids = [pid for w, pid in starts if w == worker]
        crashed = [pid for w, pid in crashes if w == worker]
        assert pids[:-1] == crashed, output  # each process but the last died on the poison
    healthy = [w for w in ("1", "2") if not any(w == crashed for crashed, _ in crashes)]
    if quarantine_after == 1:  # one crash: the other worker never stopped
        assert len(healthy) == 1, output
    for worker in healthy:
        (pid,) = [pid for w, pid in starts if w == worker]
        assert f"worker {worker} (pid {pid}) is ready" in output

    outcome, why = quarantined.groups()
    assert why.startswith(
        f"message 11 of stream 'POISON' (consumer 'work') was being handled each time its "
        f"worker process died, {quarantine_after} times (last: worker "
    )
    dead = (await js.stream_info("DEAD")).state.messages
    if not dead_letter:
        assert outcome == "terminated"
        assert dead == 0
        return
    assert outcome == "dead-lettered to 'dead.orders' and terminated"
    assert dead == 1
    letters = Inbox[bytes]()
    reader = jetstream.Subscriber(js, BytesCodec(), stream="DEAD")
    await reader.start("dead.orders", letters)
    (letter,) = await letters.wait_for(1)
    await reader.close()
    assert letter.payload == b"poison"
    assert letter.headers["Dead-Letter-Reason"] == "crashed_worker"
    assert letter.headers["Dead-Letter-Error-Type"] == "goflux.PoisonMessage"
    assert letter.headers["Dead-Letter-Sequence"] == "11"
    assert letter.headers["Dead-Letter-Delivery-Count"] == str(quarantine_after + 1)
