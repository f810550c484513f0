"""Linearizable reads by read index."""

from __future__ import annotations

import pytest

from triomq.consensus.core.log import Entry, HardState
from triomq.consensus.core.messages import DLedgerCode, HeartbeatRequest, PushResponse
from triomq.consensus.core.raft import ProposalRejected
from triomq.consensus.core.ready import AppendEntries, PersistHardState, Role, coalesce
from triomq.testing.raftsim_cluster import RaftCluster


def read_states(cluster, node_id):
    return [s for r in cluster.nodes[node_id].readies for s in r.read_states]


def test_single_node_read_is_confirmed_at_once():
    cluster = RaftCluster([1])
    cluster.elect(1)
    index = cluster.propose(1, b"x")
    cluster[1].read_index(b"r1")
    cluster.settle()
    [state] = read_states(cluster, 1)
    assert (state.context, state.index, state.code) == (b"r1", index, DLedgerCode.SUCCESS)


def test_read_waits_for_a_quorum_of_heartbeat_answers():
    cluster = RaftCluster()
    cluster.elect(1)
    index = cluster.propose(1, b"x")
    cluster.isolate(3)
    cluster.drop = lambda m: m.src == 2 and not isinstance(m, PushResponse)
    cluster[1].read_index(b"r")
    cluster.settle()
    assert read_states(cluster, 1) == []
    heartbeats = [m for m in cluster.delivered if isinstance(m, HeartbeatRequest) and m.read_seq]
    assert heartbeats  # the read went out at once, not at the next heartbeat
    cluster.heal()
    cluster.tick()
    [state] = read_states(cluster, 1)
    assert state.index == index and state.code is DLedgerCode.SUCCESS


def test_read_before_the_first_commit_of_the_term_waits_for_it():
    cluster = RaftCluster()
    cluster.drop = lambda m: isinstance(m, PushResponse)
    cluster.elect(1)
    cluster[1].read_index(b"early")
    cluster.settle()
    assert read_states(cluster, 1) == []
    cluster.heal()
    cluster.tick(6)
    [state] = read_states(cluster, 1)
    assert state.code is DLedgerCode.SUCCESS
    assert state.index == cluster[1].commit_index


def test_deposed_leader_fails_its_reads():
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.isolate(1)
    cluster[1].read_index(b"stale")
    cluster.settle()
    cluster.tick(25, nodes=[1])  # check-quorum: it steps down
    assert cluster[1].role is Role.FOLLOWER
    [state] = read_states(cluster, 1)
    assert state.code is DLedgerCode.TERM_CHANGED


def test_followers_refuse_reads():
    cluster = RaftCluster()
    cluster.elect(1)
    with pytest.raises(ProposalRejected, match="NOT_LEADER") as raised:
        cluster[2].read_index(b"r")
    assert raised.value.leader_id == 1


def test_coalesce_merges_appends_and_hard_states():
    a, b = Entry(1, 1), Entry(2, 1)
    writes = [
        PersistHardState(HardState(2, 0)),
        PersistHardState(HardState(2, 1)),
        AppendEntries((a,)),
        AppendEntries((b,)),
        PersistHardState(HardState(3, 0)),
    ]
    assert coalesce(writes) == (
        PersistHardState(HardState(2, 1)),
        AppendEntries((a, b)),
        PersistHardState(HardState(3, 0)),
    )
