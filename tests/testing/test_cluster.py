"""NatsCluster: a routed JetStream cluster on loopback, with nodes to kill and restart."""

from __future__ import annotations

import asyncio

import nats
import pytest

from goflux.testing import NatsCluster
from goflux.transports import jetstream


def test_bad_sizes_and_names_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        NatsCluster(0)
    cluster = NatsCluster(2)
    assert cluster.index_of("n1") == 1
    with pytest.raises(ValueError, match="no node is called 'n7'"):
        cluster.index_of("n7")
    assert len(set(cluster.urls)) == 2


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_a_killed_node_rejoins_with_its_replica() -> None:
    async with NatsCluster(3) as cluster:
        nc = await nats.connect(servers=cluster.urls)
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name="R3", subjects=["r3.>"], num_replicas=3)
        await js.publish("r3.a", b"before")
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
        await cluster.restart(follower)
        await cluster.wait_for_jetstream()
        async with asyncio.timeout(30):  # it rejoins and catches up with what it missed
            while True:
                info = await js.stream_info("R3")
                assert info.cluster is not None
                replicas = {r.name: r for r in info.cluster.replicas or []}
                back = replicas.get(cluster.node_name(follower))
                if back is not None and back.current and not back.lag:
                    break
                await nc.flush()
        assert info.state.messages == 2
        # Read from the restarted node alone: it holds both messages.
        direct = await nats.connect(cluster.nodes[follower].url)
        assert (await direct.jetstream().stream_info("R3")).state.messages == 2
        await direct.close()
        await nc.close()
