"""``goflux run --health-port``: /readyz follows the service, alone and under a supervisor."""

from __future__ import annotations

import asyncio
import signal

import httpx
import nats
import pytest

from goflux.testing import NatsServer
from tests.service.probes import until_status
from tests.service.runner import GofluxRun

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def subscription_check(report: dict[str, object]) -> dict[str, object]:
    """The check of the subscription to work.> in a worker's report."""
    checks = report["checks"]
    assert isinstance(checks, list)
    return next(c for c in checks if c["name"] == "subscription to 'work.>'")


def worker_reports(body: dict[str, object]) -> list[dict[str, object]]:
    workers = body.get("workers")
    return list(workers.values()) if isinstance(workers, dict) else [body]


@pytest.mark.parametrize("workers", [1, 2])
async def test_readyz_is_503_until_subscribed_and_while_the_server_restarts(
    nats_server: NatsServer, workers: int
) -> None:
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await js.add_stream(name="GATE", subjects=["gate.>"])
    args = ("tests.service.services:gated", "--workers", str(workers), "--drain-timeout", "5")
    probes = ("--health-port", "0", "--health-host", "127.0.0.1")
    with GofluxRun(*args, *probes, env={"NATS_URL": nats_server.url}) as run:
        base = await asyncio.to_thread(run.health_url)
        async with httpx.AsyncClient(timeout=5) as http, asyncio.timeout(60):
            live = await http.get(f"{base}/livez")
            assert live.status_code == 200
            assert live.json()["live"] is True

            # The service waits at its gate: nothing subscribed, so not ready.
            before = await http.get(f"{base}/readyz")
            assert before.status_code == 503
            assert before.json()["ready"] is False
            await js.publish("gate.open", b"")
            running = (await until_status(http, f"{base}/readyz", 200)).json()
            assert running["ready"] is True
            for report in worker_reports(running):
                assert report["state"] == "running"
                assert subscription_check(report)["ok"] is True
            await nc.close()

            nats_server.kill()
            down = (await until_status(http, f"{base}/readyz", 503)).json()
            details = [c for r in worker_reports(down) for c in r.get("checks", [])]
            assert any(not c["ok"] and "reconnecting" in c["detail"] for c in details), down
            assert (await http.get(f"{base}/livez")).status_code == 200

            await nats_server.restart()
            await until_status(http, f"{base}/readyz", 200)
        run.signal(signal.SIGTERM)
        assert await asyncio.to_thread(run.wait) == 0, run.output
