"""A real nats-server cluster on loopback: routes, JetStream, and nodes to kill."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import tempfile
import time
import urllib.request
import uuid
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from goflux.testing._server import NatsServer, NatsServerError

__all__ = ("NatsCluster",)

_POLL = 0.05  # seconds between two looks at the servers' state while waiting for it


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


# The monitoring port is on loopback: never through an HTTP proxy from the environment.
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get_json(url: str) -> Any:
    with _LOOPBACK.open(url, timeout=2) as response:
        return json.load(response)


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
    a killed node restarts with its data, and its own configuration file (its name,
    cluster routes and monitoring port), which :meth:`reload` changes on a running
    node. Entering the cluster, and :meth:`restart`, return once the JetStream meta
    group is whole (see :meth:`wait_for_jetstream`): every running node follows one
    meta leader, which sees every other running node current, so streams of any
    replica count can be placed at once. Readiness is read from each node's
    monitoring endpoint (``/jsz``), never a fixed sleep.

    Creating a replicated stream or consumer is answered once its Raft group has
    elected a leader. On a loaded machine the first election can be lost, and the
    next waits out nats-server's election timeout (4-9 s), longer than nats-py's
    default JetStream API timeout of 5 s: provision through
    ``nc.jetstream(timeout=NatsCluster.PROVISION_TIMEOUT)``, which waits for that
    answer through a second election round.

    Args:
        size: Number of nodes (3 gives R3 streams a quorum after losing one).
        name: The cluster name.
        args: Extra command-line arguments for every node.
        binary: Path of the nats-server binary; default: see ``find_nats_server``.
        startup_timeout: Seconds for all nodes to start and the meta group to form
            (and for a restarted node to rejoin it).

    Attributes:
        nodes: The servers, node ``i`` named ``node_name(i)``.
        monitor_ports: Each node's HTTP monitoring port (see :meth:`monitor_url`).

    Raises:
        NatsServerNotFound: No nats-server binary is available.
        ValueError: ``size`` < 1.
    """

    PROVISION_TIMEOUT = 20.0
    """Seconds to wait for the answer to a stream or consumer creation (see above)."""

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
        ports = _free_ports(3 * size)
        client_ports, route_ports = ports[:size], ports[size : 2 * size]
        self.monitor_ports = ports[2 * size :]
        routes = ", ".join(json.dumps(f"nats://127.0.0.1:{port}") for port in route_ports)
        # Settings live in a file, not on the command line: nats-server re-reads only
        # the file on a reload, and refuses one that would drop the name or cluster.
        self._configs = [
            f"server_name: {json.dumps(self.node_name(index))}\n"
            f"http_port: {self.monitor_ports[index]}\n"
            "cluster {\n"
            f"  name: {json.dumps(name)}\n"
            f'  listen: "127.0.0.1:{route_ports[index]}"\n'
            f"  routes: [{routes}]\n"
            "}\n"
            for index in range(size)
        ]
        self._settings = [""] * size  # what reload() added to each node's configuration
        # Created on start; removed on stop (or when the cluster is garbage collected).
        self._config_dir = Path(tempfile.gettempdir()) / f"goflux-cluster-{uuid.uuid4().hex}"
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._config_dir, True)
        self.nodes: list[NatsServer] = [
            NatsServer(
                port=client_ports[index],
                binary=binary,
                startup_timeout=startup_timeout,
                args=["--config", str(self.config_file(index)), *args],
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

    def monitor_url(self, index: int) -> str:
        """The HTTP monitoring URL of node ``index`` (``/jsz``, ``/varz``, ...)."""
        return f"http://127.0.0.1:{self.monitor_ports[index]}"

    def config_file(self, index: int) -> Path:
        """The configuration file of node ``index`` (written when the cluster starts)."""
        return self._config_dir / f"{self.node_name(index)}.conf"

    def _write_config(self, index: int) -> None:
        text = self._configs[index]
        if self._settings[index]:
            text += f"# added by reload()\n{self._settings[index]}\n"
        self.config_file(index).write_text(text)

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
        """Start every node, then wait until the JetStream meta group is whole.

        Raises:
            NatsServerError: A node failed to start, or the meta group was not whole
                within ``startup_timeout`` (the error says what was missing).
        """
        deadline = time.monotonic() + self.startup_timeout
        try:
            self._config_dir.mkdir(mode=0o700, exist_ok=True)
            for index in range(len(self.nodes)):
                self._write_config(index)
            await asyncio.gather(*(node._start_async() for node in self.nodes))
            await self.wait_for_jetstream(deadline - time.monotonic())
        except BaseException:
            self.stop()
            raise
        return self

    async def wait_for_jetstream(self, timeout: float | None = None) -> None:
        """Wait until the JetStream meta group is whole and every running node answers.

        Whole means, read from every running node's ``/jsz``: all name the same meta
        leader, a running node (a restarted node learns the leader only by hearing
        from it); the leader sees every other running node current (caught up with
        the meta log); and no node sees a running peer offline or unknown, which is
        what placing a stream on those nodes needs ("no suitable peers for
        placement, peer offline" otherwise). Killed nodes are left out. Then each
        running node must answer a JetStream request.

        Raises:
            NatsServerError: It was not within ``timeout`` seconds (default: the
                startup timeout); the message names what was not ready and ends with
                the server logs.
        """
        limit = self.startup_timeout if timeout is None else max(timeout, 0.1)
        deadline = time.monotonic() + limit
        running = [index for index, node in enumerate(self.nodes) if node.running]
        not_ready = "no node is running"
        while running:
            views = await asyncio.gather(*(self._jsz(index) for index in running))
            not_ready = self._meta_not_ready(running, dict(zip(running, views, strict=True)))
            if not not_ready:
                break
            if time.monotonic() > deadline:
                raise NatsServerError(
                    f"JetStream meta group of cluster {self.name!r} not ready within "
                    f"{limit}s: {not_ready}\n{self._log_tails(running)}"
                )
            await asyncio.sleep(_POLL)  # the state is polled: the server pushes no event
        if not running:
            raise NatsServerError(f"cluster {self.name!r}: {not_ready}")
        for index in running:
            await self._wait_for_api(index, deadline, limit)

    async def _jsz(self, index: int) -> dict[str, Any] | str:
        """Node ``index``'s ``/jsz`` report, or why it gave none."""
        try:
            report: dict[str, Any] = await asyncio.to_thread(
                _get_json, self.monitor_url(index) + "/jsz"
            )
        except (OSError, ValueError) as exc:  # not listening yet, or a partial answer
            return f"no /jsz answer ({exc})"
        return report

    def _meta_not_ready(self, running: list[int], views: dict[int, dict[str, Any] | str]) -> str:
        """What keeps the meta group of the ``running`` nodes from being whole ("" if not)."""
        return "; ".join(self._meta_problems(running, views))

    def _meta_problems(
        self, running: list[int], views: dict[int, dict[str, Any] | str]
    ) -> Iterator[str]:
        metas: dict[str, dict[str, Any]] = {}
        for index, view in views.items():
            meta = view.get("meta_cluster") if isinstance(view, dict) else None
            if isinstance(view, str):
                yield f"{self.node_name(index)}: {view}"
            elif not isinstance(meta, dict):
                yield f"{self.node_name(index)}: JetStream is not clustered (yet)"
            else:
                metas[self.node_name(index)] = meta
        if len(metas) < len(views):
            return
        running_names = {self.node_name(index) for index in running}
        leaders = {node: meta.get("leader") or "none" for node, meta in metas.items()}
        leader = leaders[self.node_name(running[0])]
        if leader not in running_names or set(leaders.values()) != {leader}:
            seen = ", ".join(f"{node}: {name}" for node, name in sorted(leaders.items()))
            yield f"no meta leader that every running node follows (leaders seen: {seen})"
            return
        for node, meta in sorted(metas.items()):
            peers = {peer.get("name"): peer for peer in meta.get("replicas") or []}
            for other in sorted(running_names - {node}):
                peer = peers.get(other)
                if peer is None:
                    yield f"{node} does not know {other} as a meta group peer yet"
                elif peer.get("offline"):
                    yield f"{node} sees {other} offline"
                elif node == leader and not peer.get("current"):
                    yield f"meta leader {leader} does not see {other} current yet"

    async def _wait_for_api(self, index: int, deadline: float, limit: float) -> None:
        """Wait until node ``index`` answers a JetStream account request."""
        import nats  # noqa: PLC0415 - goflux.testing works without nats-py installed

        node = self.nodes[index]
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
                    return
                if time.monotonic() > deadline:
                    raise NatsServerError(
                        f"JetStream on {node.url} did not answer within {limit}s:\n"
                        f"{node.log_tail()}"
                    )
                await asyncio.sleep(_POLL)  # the state is polled: the server pushes no event
        finally:
            await nc.close()

    def _log_tails(self, indexes: list[int]) -> str:
        return "\n".join(
            f"--- {self.node_name(index)} log:\n{self.nodes[index].log_tail()}" for index in indexes
        )

    def stop(self) -> None:
        """Stop every node and delete their stores and configuration files."""
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self._config_dir, ignore_errors=True)

    def kill(self, index: int) -> None:
        """SIGKILL node ``index`` (its store is kept for :meth:`restart`)."""
        self.nodes[index].kill()

    async def restart(self, index: int) -> None:
        """Start node ``index`` again with its ports and store, and wait until it rejoined.

        Returns once the meta group is whole again with the node in it (see
        :meth:`wait_for_jetstream`). Its stream and consumer replicas may still be
        catching up: see :meth:`wait_for_stream`.

        Raises:
            NatsServerError: It failed to start, or the meta group was not whole
                within ``startup_timeout``.
        """
        deadline = time.monotonic() + self.startup_timeout
        await self.nodes[index].restart()
        await self.wait_for_jetstream(deadline - time.monotonic())

    async def reload(self, index: int, settings: str = "") -> None:
        """Rewrite node ``index``'s configuration with ``settings``; make it reload (SIGHUP).

        ``settings`` is nats-server configuration text, such as
        ``"max_connections: 1000"``, written after the node's own settings (name,
        cluster, monitoring port) in place of what an earlier reload added; it stays
        for later restarts of the node. ``""`` reloads the node's own settings
        unchanged. Returns once the node logged the reload and the meta group is
        whole (see :meth:`wait_for_jetstream`). A refused configuration is put back
        as it was, so the node restarts as before.

        Raises:
            NatsServerError: The node is not running, it refused the configuration
                (the message carries its reason, such as a setting that cannot
                change without a restart), or the node did not report the reload, or
                the meta group was not whole, within ``startup_timeout``.
        """
        deadline = time.monotonic() + self.startup_timeout
        node = self.nodes[index]
        if not node.running:
            raise NatsServerError(f"cannot reload {self.node_name(index)}: it is not running")
        previous = self._settings[index]
        self._settings[index] = settings
        self._write_config(index)
        try:
            await node.reload(timeout=self.startup_timeout)
        except NatsServerError:
            self._settings[index] = previous
            self._write_config(index)
            raise
        await self.wait_for_jetstream(deadline - time.monotonic())

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

    async def wait_for_stream(
        self,
        nc: Any,
        stream: str,
        *,
        consumers: Sequence[str] = (),
        timeout: float | None = None,
    ) -> None:
        """Wait until ``stream`` and its ``consumers`` are current on every running node.

        That is: each has a leader, and every replica on a running node is current,
        not offline and without lag.

        Call it before killing a leader, so that a follower has everything and can
        take over; and after :meth:`restart`, to know the node caught up.

        Raises:
            NatsServerError: They were not within ``timeout`` seconds (default: the
                startup timeout); the message names the replica that was not.
        """
        import nats  # noqa: PLC0415 - goflux.testing works without nats-py installed

        # No leader for a moment: the answer is 503 or none; anything else is an error.
        leaderless = (
            nats.js.errors.ServiceUnavailableError,
            nats.errors.TimeoutError,
            nats.errors.NoRespondersError,
        )
        js = nc.jetstream()
        limit = self.startup_timeout if timeout is None else max(timeout, 0.1)
        deadline = time.monotonic() + limit
        while True:
            try:
                infos = [("stream", stream, await js.stream_info(stream))]
                infos += [("consumer", c, await js.consumer_info(stream, c)) for c in consumers]
            except leaderless as exc:
                not_ready = f"no stream or consumer info ({type(exc).__name__}: {exc})"
            else:
                running = {self.node_name(i) for i, n in enumerate(self.nodes) if n.running}
                not_ready = self._replicas_not_ready(infos, running)
            if not not_ready:
                return
            if time.monotonic() > deadline:
                raise NatsServerError(f"not ready within {limit}s: {not_ready}")
            await asyncio.sleep(_POLL)  # the state is polled: the server pushes no event

    @staticmethod
    def _replicas_not_ready(infos: list[tuple[str, str, Any]], running: set[str]) -> str:
        """Which replica on a ``running`` node is behind in ``infos`` ("" if none).

        ``infos``: (kind, name, stream or consumer info) triples.
        """
        for kind, name, info in infos:
            cluster = info.cluster
            if cluster is None or not cluster.leader:
                return f"{kind} {name!r} has no leader"
            replicas = {replica.name: replica for replica in cluster.replicas or []}
            for node in sorted(running - {cluster.leader}):
                replica = replicas.get(node)
                if replica is None:
                    continue  # the stream has fewer replicas than nodes
                if replica.offline or not replica.current or replica.lag:
                    return (
                        f"{kind} {name!r}: replica on {node} is not current "
                        f"(current={replica.current}, lag={replica.lag}, "
                        f"offline={replica.offline})"
                    )
        return ""

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
