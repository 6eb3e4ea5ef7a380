"""The HTTP transport over loopback against the same work written by hand.

The servers run in a process of their own (``bench/http_server.py``: uvicorn, one
event loop, one port per app), the clients in this one: in one event loop the two
would take turns on one core, and the rate would measure their sum. Every app serves
``POST /orders.created`` (decode the order, count it, answer 204) and
``POST /pricing.quote`` (decode the order, answer 200 with it encoded):

- goflux: ``ghttp.Subscriber`` and ``ghttp.Responder`` on one router, reached by
  ``ghttp.Publisher`` and ``ghttp.Requester``;
- hand-written: Starlette ``Route`` endpoints decoding with the pydantic
  ``TypeAdapter``, reached by an ``httpx.AsyncClient`` posting the encoded order and
  checking the status (and decoding the reply);
- plain FastAPI endpoints with the model as their body, for reference, reached by the
  same hand-written client.

Two more rows pair goflux on one side with the hand-written other side, which shows
whether goflux's time goes to its client or its server.

Publish -> handler: ``http_concurrency`` publishers (tasks) send ``http_msgs`` orders
in all, each waiting for its answer; a case counts the orders the server's handler
got (read from the server before and after, inside the timed region). Request/reply:
``http_requests`` sequential requests, each timed from before the call to the decoded
reply; a case counts the replies equal to the order sent. CPU per operation is this
process's and the server process's together (``/proc/<pid>/stat``).

goflux runs with its telemetry not configured (OpenTelemetry's globals, no SDK), as a
service without OpenTelemetry set up would.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from bench.harness import Result, Table, interleave
from bench.latency import Latencies
from bench.payload import ADAPTER, ORDER, SIZE, Order
from bench.service import cpu_seconds
from bench.sizes import Sizes
from goflux import JsonCodec
from goflux.transports import http as ghttp

SUBJECT = "orders.created"
REQUEST_SUBJECT = "pricing.quote"
ROOT = Path(__file__).resolve().parent.parent

HAND = "hand-written httpx -> Starlette"
GOFLUX = "goflux Publisher -> Subscriber"
GOFLUX_SERVER = "hand-written httpx -> goflux Subscriber"
GOFLUX_CLIENT = "goflux Publisher -> hand-written Starlette"
FASTAPI = "hand-written httpx -> FastAPI endpoint"

HAND_RR = "hand-written httpx -> Starlette"
GOFLUX_RR = "goflux Requester -> Responder"
FASTAPI_RR = "hand-written httpx -> FastAPI endpoint"

JSON_HEADERS = {"content-type": "application/json"}
SERVER_NOTE = (
    "The servers run in a process of their own (uvicorn, h11), the clients in the "
    "benchmark's; CPU µs/op is both processes together."
)


class Servers:
    """``python -m bench.http_server``: its ports, its handler counts, its CPU."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.http_server"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(10)
            raise RuntimeError(f"bench.http_server exited ({self.process.returncode})")
        ports: dict[str, int] = json.loads(line)["ports"]
        self.urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}

    def handled(self, app: str) -> int:
        """Orders ``app``'s handler got so far."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write("count\n")
        self.process.stdin.flush()
        counts: dict[str, int] = json.loads(self.process.stdout.readline())
        return counts[app]

    def cpu(self) -> float:
        """CPU seconds the server process has used so far."""
        return cpu_seconds(self.process.pid)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


async def concurrently(count: int, tasks: int, send: Callable[[], Awaitable[object]]) -> None:
    """Call ``send`` ``count`` times from ``tasks`` tasks, each waiting for its answer."""
    left = count

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await send()

    await asyncio.gather(*(worker() for _ in range(tasks)))


def raw_post(client: httpx.AsyncClient, url: str) -> Callable[[], Awaitable[None]]:
    """The hand-written publish: encode, POST, refuse any answer but 204."""

    async def post() -> None:
        answer = await client.post(url, content=ADAPTER.dump_json(ORDER), headers=JSON_HEADERS)
        if answer.status_code != 204:
            raise RuntimeError(f"{url} answered {answer.status_code}: {answer.text[:200]}")

    return post


def raw_request(client: httpx.AsyncClient, url: str) -> Callable[[Order], Awaitable[Order]]:
    """The hand-written request: encode, POST, refuse any answer but 200, decode."""

    async def request(order: Order) -> Order:
        answer = await client.post(url, content=ADAPTER.dump_json(order), headers=JSON_HEADERS)
        if answer.status_code != 200:
            raise RuntimeError(f"{url} answered {answer.status_code}: {answer.text[:200]}")
        return ADAPTER.validate_json(answer.content)

    return request


async def handled_by(servers: Servers, app: str, sending: Awaitable[None]) -> int:
    """Run ``sending``; return how many orders ``app``'s handler got meanwhile."""
    before = servers.handled(app)
    await sending
    return servers.handled(app) - before


async def replies(request: Callable[[Order], Awaitable[Order]], count: int, out: Latencies) -> int:
    """``count`` sequential requests; their latencies (µs) go to ``out``; the right replies."""
    right = 0
    samples: list[float] = []
    clock = time.perf_counter
    for _ in range(count):
        began = clock()
        reply = await request(ORDER)
        samples.append((clock() - began) * 1e6)
        right += reply == ORDER
    out.samples += samples
    out.round_p50.append(statistics.median(samples))
    out.counts.append(right)
    return right


def run(rounds: int, sizes: Sizes) -> tuple[list[Table], list[str], dict[str, Latencies]]:
    """Both tables, the sections shown after them, and the request/reply latencies."""
    servers = Servers()
    loop = asyncio.new_event_loop()
    try:
        tables, latencies = _run(loop, servers, rounds, sizes)
    finally:
        loop.close()
        servers.close()
    return tables, [latency_markdown(latencies, sizes), cpu_markdown(tables)], latencies


def _run(
    loop: asyncio.AbstractEventLoop, servers: Servers, rounds: int, sizes: Sizes
) -> tuple[list[Table], dict[str, Latencies]]:
    urls = servers.urls
    codec = JsonCodec(Order)
    n, tasks, requests = sizes.http_msgs, sizes.http_concurrency, sizes.http_requests
    # Every client is made once: its connections stay open from round to round.
    client = httpx.AsyncClient()
    publisher = ghttp.Publisher(urls["goflux"], codec)
    to_starlette = ghttp.Publisher(urls["starlette"], codec)
    requester = ghttp.Requester(urls["goflux"], codec, codec)

    async def goflux_publish() -> None:
        await publisher.publish(SUBJECT, ORDER)

    async def to_starlette_publish() -> None:
        await to_starlette.publish(SUBJECT, ORDER)

    async def goflux_request(order: Order) -> Order:
        return await requester.request(REQUEST_SUBJECT, order)

    publishers: dict[str, tuple[str, Callable[[], Awaitable[object]]]] = {
        HAND: ("starlette", raw_post(client, f"{urls['starlette']}/{SUBJECT}")),
        GOFLUX: ("goflux", goflux_publish),
        GOFLUX_SERVER: ("goflux", raw_post(client, f"{urls['goflux']}/{SUBJECT}")),
        GOFLUX_CLIENT: ("starlette", to_starlette_publish),
        FASTAPI: ("fastapi", raw_post(client, f"{urls['fastapi']}/{SUBJECT}")),
    }
    requesters: dict[str, Callable[[Order], Awaitable[Order]]] = {
        HAND_RR: raw_request(client, f"{urls['starlette']}/{REQUEST_SUBJECT}"),
        GOFLUX_RR: goflux_request,
        FASTAPI_RR: raw_request(client, f"{urls['fastapi']}/{REQUEST_SUBJECT}"),
    }
    latencies = {name: Latencies(name) for name in requesters}

    def publish_case(app: str, send: Callable[[], Awaitable[object]]) -> Callable[[], int]:
        return lambda: loop.run_until_complete(
            handled_by(servers, app, concurrently(n, tasks, send))
        )

    def request_case(name: str) -> Callable[[], int]:
        return lambda: loop.run_until_complete(replies(requesters[name], requests, latencies[name]))

    async def warm_up() -> None:
        # Untimed: every client opens its connections, every path runs once.
        for _, send in publishers.values():
            await concurrently(tasks * 2, tasks, send)
        for request in requesters.values():
            for _ in range(10):
                await request(ORDER)

    try:
        loop.run_until_complete(warm_up())
        throughput = interleave(
            {name: publish_case(app, send) for name, (app, send) in publishers.items()},
            rounds,
            expected=n,
            peer_cpu=servers.cpu,
            alternate=True,
        )
        sequential = interleave(
            {name: request_case(name) for name in requesters},
            rounds,
            expected=requests,
            peer_cpu=servers.cpu,
            alternate=True,
        )
    finally:
        for closing in (
            client.aclose(),
            publisher.close(),
            to_starlette.close(),
            requester.close(),
        ):
            loop.run_until_complete(closing)
    for name, result in sequential.items():
        latencies[name].rates = list(result.rates)
    return _tables(throughput, sequential, sizes), latencies


def _tables(
    throughput: dict[str, Result], sequential: dict[str, Result], sizes: Sizes
) -> list[Table]:
    return [
        Table(
            "http_publish",
            f"HTTP publish -> handler over loopback ({sizes.http_concurrency} concurrent "
            f"publishers, {SIZE}-byte JSON)",
            throughput,
            HAND,
            note=SERVER_NOTE,
            versus="hand-written",
        ),
        Table(
            "http_request",
            f"HTTP request/reply over loopback, sequential ({SIZE}-byte JSON both ways)",
            sequential,
            HAND_RR,
            note=SERVER_NOTE,
            versus="hand-written",
        ),
    ]


def cpu_markdown(tables: list[Table]) -> str:
    """Where each case's CPU goes: the client process and the server process."""
    lines = [
        "### HTTP: CPU per operation, client and server process",
        "",
        "| table | case | client µs/op | server µs/op | both |",
        "|---|---|---:|---:|---:|",
    ]
    for table in tables:
        for r in table.results.values():
            server = statistics.median(r.peer_cpu_us)
            lines.append(
                f"| {table.key} | {r.name} | {r.cpu - server:.1f} | {server:.1f} | {r.cpu:.1f} |"
            )
    return "\n".join(lines)


def latency_markdown(results: dict[str, Latencies], sizes: Sizes) -> str:
    """Request/reply latency percentiles over all rounds."""
    lines = [
        f"### HTTP request/reply latency, sequential ({sizes.http_requests:,} requests per round)",
        "",
        "| case | replies per round | p50 µs | p99 µs | max µs | p50 per round (min-max) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines.extend(
        f"| {r.name} | {'/'.join(f'{c:,}' for c in sorted(set(r.counts)))} | "
        f"{r.percentile(0.5):,.0f} | {r.percentile(0.99):,.0f} | {max(r.samples):,.0f} | "
        f"{min(r.round_p50):,.0f}-{max(r.round_p50):,.0f} |"
        for r in results.values()
    )
    return "\n".join(lines)
