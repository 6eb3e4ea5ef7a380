"""The probes' ASGI app, served by uvicorn (HttpServer) and read with a real HTTP client."""

from __future__ import annotations

import asyncio
import socket
import statistics
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from goflux import Check, Readiness
from goflux.service import health_app
from goflux.service._http import HttpServer, listen


class Switch:
    """A readiness that a test flips."""

    def __init__(self) -> None:
        self.report = Readiness("starting")

    def __call__(self) -> Readiness:
        return self.report


@pytest.fixture
async def probes() -> AsyncIterator[tuple[str, Switch]]:
    switch = Switch()
    app = health_app(switch, liveness=lambda: {"pid": 7})
    async with HttpServer(app, "127.0.0.1", 0) as server:
        yield f"http://127.0.0.1:{server.port}", switch


async def test_readyz_answers_the_report_with_503_until_ready(
    probes: tuple[str, Switch],
) -> None:
    base, switch = probes
    async with httpx.AsyncClient() as http:
        live = await http.get(f"{base}/livez")
        assert (live.status_code, live.json()) == (200, {"live": True, "pid": 7})
        starting = await http.get(f"{base}/readyz")
        assert starting.status_code == 503
        assert starting.json() == {"ready": False, "state": "starting", "checks": []}
        assert starting.headers["content-type"] == "application/json"
        assert starting.headers["cache-control"] == "no-store"

        switch.report = Readiness("running", (Check("subscription to 'a'", True, "running"),))
        running = await http.get(f"{base}/readyz")
        assert running.status_code == 200
        assert running.json()["checks"] == [
            {"name": "subscription to 'a'", "ok": True, "detail": "running"}
        ]

        switch.report = Readiness("running", (Check("connection", False, "reconnecting"),))
        assert (await http.get(f"{base}/readyz")).status_code == 503
        head = await http.head(f"{base}/readyz")
        assert (head.status_code, head.content) == (503, b"")


async def test_other_paths_and_methods_are_refused(probes: tuple[str, Switch]) -> None:
    base, _ = probes
    async with httpx.AsyncClient() as http:
        missing = await http.get(f"{base}/healthz")
        assert missing.status_code == 404
        assert "/livez or /readyz" in missing.json()["error"]
        assert (await http.post(f"{base}/readyz")).status_code == 405
        assert (await http.get(f"{base}/livez/")).status_code == 200  # a trailing slash is fine


async def test_mounted_under_a_prefix_in_a_starlette_app() -> None:
    switch = Switch()
    switch.report = Readiness("running")
    app = Starlette(routes=[Mount("/health", app=health_app(switch))])
    async with HttpServer(app, "127.0.0.1", 0) as server, httpx.AsyncClient() as http:
        base = f"http://127.0.0.1:{server.port}"
        assert (await http.get(f"{base}/health/readyz")).status_code == 200
        assert (await http.get(f"{base}/health/livez")).json() == {"live": True}
        assert (await http.get(f"{base}/readyz")).status_code == 404  # Starlette's own


async def test_a_port_in_use_fails_at_once() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match="in use"):
            async with HttpServer(health_app(Switch()), "127.0.0.1", port):
                pass


async def test_connections_send_without_delay() -> None:
    # asyncio sets TCP_NODELAY only on sockets whose listener says it is TCP (proto 6).
    nodelay: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        nodelay.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    listener = listen("127.0.0.1", 0)
    assert listener.proto == socket.IPPROTO_TCP
    async with await asyncio.start_server(accepted, sock=listener):
        _, writer = await asyncio.open_connection(*listener.getsockname())
        async with asyncio.timeout(10):
            assert await nodelay != 0
        writer.close()


async def test_answers_on_a_kept_alive_connection_are_not_held_back(
    probes: tuple[str, Switch],
) -> None:
    # Without TCP_NODELAY, uvicorn's body (written after the head) waits for the
    # client's delayed ACK: about 40 ms for every request after a connection's first.
    base, _ = probes
    took: list[float] = []
    async with httpx.AsyncClient() as http:
        await http.get(f"{base}/livez")
        for _ in range(20):
            began = time.perf_counter()
            await http.get(f"{base}/livez")
            took.append(time.perf_counter() - began)
    assert statistics.median(took) < 0.02, f"median {statistics.median(took) * 1000:.1f} ms"
