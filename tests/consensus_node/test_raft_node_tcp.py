"""The Raft driver over TCP loopback with the default timers (real clock)."""

from __future__ import annotations

from raft_node_harness import Cluster, make_members


async def test_three_nodes_over_tcp_survive_losing_the_leader(tmp_path, triomq_plugins, nursery):
    cluster = Cluster(nursery, triomq_plugins,
                      make_members(tmp_path, [1, 2, 3], transport="tcp"))
    for node_id in (1, 2, 3):
        await cluster.start(node_id)
    leader = await cluster.leader()
    for i in range(10):
        await leader.r.propose(f"c{i}".encode())
    await leader.r.read_index()
    await leader.stop()
    new = await cluster.leader()
    assert new.node_id != leader.node_id
    await new.r.propose(b"after")
    survivors = {1, 2, 3} - {leader.node_id}
    await cluster.until_applied(11, survivors)
    expected = [f"c{i}".encode() for i in range(10)] + [b"after"]
    assert all(cluster[i].journal.commands == expected for i in survivors)
