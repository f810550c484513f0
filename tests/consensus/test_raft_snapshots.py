"""Snapshots: compaction, install-snapshot to lagging peers, restart from one."""

from __future__ import annotations

import pytest

from triomq.consensus.core.confchange import ConfChangeSingle, ConfChangeType, ConfChangeV2
from triomq.consensus.core.log import Entry, LogError
from triomq.consensus.core.messages import InstallSnapshotRequest
from triomq.consensus.core.ready import SaveSnapshot
from triomq.testing.raftsim_cluster import RaftCluster


def compact_all(cluster, node_id):
    node = cluster.nodes[node_id]
    raft = node.r()
    raft.compact(raft.applied_index, node.sm.snapshot_data())
    cluster.settle()


def test_compaction_drops_the_prefix_and_persists_the_snapshot():
    cluster = RaftCluster()
    cluster.elect(1)
    for i in range(5):
        cluster.propose(1, b"%d" % i)
    compact_all(cluster, 1)
    raft = cluster[1]
    assert raft.log.snapshot.index == raft.applied_index
    assert raft.log.snapshot.conf_state.voters == (1, 2, 3)
    assert raft.log.entries == []
    writes = cluster.nodes[1].readies[-1].writes
    assert writes == (SaveSnapshot(raft.log.snapshot),)
    assert cluster.nodes[1].disk.snapshot == raft.log.snapshot
    assert cluster.nodes[1].disk.entries == []


def test_compaction_beyond_applied_is_refused():
    cluster = RaftCluster()
    cluster.elect(1)
    with pytest.raises(LogError, match="applied"):
        cluster[1].compact(cluster[1].log.last_index + 5, b"")


def test_lagging_follower_gets_the_snapshot():
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.crash(3)
    for i in range(6):
        cluster.propose(1, b"%d" % i)
    compact_all(cluster, 1)
    cluster.propose(1, b"after")
    cluster.restart(3)
    cluster.tick(8)
    assert any(isinstance(m, InstallSnapshotRequest) and m.dst == 3 for m in cluster.delivered)
    assert cluster.nodes[3].sm.digest == cluster.nodes[1].sm.digest
    assert cluster[3].log.snapshot.index == cluster[1].log.snapshot.index
    assert cluster.applied_data(3) == [b"after"]


def test_new_member_catches_up_from_a_snapshot():
    cluster = RaftCluster()
    cluster.elect(1)
    for i in range(4):
        cluster.propose(1, b"%d" % i)
    compact_all(cluster, 1)
    cluster.add_node(4)
    cc = ConfChangeV2([ConfChangeSingle(ConfChangeType.ADD_LEARNER_NODE, 4)])
    cluster[1].propose_conf_change(cc)
    cluster.tick(8)
    assert cluster[4].configuration.learners == {4}
    assert cluster[4].commit_index == cluster[1].commit_index
    assert cluster.nodes[4].sm.digest == cluster.nodes[1].sm.digest


def test_restart_from_snapshot_and_remaining_entries():
    cluster = RaftCluster()
    cluster.elect(1)
    for i in range(3):
        cluster.propose(1, b"%d" % i)
    compact_all(cluster, 2)
    cluster.propose(1, b"tail")
    cluster.tick()
    cluster.crash(2)
    cluster.restart(2)
    raft = cluster[2]
    assert raft.log.snapshot.index > 0
    assert raft.log.get(raft.log.last_index).data == b"tail"
    assert raft.configuration.voters.incoming.voters == {1, 2, 3}
    cluster.tick(3)
    assert cluster.nodes[2].sm.digest == cluster.nodes[1].sm.digest


def test_entry_record_round_trip():
    entry = Entry(7, 3, b"payload")
    assert Entry.from_record(7, 3, entry.to_record()) == entry
    with pytest.raises(LogError):
        Entry.from_record(1, 1, b"")
    with pytest.raises(LogError):
        Entry.from_record(1, 1, b"\x09x")
