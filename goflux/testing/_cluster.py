"""A real nats-server cluster on loopback: routes, JetStream, and nodes to kill."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

from goflux.testing._server import NatsServer, NatsServerError

__all__ = ("NatsCluster",)


def _free_ports(count: int) -> list[int]:
    """Ports the kernel just handed out (held together, so they are distinct)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


async def _ignore(exc: Exception) -> None:
    """Connection errors of a readiness probe are expected: it retries."""


class NatsCluster:
    """``size`` nats-server processes on loopback, routed into one JetStream cluster.

    ::

        async with NatsCluster() as cluster:
            nc = await nats.connect(servers=cluster.urls)
            leader = await cluster.stream_leader(nc, "ORDERS")
            cluster.kill(leader)
            ...
            await cluster.restart(leader)

    Each node is a :class:`NatsServer` named ``n0``, ``n1``, ... with its own store, so
    a killed node restarts with its data. Entering the cluster waits until JetStream
    answers (a meta leader is elected), never a fixed sleep.

    Args:
        size: Number of nodes (3 gives R3 streams a quorum after losing one).
        name: The cluster name.
        args: Extra command-line arguments for every node.
        binary: Path of the nats-server binary; default: see ``find_nats_server``.
        startup_timeout: Seconds for all nodes to start and elect a JetStream leader.

    Raises:
        NatsServerNotFound: No nats-server binary is available.
        ValueError: ``size`` < 1.
    """

    def __init__(
        self,
        size: int = 3,
        *,
        name: str = "goflux",
        args: Sequence[str] = (),
        binary: str | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        if size < 1:
            raise ValueError(f"a cluster needs at least one node, got {size}")
        self.name = name
        self.startup_timeout = startup_timeout
        ports = _free_ports(2 * size)
        client_ports, route_ports = ports[:size], ports[size:]
        routes = ",".join(f"nats://127.0.0.1:{port}" for port in route_ports)
        self.nodes: list[NatsServer] = [
            NatsServer(
                port=client_ports[index],
                binary=binary,
                startup_timeout=startup_timeout,
                args=[
                    "--server_name",
                    self.node_name(index),
                    "--cluster_name",
                    name,
                    "--cluster",
                    f"nats://127.0.0.1:{route_ports[index]}",
                    "--routes",
                    routes,
                    *args,
                ],
            )
            for index in range(size)
        ]

    @staticmethod
    def node_name(index: int) -> str:
        """The server name of node ``index`` (as stream and consumer info report it)."""
        return f"n{index}"

    @property
    def urls(self) -> list[str]:
        """Every node's client URL, for ``nats.connect(servers=...)``."""
        return [node.url for node in self.nodes]

    def index_of(self, server_name: str) -> int:
        """The index of the node called ``server_name``.

        Raises:
            ValueError: No node has that name.
        """
        for index in range(len(self.nodes)):
            if self.node_name(index) == server_name:
                return index
        raise ValueError(f"no node is called {server_name!r}")

    # -------------------------------------------------------------- lifecycle

    async def start(self) -> Self:
        """Start every node, then wait until JetStream answers.

        Raises:
            NatsServerError: A node failed to start, or no JetStream leader was elected
                within ``startup_timeout``.
        """
        deadline = time.monotonic() + self.startup_timeout
        try:
            await asyncio.gather(*(node._start_async() for node in self.nodes))
            await self.wait_for_jetstream(deadline - time.monotonic())
        except BaseException:
            self.stop()
            raise
        return self

    async def wait_for_jetstream(self, timeout: float | None = None) -> None:
        """Wait until every running node answers a JetStream account request.

        Raises:
            NatsServerError: It did not within ``timeout`` seconds (default: the
                startup timeout).
        """
        import nats  # noqa: PLC0415 - goflux.testing works without nats-py installed

        limit = self.startup_timeout if timeout is None else max(timeout, 0.1)
        deadline = time.monotonic() + limit
        for node in self.nodes:
            if not node.running:
                continue
            nc = await nats.connect(
                node.url,
                allow_reconnect=False,
                max_reconnect_attempts=1,
                error_cb=_ignore,  # a node still joining may drop the probe
            )
            try:
                while True:
                    reply: Any = None
                    with contextlib.suppress(nats.errors.Error, TimeoutError):
                        reply = await nc.request("$JS.API.INFO", b"", timeout=1)
                    if reply is not None and "error" not in json.loads(reply.data):
                        break
                    if time.monotonic() > deadline:
                        raise NatsServerError(
                            f"JetStream on {node.url} did not answer within {limit}s:\n"
                            f"{node.log_tail()}"
                        )
                    await asyncio.sleep(0.1)  # the server has no signal to wait on
            finally:
                await nc.close()

    def stop(self) -> None:
        """Stop every node and delete their stores."""
        for node in self.nodes:
            node.stop()

    def kill(self, index: int) -> None:
        """SIGKILL node ``index`` (its store is kept for :meth:`restart`)."""
        self.nodes[index].kill()

    async def restart(self, index: int) -> None:
        """Start node ``index`` again with its ports and store.

        Raises:
            NatsServerError: It failed to become ready.
        """
        await self.nodes[index].restart()

    async def stream_leader(self, nc: Any, stream: str) -> int:
        """The index of the node leading ``stream`` (asked through connection ``nc``).

        Raises:
            NatsServerError: The stream has no leader right now.
        """
        info = await nc.jetstream().stream_info(stream)
        leader = info.cluster.leader if info.cluster is not None else None
        if not leader:
            raise NatsServerError(f"stream {stream!r} has no leader right now")
        return self.index_of(leader)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)

    def __repr__(self) -> str:
        running = sum(node.running for node in self.nodes)
        return f"NatsCluster({self.name!r}, {running}/{len(self.nodes)} nodes running)"
