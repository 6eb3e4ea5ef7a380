"""The supervisor-worker link over a real socket pair."""

from __future__ import annotations

import asyncio
import socket

from goflux.service._link import WorkerLink, read_reports
from goflux.service._supervisor import _FleetReadiness, _Worker


async def test_a_worker_sees_its_supervisor_gone_even_when_it_died_with_lines_unread() -> None:
    supervisor, worker = socket.socketpair()
    link = WorkerLink(worker.detach())
    await link.open()
    link.send({"readiness": {"ready": True}})
    await link.flush()
    supervisor.close()  # lines unread: the worker's end gets a reset, not an end of file
    async with asyncio.timeout(5):
        await link.supervisor_gone()
    link.close()


async def test_reports_are_read_whatever_their_length_and_garbage_is_skipped() -> None:
    supervisor, worker = socket.socketpair()
    link = WorkerLink(worker.detach())
    await link.open()
    reader, writer = await asyncio.open_connection(sock=supervisor, limit=16 * 1024 * 1024)
    big = {"readiness": {"ready": True, "checks": ["x" * 100] * 2000}}  # ~200 KiB
    assert link._writer is not None
    link._writer.write(b"not json\n")
    link.send(big)
    link.send({"failed": "boom"})
    await link.flush()
    link.close()
    received: list[dict[str, object]] = []
    async with asyncio.timeout(5):
        await read_reports(reader, received.append)
    writer.close()
    assert received == [big, {"failed": "boom"}]


def test_a_dead_worker_is_not_reported_ready_by_its_last_report() -> None:
    dead = _Worker(1, report={"ready": True, "state": "running"})  # no process any more
    fleet = _FleetReadiness(stopping=False, workers=(dead,))
    assert fleet.ready is False
    assert fleet.as_dict()["workers"] == {
        "1": {"ready": False, "state": "running", "pid": None, "alive": False}
    }
