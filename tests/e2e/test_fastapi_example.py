"""examples/fastapi_orders.py end to end: a real uvicorn process, a real nats-server, HTTP.

The app is started as its docstring says (``uvicorn examples.fastapi_orders:app``), on a
free port read from uvicorn's own "running on" line (logged once the lifespan, and so
the goflux service, has started).
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import nats
import pytest
from nats.js import JetStreamContext

from goflux.testing import NatsServer
from tests.processes import ProcessLines

RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
DEADLINE = 5.0  # seconds for anything the app does asynchronously
WORK_MS = 150  # each order takes the handler this long: SIGTERM comes while it works


class Uvicorn(ProcessLines):
    """``uvicorn examples.fastapi_orders:app`` in its own process; stderr lines collected."""

    def __init__(self, nats_url: str, **env: str) -> None:
        super().__init__(
            [sys.executable, "-m", "uvicorn", "examples.fastapi_orders:app",
             "--host", "127.0.0.1", "--port", "0"],
            env={"NATS_URL": nats_url, **env},
            stderr_only=True,  # stdout is the access log
        )  # fmt: skip


@pytest.fixture
def server(nats_server: NatsServer) -> Iterator[Uvicorn]:
    app = Uvicorn(nats_server.url, FULFILMENT_WORK_MS=str(WORK_MS))
    try:
        yield app
    finally:
        app.stop()


@pytest.fixture
async def http(server: Uvicorn) -> AsyncIterator[httpx.AsyncClient]:
    port = int((await asyncio.to_thread(server.wait_for, RUNNING))[1])
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=DEADLINE) as client:
        yield client


@pytest.fixture
async def js(nats_server: NatsServer) -> AsyncIterator[JetStreamContext]:
    nc = await nats.connect(nats_server.url)
    yield nc.jetstream()
    await nc.close()


def order(order_id: str, amount: float = 12.5) -> dict[str, object]:
    return {"id": order_id, "customer": "ada", "amount": amount}


async def state_within(http: httpx.AsyncClient, order_id: str, state: str) -> None:
    """Poll ``GET /orders/{id}`` until it answers ``state`` (fail after DEADLINE)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        response = await http.get(f"/orders/{order_id}")
        assert response.status_code == 200, response.text
        if response.json() == {"id": order_id, "state": state}:
            return
        assert time.monotonic() < deadline, f"{order_id} still {response.json()}"


async def test_ready_once_started_with_the_subscription_and_connection_checks(
    http: httpx.AsyncClient, nats_server: NatsServer
) -> None:
    live = await http.get("/health/livez")
    assert live.status_code == 200
    ready = await http.get("/health/readyz")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["ready"] is True
    assert body["state"] == "running"
    checks = {check["name"]: (check["ok"], check["detail"]) for check in body["checks"]}
    assert checks["subscription to 'orders.created'"] == (True, "running")
    assert checks[f"connection to {nats_server.url}"] == (True, "connected")


async def test_an_order_is_stored_once_fulfilled_once_and_drained_on_sigterm(
    server: Uvicorn, http: httpx.AsyncClient, js: JetStreamContext
) -> None:
    created = await http.post("/orders", json=order("o-1"), headers={"Idempotency-Key": "k-1"})
    assert created.status_code == 202, created.text
    assert created.json() == {"id": "o-1", "sequence": 1, "duplicate": False}
    # The same process consumes it through the durable consumer.
    await state_within(http, "o-1", "fulfilled")

    # A client retrying the request: the server recognises the key, nothing new is stored.
    again = await http.post("/orders", json=order("o-1"), headers={"Idempotency-Key": "k-1"})
    assert again.status_code == 202, again.text
    assert again.json() == {"id": "o-1", "sequence": 1, "duplicate": True}
    assert (await http.get("/orders/o-404")).status_code == 404

    # More orders, and SIGTERM while the handler works on them: the drain finishes them.
    for n in range(2, 5):
        posted = await http.post(
            "/orders", json=order(f"o-{n}"), headers={"Idempotency-Key": f"k-{n}"}
        )
        assert posted.json() == {"id": f"o-{n}", "sequence": n, "duplicate": False}
    # The handler takes WORK_MS per order, one at a time: o-4 waits behind o-2 and o-3.
    assert (await http.get("/orders/o-4")).json() == {"id": "o-4", "state": "pending"}
    deadline = time.monotonic() + DEADLINE
    while (await js.consumer_info("ORDERS", "fulfilment")).num_ack_pending == 0:
        assert time.monotonic() < deadline, "the handler never got the orders"
        await js._nc.flush()  # each check is a round trip to the server
    server.process.send_signal(signal.SIGTERM)
    # uvicorn (0.29+) shuts down gracefully, then re-raises the signal it caught, so the
    # process ends "killed by SIGTERM" whether the shutdown went well or not: the log
    # tells. "Application shutdown complete" only follows a lifespan that stopped cleanly.
    assert await asyncio.to_thread(server.wait) == -signal.SIGTERM, server.output
    assert "Application shutdown complete." in server.output
    assert "Finished server process" in server.output
    assert "failed" not in server.output
    assert "Traceback" not in server.output

    stream = await js.stream_info("ORDERS")
    assert stream.state.messages == 4  # the retried order was stored once
    info = await js.consumer_info("ORDERS", "fulfilment")
    assert info.num_ack_pending == 0, info
    assert info.num_redelivered == 0, info
    assert info.ack_floor.stream_seq == info.delivered.stream_seq  # all handed out: acked
    assert info.ack_floor.stream_seq + info.num_pending == 4  # the rest never handed out
    # Each order was delivered once (so handled once): the consumer handed out as many
    # messages as it acked, in order, with no redelivery.
    assert info.delivered.consumer_seq == info.ack_floor.consumer_seq == info.delivered.stream_seq


async def test_bad_requests_are_refused_and_publish_nothing(
    http: httpx.AsyncClient, js: JetStreamContext
) -> None:
    no_key = await http.post("/orders", json=order("o-1"))
    assert no_key.status_code == 422, no_key.text
    assert no_key.json()["detail"][0]["loc"] == ["header", "idempotency-key"]
    empty_key = await http.post("/orders", json=order("o-1"), headers={"Idempotency-Key": ""})
    assert empty_key.status_code == 422, empty_key.text
    bad_body = await http.post(
        "/orders", json={"id": "o-1", "amount": "lots"}, headers={"Idempotency-Key": "k-1"}
    )
    assert bad_body.status_code == 422, bad_body.text
    assert {tuple(e["loc"]) for e in bad_body.json()["detail"]} == {
        ("body", "customer"),
        ("body", "amount"),
    }
    assert (await http.get("/orders/o-1")).status_code == 404
    assert (await js.stream_info("ORDERS")).state.messages == 0
