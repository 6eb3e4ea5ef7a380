"""``HttpServer`` and ``listen``: the sockets the probes and the HTTP routes are served on."""

from __future__ import annotations

import asyncio
import socket
import statistics
import time

import httpx
import pytest

from goflux import StrCodec
from goflux.service._http import HttpServer, listen
from goflux.transports import http as ghttp
from tests.helpers import PeerPorts


async def test_connections_to_a_listening_socket_send_without_delay() -> None:
    """asyncio turns Nagle off (TCP_NODELAY) on accepted connections whose proto is TCP."""
    nodelay: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            nodelay.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    with listen("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP
        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname())
            assert await asyncio.wait_for(nodelay, 5) == 1
            writer.close()


async def test_a_reply_over_a_kept_alive_connection_waits_for_no_delayed_ack() -> None:
    """A reply is two writes (headers, body): with Nagle on, each waited 40 ms for an ACK."""
    responder = ghttp.Responder(StrCodec(), StrCodec())

    async def echo(text: str) -> str:
        return text

    await responder.start("echo", echo)
    async with HttpServer(responder.app, "127.0.0.1", 0) as server:
        url = f"http://127.0.0.1:{server.port}"
        async with httpx.AsyncClient(base_url=url) as http:  # one kept-alive connection
            took = []
            for n in range(20):
                started = time.perf_counter()
                assert (await http.post("/echo", content=str(n))).text == str(n)
                took.append(time.perf_counter() - started)
    assert statistics.median(took) < 0.030, f"median {statistics.median(took) * 1e3:.1f} ms"


@pytest.mark.slow  # idles 5.5 s: past the 5 s after which uvicorn's default drops it
async def test_an_idle_connection_stays_open_longer_than_clients_keep_theirs() -> None:
    """The client, not the server, drops an idle connection: none of its requests meets
    a server closing the connection it was sent on (a ReadError, maybe handled)."""
    app = PeerPorts()
    async with HttpServer(app, "127.0.0.1", 0) as server:
        limits = httpx.Limits(keepalive_expiry=60)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{server.port}", limits=limits
        ) as http:
            assert (await http.post("/a", content=b"1")).status_code == 204
            await asyncio.sleep(5.5)  # the idle time under test, not a wait for readiness
            assert (await http.post("/a", content=b"2")).status_code == 204
    assert len(app.ports) == 2
    assert app.ports[0] == app.ports[1], "the server closed an idle connection after 5 s"
