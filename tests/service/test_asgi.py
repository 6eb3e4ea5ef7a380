"""goflux.asgi.ServiceLifespan against a real nats-server and a real ASGI server (uvicorn).

Most tests serve a small Starlette app with :class:`goflux.service._http.HttpServer`
(uvicorn in this event loop, lifespan off) and drive the lifespan themselves
(``async with life(app)``), so the same server answers before, during and after the
service runs. Two tests let uvicorn drive it (``lifespan="on"``), as in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import httpx
import nats
import pytest
import uvicorn
from nats.aio.client import Client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from goflux import GofluxError, Group, Message, Readiness, StrCodec, SubscribeError
from goflux.asgi import ServiceLifespan, ServiceNotRunning
from goflux.service._http import HttpServer
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports import nats as gnats

SUBJECT = "greetings"
DEADLINE = 5.0


@dataclass
class Greeter:
    """What the test service returns: its connection, a publisher, what its handler heard."""

    nc: Client
    publisher: gnats.Publisher[str]
    heard: asyncio.Queue[str] = field(default_factory=asyncio.Queue)


Service = Callable[[Group], Awaitable[Greeter]]


def greeter(url: str, connections: list[Client] | None = None) -> Service:
    """A service: owns a connection, subscribes to greetings, returns a publisher.

    Every connection it opens is appended to ``connections`` (to check it is closed).
    """

    async def service(group: Group) -> Greeter:
        nc = group.own(await nats.connect(url))
        if connections is not None:
            connections.append(nc)
        resources = Greeter(nc, group.own(gnats.Publisher(nc, StrCodec())))

        async def hear(msg: Message[str]) -> None:
            resources.heard.put_nowait(msg.payload)

        group.subscribe(group.own(gnats.Subscriber(nc, StrCodec())), SUBJECT, hear)
        return resources

    return service


def app_of(life: ServiceLifespan[Greeter]) -> Starlette:
    """``POST /greet/{name}`` publishes through the service and answers what it heard."""

    async def greet(request: Request) -> JSONResponse:
        try:
            resources = life.resources
        except ServiceNotRunning as exc:
            return JSONResponse({"error": str(exc)}, status_code=503)
        await resources.publisher.publish(SUBJECT, request.path_params["name"])
        heard = await asyncio.wait_for(resources.heard.get(), DEADLINE)
        return JSONResponse({"heard": heard})

    return Starlette(
        routes=[
            Route("/greet/{name}", greet, methods=["POST"]),
            Mount("/health", app=life.health),
        ],
        lifespan=life,
    )


@contextlib.asynccontextmanager
async def served(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """``app`` on a free port (uvicorn, lifespan off) and a client for it."""
    async with HttpServer(app, "127.0.0.1", 0) as server:
        base = f"http://127.0.0.1:{server.port}"
        async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as client:
            yield client


class _Uvicorn(uvicorn.Server):
    """uvicorn without its signal handlers (the test process keeps its own)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def uvicorn_with_lifespan(
    app: Starlette,
) -> AsyncIterator[tuple[_Uvicorn, asyncio.Task[None], httpx.AsyncClient]]:
    """``app`` served by uvicorn with ``lifespan="on"``: uvicorn runs the lifespan.

    The socket listens before uvicorn starts, so a request sent at once waits in the
    backlog until uvicorn serves, which it does only after the lifespan's startup.
    """
    sock = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(app, lifespan="on", log_config=None, access_log=False)
    server = _Uvicorn(config)

    async def serve() -> None:
        try:
            await server.serve(sockets=[sock])
        except SystemExit as exc:  # a failed startup: must not escape the event loop
            raise AssertionError(f"uvicorn exited with status {exc.code}") from exc

    task = asyncio.get_running_loop().create_task(serve())
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=DEADLINE) as client:
            yield server, task, client
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, DEADLINE)
        sock.close()


async def until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not await condition():
        assert time.monotonic() < deadline, f"not {what} within {DEADLINE}s"
        await asyncio.sleep(0)  # each check is itself a round trip (HTTP or NATS)


# ------------------------------------------------------------------ resources


async def test_resources_exist_only_between_startup_and_shutdown(
    nats_server: NatsServer,
) -> None:
    service = greeter(nats_server.url)
    life = ServiceLifespan(service)
    app = app_of(life)
    with pytest.raises(ServiceNotRunning, match=r"greeter\.<locals>\.service is not running"):
        _ = life.resources
    assert life.readiness() == Readiness("new")  # no group yet
    async with life(app):
        resources = life.resources
        assert isinstance(resources, Greeter)
        assert life.resources is resources  # the same object for every handler
        assert isinstance(life.group, Group)
        assert life.group.state == "running"
    with pytest.raises(ServiceNotRunning) as raised:
        _ = life.resources
    assert isinstance(raised.value, GofluxError)
    assert isinstance(raised.value, RuntimeError)
    assert life.group is None


async def test_readiness_is_new_before_ready_while_running_and_closed_after(
    nats_server: NatsServer,
) -> None:
    connections: list[Client] = []
    life = ServiceLifespan(greeter(nats_server.url, connections))
    app = app_of(life)
    async with served(app) as http:
        before = await http.get("/health/readyz")
        assert before.status_code == 503
        assert before.json() == {"ready": False, "state": "new", "checks": []}
        assert (await http.get("/health/livez")).status_code == 200
        refused = await http.post("/greet/ada")
        assert refused.status_code == 503
        assert "not running" in refused.json()["error"]

        async with life(app):
            during = await http.get("/health/readyz")
            assert during.status_code == 200, during.text
            body = during.json()
            assert body["state"] == "running"
            checks = {c["name"]: (c["ok"], c["detail"]) for c in body["checks"]}
            assert checks == {
                f"subscription to {SUBJECT!r}": (True, "running"),
                f"connection to {nats_server.url}": (True, "connected"),
            }
            # The app's handlers reach the service; its subscription hears them.
            greeted = await http.post("/greet/ada")
            assert greeted.status_code == 200, greeted.text
            assert greeted.json() == {"heard": "ada"}
            (nc,) = connections
            assert nc.is_connected

        after = await http.get("/health/readyz")
        assert after.status_code == 503
        assert after.json()["state"] == "new"
        assert (await http.post("/greet/ada")).status_code == 503
    assert nc.is_closed  # owned by the group: closed after the drain


async def test_uvicorn_runs_the_service_before_it_serves_the_first_request(
    nats_server: NatsServer,
) -> None:
    connections: list[Client] = []
    life = ServiceLifespan(greeter(nats_server.url, connections))
    async with uvicorn_with_lifespan(app_of(life)) as (server, task, http):
        first = await http.get("/health/readyz")  # sent before uvicorn has started
        assert first.status_code == 200, first.text
        assert server.started
        assert (await http.post("/greet/grace")).json() == {"heard": "grace"}
        server.should_exit = True
        await asyncio.wait_for(task, DEADLINE)
        (nc,) = connections
        assert nc.is_closed
        with pytest.raises(ServiceNotRunning):
            _ = life.resources


async def test_a_drain_is_bounded_by_drain_timeout(nats_server: NatsServer) -> None:
    stopping = asyncio.Event()

    async def service(group: Group) -> Greeter:
        resources = await greeter(nats_server.url)(group)

        async def stubborn() -> None:
            await group.until_stopping()
            stopping.set()
            await asyncio.Event().wait()  # never ends: cancelled at the deadline

        group.task(stubborn, on_stop="wait")
        return resources

    life = ServiceLifespan(service, drain_timeout=0.3)
    async with asyncio.timeout(DEADLINE):  # the default drain_timeout is 30 s
        async with life(app_of(life)):
            nc = life.resources.nc
            started = time.monotonic()
    assert stopping.is_set()
    assert time.monotonic() - started >= 0.25
    assert nc.is_closed


# ---------------------------------------------------------------- failures


async def test_a_service_that_raises_fails_the_startup_and_closes_what_it_owned(
    nats_server: NatsServer,
) -> None:
    connections: list[Client] = []

    async def service(group: Group) -> Greeter:
        connections.append(group.own(await nats.connect(nats_server.url)))
        raise ValueError("no configuration for the greeter")

    life = ServiceLifespan(service)
    with pytest.raises(ValueError, match="no configuration for the greeter"):
        async with life(app_of(life)):
            pytest.fail("the app must not start")
    (nc,) = connections
    assert nc.is_closed
    assert life.group is None
    assert life.readiness().state == "new"
    with pytest.raises(ServiceNotRunning):
        _ = life.resources


async def test_a_member_that_cannot_start_fails_the_startup_and_closes_what_was_owned(
    nats_server: NatsServer,
) -> None:
    connections: list[Client] = []

    async def service(group: Group) -> Greeter:
        resources = await greeter(nats_server.url, connections)(group)
        js = resources.nc.jetstream()
        await jetstream.ensure_stream(js, name="ORDERS", subjects=["orders.>"])
        missing = jetstream.Subscriber(js, StrCodec(), stream="ORDERS", consumer="nobody")
        group.subscribe(group.own(missing), "orders.>", lambda msg: asyncio.sleep(0))
        return resources

    life = ServiceLifespan(service)
    with pytest.raises(SubscribeError, match="consumer not found"):
        async with life(app_of(life)):
            pytest.fail("the app must not start")
    (nc,) = connections
    assert nc.is_closed
    with pytest.raises(ServiceNotRunning):
        _ = life.resources


async def test_uvicorn_refuses_to_serve_an_app_whose_service_fails(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    connections: list[Client] = []

    async def service(group: Group) -> Greeter:
        await greeter(nats_server.url, connections)(group)
        raise ValueError("no configuration for the greeter")

    life = ServiceLifespan(service)
    server = _Uvicorn(uvicorn.Config(app_of(life), lifespan="on", log_config=None))
    # Awaited here, not in a task of its own: uvicorn ends with sys.exit(3), and a
    # SystemExit raised in a task escapes the event loop.
    with socket.create_server(("127.0.0.1", 0)) as sock, pytest.raises(SystemExit) as exited:
        async with asyncio.timeout(DEADLINE):
            await server.serve(sockets=[sock])
    assert exited.value.code == 3  # uvicorn's STARTUP_FAILURE
    assert not server.started
    assert "Application startup failed" in caplog.text
    assert "no configuration for the greeter" in caplog.text
    (nc,) = connections
    assert nc.is_closed


async def test_a_group_started_twice_raises_runtime_error(nats_server: NatsServer) -> None:
    connections: list[Client] = []

    async def starts_it_itself(group: Group) -> Greeter:
        resources = await greeter(nats_server.url, connections)(group)
        await group.start()  # the lifespan starts it: a second start
        return resources

    life = ServiceLifespan(starts_it_itself)
    with pytest.raises(RuntimeError, match="a Group starts once"):
        async with life(app_of(life)):
            pytest.fail("the app must not start")
    (nc,) = connections
    assert nc.is_closed
    assert life.group is None


async def test_one_lifespan_runs_one_app_at_a_time(nats_server: NatsServer) -> None:
    connections: list[Client] = []
    life = ServiceLifespan(greeter(nats_server.url, connections))
    app = app_of(life)
    async with life(app):
        group = life.group
        with pytest.raises(RuntimeError, match="already running"):
            async with life(app):
                pytest.fail("a second run must not start")
        # The running one is untouched.
        assert life.group is group
        assert life.readiness().ready
        assert life.resources.nc is connections[0]
        assert len(connections) == 1
    assert connections[0].is_closed
    # Once stopped, it can run an app again.
    async with life(app):
        assert life.readiness().ready
    assert len(connections) == 2
    assert connections[1].is_closed


async def test_a_member_failing_while_the_app_runs_makes_it_unready_and_is_logged(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    explode = asyncio.Event()

    async def service(group: Group) -> Greeter:
        resources = await greeter(nats_server.url)(group)

        async def ledger() -> None:
            await explode.wait()
            raise OSError("the ledger disk is gone")

        group.task(ledger, name="ledger")
        return resources

    life = ServiceLifespan(service)
    app = app_of(life)
    # The shutdown (leaving the block) does not raise; it logs what failed.
    async with served(app) as http, life(app):
        assert (await http.get("/health/readyz")).status_code == 200
        explode.set()

        async def failed() -> bool:
            return bool((await http.get("/health/readyz")).json()["state"] == "failed")

        await until(failed, "failed")
        report = await http.get("/health/readyz")
        assert report.status_code == 503
        assert report.json()["failure"] == "OSError: the ledger disk is gone"
        assert (await http.get("/health/livez")).status_code == 200  # still serving
    failures = [r for r in caplog.records if r.name == "goflux.asgi"]
    assert [(r.levelno, r.getMessage()) for r in failures] == [
        (logging.ERROR, "the service failed while the app ran: OSError: the ledger disk is gone")
    ]


async def test_handlers_still_draining_at_shutdown_reach_the_resources(
    nats_server: NatsServer,
) -> None:
    working, finish = asyncio.Event(), asyncio.Event()
    outcome: list[str] = []

    async def service(group: Group) -> gnats.Publisher[str]:
        nc = group.own(await nats.connect(nats_server.url))
        publisher = group.own(gnats.Publisher(nc, StrCodec()))

        async def relay(msg: Message[str]) -> None:
            working.set()
            await finish.wait()  # still working when the app shuts down
            try:
                await life.resources.publish("relayed", msg.payload)
                outcome.append("relayed")
            except GofluxError as exc:
                outcome.append(type(exc).__name__)

        group.subscribe(group.own(gnats.Subscriber(nc, StrCodec())), "in", relay)
        return publisher

    life = ServiceLifespan(service)
    async with life(Starlette()):
        await life.resources.publish("in", "hello")
        await working.wait()
        # Released once leaving the block has begun the shutdown (the drain awaits it).
        asyncio.get_running_loop().call_soon(finish.set)
    assert outcome == ["relayed"]
    with pytest.raises(ServiceNotRunning):
        _ = life.resources
