"""NatsCluster: a routed JetStream cluster on loopback, with nodes to kill and restart."""

from __future__ import annotations

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


@pytest.mark.timeout(60)
async def test_a_killed_node_rejoins_with_its_replica() -> None:
    async with NatsCluster(3) as cluster:
        nc = await nats.connect(servers=cluster.urls)
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name="R3", subjects=["r3.>"], num_replicas=3)
        await js.publish("r3.a", b"before")
        leader = await cluster.stream_leader(nc, "R3")
        follower = (leader + 1) % 3
        cluster.kill(follower)
        assert not cluster.nodes[follower].running
        await js.publish("r3.a", b"while down")  # two of three still make a quorum
        await cluster.restart(follower)
        await cluster.wait_for_jetstream()
        info = await js.stream_info("R3")
        assert info.state.messages == 2
        assert info.cluster is not None
        assert {r.name for r in info.cluster.replicas or []} | {info.cluster.leader} == {
            "n0",
            "n1",
            "n2",
        }
        await nc.close()
