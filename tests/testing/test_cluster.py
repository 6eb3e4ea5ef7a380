"""NatsCluster: a routed JetStream cluster on loopback, with nodes to kill and restart."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from types import SimpleNamespace
from typing import Any

import nats
import nats.js.errors
import pytest
from nats.js import JetStreamContext
from nats.js.api import ClusterInfo, PeerInfo

from goflux import TransportError
from goflux.testing import NatsCluster, NatsServerError
from goflux.transports import jetstream


def test_bad_sizes_and_names_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        NatsCluster(0)
    cluster = NatsCluster(2)
    assert cluster.index_of("n1") == 1
    with pytest.raises(ValueError, match="no node is called 'n7'"):
        cluster.index_of("n7")
    assert len(set(cluster.urls)) == 2


def meta(leader: str | None, *peers: dict[str, Any]) -> dict[str, Any]:
    """A node's /jsz report: its meta leader and the meta group peers it lists."""
    return {"meta_cluster": {"leader": leader, "replicas": list(peers), "cluster_size": 3}}


def peer(name: str, *, current: bool = True, offline: bool = False) -> dict[str, Any]:
    report: dict[str, Any] = {"name": name, "current": current, "active": 1000}
    if offline:
        report["offline"] = True  # nats-server leaves the field out when false
    return report


def whole() -> dict[int, dict[str, Any] | str]:
    """n0 leads; the followers list each other as not current, as real followers do."""
    return {
        0: meta("n0", peer("n1"), peer("n2")),
        1: meta("n0", peer("n0"), peer("n2", current=False)),
        2: meta("n0", peer("n0"), peer("n1", current=False)),
    }


def test_readiness_names_what_is_missing_from_the_meta_group() -> None:
    cluster = NatsCluster(3)
    every = [0, 1, 2]
    assert cluster._meta_not_ready(every, whole()) == ""
    cases: list[tuple[dict[int, dict[str, Any] | str], str]] = [
        ({**whole(), 2: "no /jsz answer (refused)"}, "n2: no /jsz answer (refused)"),
        ({**whole(), 1: {"server_id": "x"}}, "n1: JetStream is not clustered (yet)"),
        (
            {**whole(), 1: meta(None, peer("n0"), peer("n2"))},
            "no meta leader that every running node follows "
            "(leaders seen: n0: n0, n1: none, n2: n0)",
        ),
        (
            {**whole(), 0: meta("n0", peer("n1"), peer("n2", current=False))},
            "meta leader n0 does not see n2 current yet",
        ),
        (
            {**whole(), 1: meta("n0", peer("n0"), peer("n2", offline=True))},
            "n1 sees n2 offline",
        ),
        (  # what the leader lists for a peer whose name it has not learned yet
            {
                **whole(),
                0: meta("n0", peer("Server name unknown at this time (peerID: 4a)"), peer("n2")),
            },
            "n0 does not know n1 as a meta group peer yet",
        ),
    ]
    for views, missing in cases:
        assert cluster._meta_not_ready(every, views) == missing
    # A killed node is left out, whatever the others say of it.
    views = {0: meta("n0", peer("n1", current=False, offline=True), peer("n2")), 2: whole()[2]}
    assert cluster._meta_not_ready([0, 2], views) == ""
    # The meta leader must be a running node.
    views = {1: meta("n0", peer("n0"), peer("n2")), 2: meta("n0", peer("n0"), peer("n1"))}
    assert cluster._meta_not_ready([1, 2], views).startswith("no meta leader")


def test_stream_readiness_names_the_replica_that_is_behind() -> None:
    def info(leader: str | None, *replicas: PeerInfo) -> Any:
        return SimpleNamespace(cluster=ClusterInfo(leader=leader, replicas=list(replicas)))

    every = {"n0", "n1", "n2"}
    check = NatsCluster._replicas_not_ready
    current = [PeerInfo(name="n1", current=True), PeerInfo(name="n2", current=True)]
    assert check([("stream", "S", info("n0", *current))], every) == ""
    assert check([("stream", "S", info(None))], every) == "stream 'S' has no leader"
    behind = PeerInfo(name="n2", current=True, lag=3)
    infos = [("stream", "S", info("n0", *current)), ("consumer", "C", info("n1", behind))]
    assert check(infos, every) == (
        "consumer 'C': replica on n2 is not current (current=True, lag=3, offline=None)"
    )
    gone = PeerInfo(name="n2", current=False, offline=True)
    assert check([("stream", "S", info("n0", current[0], gone))], every).endswith(
        "(current=False, lag=None, offline=True)"
    )
    assert check([("stream", "S", info("n0", current[0], gone))], {"n0", "n1"}) == ""  # killed


async def publish_once_served(js: JetStreamContext, subject: str, data: bytes) -> None:
    """Publish once the new stream's leader serves ``subject`` through our node.

    Its interest in the subject reaches the other nodes a moment after the stream is
    created; a publish through one of them meanwhile finds no responders (nothing is
    stored) and is sent again after a round trip.
    """
    while True:
        try:
            await js.publish(subject, data)
            return
        except nats.js.errors.NoStreamResponseError:
            await js._nc.flush()


async def ensure_replicated_stream(js: JetStreamContext, **config: Any) -> None:
    """``ensure_stream``, asked again (it is idempotent) when no answer came in time.

    A replicated create is answered once its Raft group has elected a leader; beside
    the JVM test runs on 2 cores, elections were lost for longer than
    ``NatsCluster.PROVISION_TIMEOUT`` (20 s) once. Asking again finds the stream made
    meanwhile, or creates it, and is answered by the group's leader once there is one.
    """
    for attempt in range(3):
        try:
            await jetstream.ensure_stream(js, **config)
            return
        except TransportError:
            if attempt == 2:
                raise


@pytest.mark.slow
@pytest.mark.timeout(120)  # (three creates of up to 20 s each, at worst)
async def test_a_killed_node_rejoins_with_its_replica() -> None:
    async with NatsCluster(3) as cluster:  # R3 placement needs every peer: it is ready
        nc = await nats.connect(servers=cluster.urls)
        js = nc.jetstream(timeout=NatsCluster.PROVISION_TIMEOUT)  # see its docstring
        await ensure_replicated_stream(js, name="R3", subjects=["r3.>"], num_replicas=3)
        await publish_once_served(js, "r3.a", b"before")
        await cluster.wait_for_stream(nc, "R3")  # every replica holds it before a kill
        leader = await cluster.stream_leader(nc, "R3")
        follower = (leader + 1) % 3
        await nc.close()  # talk to the leader's node, which stays up
        nc = await nats.connect(cluster.nodes[leader].url)
        js = nc.jetstream()
        cluster.kill(follower)
        assert not cluster.nodes[follower].running
        await js.publish("r3.a", b"while down")  # two of three still make a quorum
        info = await js.stream_info("R3")
        assert info.cluster is not None
        down = {r.name: r for r in info.cluster.replicas or []}[cluster.node_name(follower)]
        assert not down.current  # the leader sees it gone
        await cluster.restart(follower)  # returns once it is back in the meta group
        await cluster.wait_for_stream(nc, "R3")  # it catches up with what it missed
        info = await js.stream_info("R3")
        assert info.cluster is not None
        back = {r.name: r for r in info.cluster.replicas or []}[cluster.node_name(follower)]
        assert back.current
        assert not back.lag
        assert info.state.messages == 2
        # Read from the restarted node alone: it holds both messages.
        direct = await nats.connect(cluster.nodes[follower].url)
        assert (await direct.jetstream().stream_info("R3")).state.messages == 2
        await direct.close()
        await nc.close()


def varz(cluster: NatsCluster, index: int) -> dict[str, Any]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(cluster.monitor_url(index) + "/varz", timeout=2) as response:
        report: dict[str, Any] = json.load(response)
    return report


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_reload_changes_a_running_node_s_configuration() -> None:
    async with NatsCluster(3) as cluster:
        loaded = varz(cluster, 1)["config_load_time"]
        await cluster.reload(1, "max_connections: 1234")
        after = await asyncio.to_thread(varz, cluster, 1)
        assert after["max_connections"] == 1234
        assert after["config_load_time"] != loaded
        assert (await asyncio.to_thread(varz, cluster, 0))["max_connections"] == 65536
        assert "max_connections: 1234" in cluster.config_file(1).read_text()
        pid = cluster.nodes[1].pid
        # A setting that needs a restart is refused, and the file is put back.
        with pytest.raises(NatsServerError, match="not supported for ServerName"):
            await cluster.reload(1, 'server_name: "renamed"')
        assert "renamed" not in cluster.config_file(1).read_text()
        assert cluster.nodes[1].pid == pid  # the node ran on throughout
        # The reloaded setting stays for the node's next start.
        cluster.kill(1)
        with pytest.raises(NatsServerError, match="not running"):
            await cluster.reload(1)
        await cluster.restart(1)
        assert (await asyncio.to_thread(varz, cluster, 1))["max_connections"] == 1234
        config_dir = cluster.config_file(1).parent
    assert not config_dir.exists()
