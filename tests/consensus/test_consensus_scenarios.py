"""The named scenarios of issue 4, each driven step by step."""

from __future__ import annotations

import contextlib

from triomq.consensus.core.confchange import (
    ConfChangeSingle,
    ConfChangeType,
    ConfChangeV2,
)
from triomq.consensus.core.messages import DLedgerCode, PushRequest, PushType, VoteRequest
from triomq.consensus.core.raft import ProposalRejected, RaftSettings
from triomq.consensus.core.ready import Role, TruncateSuffix
from triomq.testing.raftsim_cluster import RaftCluster

# One entry per APPEND, so that a test can let one entry through and not the next.
PLAIN = RaftSettings(pre_vote=False, check_quorum=False, max_batch_entries=1)
ADD = ConfChangeType.ADD_NODE
REMOVE = ConfChangeType.REMOVE_NODE
LEARNER = ConfChangeType.ADD_LEARNER_NODE


def win(cluster, node_id, attempts=5):
    """Campaign until ``node_id`` wins (a first try may only learn a newer term)."""
    for _ in range(attempts):
        cluster[node_id].campaign()
        cluster.settle()
        if cluster[node_id].role is Role.LEADER:
            return
    raise AssertionError(f"node {node_id} could not win")


def appends_of_term(term, src):
    return lambda m: (
        isinstance(m, PushRequest)
        and m.src == src
        and m.type is PushType.APPEND
        and any(e.term == term for e in m.entries)
    )


def test_figure_8_entry_of_an_old_term_is_not_committed_by_counting():
    cluster = RaftCluster([1, 2, 3, 4, 5], config=PLAIN)
    win(cluster, 1)
    # (a) S1 (term 2) gets entry x to S2 only.
    cluster.partition({1})
    cluster.blocked -= {(1, 2), (2, 1)}
    x_index = cluster[1].propose(b"x")
    cluster.settle()
    assert cluster[2].log.term_at(x_index) == 2
    # (b) S1 crashes; S5 wins term 3 with S3, S4 and keeps its entry to itself.
    cluster.crash(1)
    cluster.heal()
    cluster.drop = lambda m: isinstance(m, PushRequest) and m.src == 5
    win(cluster, 5)
    assert cluster[5].log.term_at(x_index) == 3
    # (c) S5 crashes; S1 restarts and wins term 4; x reaches a majority, but
    # no entry of term 4 does.
    cluster.crash(5)
    cluster.restart(1)
    cluster.drop = appends_of_term(4, src=1)
    win(cluster, 1)
    term = cluster[1].term
    assert term == 4
    holders = [i for i in (1, 2, 3, 4) if cluster[i].log.term_at(x_index) == 2]
    assert len(holders) >= 3
    assert cluster[1].commit_index < x_index  # figure 8: not committed by counting
    # (d) S1 crashes; S5 restarts, wins and overwrites x everywhere.
    cluster.crash(1)
    cluster.restart(5)
    cluster.heal()
    win(cluster, 5)
    cluster.tick(3)
    for i in (2, 3, 4, 5):
        assert cluster[i].log.term_at(x_index) == 3
        assert b"x" not in cluster.applied_data(i)


def test_figure_8_with_a_current_term_entry_the_old_one_commits():
    cluster = RaftCluster([1, 2, 3, 4, 5], config=PLAIN)
    win(cluster, 1)
    cluster.partition({1})
    cluster.blocked -= {(1, 2), (2, 1)}
    x_index = cluster[1].propose(b"x")
    cluster.settle()
    cluster.crash(1)
    cluster.heal()
    cluster.drop = lambda m: isinstance(m, PushRequest) and m.src == 5
    win(cluster, 5)
    cluster.crash(5)
    cluster.restart(1)
    cluster.heal()
    win(cluster, 1)  # its term-4 no-op reaches the majority too
    assert cluster[1].commit_index > x_index
    cluster.tick()
    cluster.crash(1)
    cluster.restart(5)
    for _ in range(3):
        cluster[5].campaign()
        cluster.settle()
    assert cluster[5].role is not Role.LEADER  # S5 lacks a committed entry
    assert b"x" in cluster.applied_data(2)


def test_all_nodes_restart_at_once_after_committing_in_a_new_term():
    """PySyncObj PR 202: the term must be durable, or old terms come back."""
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.propose(1, b"t2")
    cluster[1].transfer_leadership(2)
    cluster.settle()
    assert cluster.leader() == 2
    term = cluster[2].term
    cluster.propose(2, b"t3")
    cluster.tick()
    for i in (1, 2, 3):
        cluster.crash(i)
    restarted_at = len(cluster.delivered)
    for i in (1, 2, 3):
        cluster.restart(i)
        assert cluster[i].term == term  # recovered from disk, not from scratch
    cluster.run_until(lambda: cluster.leader() is not None)
    leader = cluster.leader()
    assert cluster[leader].term > term
    cluster.propose(leader, b"t4")
    cluster.tick()
    for i in (1, 2, 3):
        assert cluster.applied_data(i) == [b"t2", b"t3", b"t4"]
    votes = [m for m in cluster.delivered[restarted_at:] if isinstance(m, VoteRequest)]
    assert votes and all(m.term > term for m in votes)


def test_lagging_node_cannot_win_and_truncate_committed_entries():
    """RocketMQ issue 2178: a node with a higher term but a shorter log."""
    cluster = RaftCluster(config=PLAIN)
    cluster.elect(1)
    cluster.isolate(3)
    for i in range(5):
        cluster.propose(1, b"c%d" % i)
    cluster.tick()
    committed = cluster[1].commit_index
    for _ in range(4):  # the isolated node inflates its term
        cluster[3].campaign()
        cluster.settle()
    assert cluster[3].term > cluster[1].term
    cluster.crash(1)
    cluster.heal()
    for _ in range(4):
        cluster[3].campaign()
        cluster.settle()
        assert cluster[3].role is not Role.LEADER
    cluster.run_until(lambda: cluster.leader() == 2)
    cluster.tick(3)
    assert cluster[2].commit_index >= committed
    for i in (2, 3):
        assert cluster.applied_data(i) == [b"c%d" % i for i in range(5)]
    truncations = [
        w for r in cluster.nodes[2].readies for w in r.writes if isinstance(w, TruncateSuffix)
    ]
    assert all(w.index > committed for w in truncations)


def test_joint_consensus_replaces_the_leader_while_serving():
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.add_node(4)
    cluster.propose(1, b"before")
    cc = ConfChangeV2([ConfChangeSingle(REMOVE, 1), ConfChangeSingle(ADD, 4)])
    index = cluster[1].propose_conf_change(cc)
    # While joint the old leader keeps serving proposals.
    during = cluster[1].propose(b"during")
    assert cluster[1].configuration.is_joint
    cluster.settle()
    assert cluster.results(1)[index].code is DLedgerCode.SUCCESS
    assert cluster.results(1)[during].code is DLedgerCode.SUCCESS
    cluster.run_until(lambda: cluster.leader() in (2, 3, 4), max_ticks=30)
    new = cluster.leader()
    config = cluster[new].configuration
    assert not config.is_joint
    assert config.voters.incoming.voters == {2, 3, 4}
    assert cluster[1].role is Role.FOLLOWER
    cluster.propose(new, b"after")
    cluster.tick()
    for i in (2, 3, 4):
        assert cluster.applied_data(i) == [b"before", b"during", b"after"]


def test_removing_a_node_while_it_is_partitioned():
    cluster = RaftCluster([1, 2, 3, 4])
    cluster.elect(1)
    cluster.isolate(4)
    cc = ConfChangeV2([ConfChangeSingle(REMOVE, 4)])
    index = cluster[1].propose_conf_change(cc)
    cluster.settle()
    assert cluster.results(1)[index].code is DLedgerCode.SUCCESS
    term = cluster[1].term
    cluster.tick(40)
    cluster.heal()
    cluster.tick(60)
    assert cluster.leader() == 1
    assert cluster[1].term == term  # the removed node never disrupted the cluster
    cluster.propose(1, b"still serving")
    assert cluster.results(1)[cluster[1].log.last_index].code is DLedgerCode.SUCCESS
    assert 4 not in cluster[1].tracker.progress


def test_membership_changes_while_clients_keep_writing():
    cluster = RaftCluster()
    cluster.elect(1)
    for node_id in (4, 5):
        cluster.add_node(node_id)
    plan = [
        ConfChangeV2([ConfChangeSingle(LEARNER, 4)]),
        ConfChangeV2([ConfChangeSingle(ADD, 4)]),
        ConfChangeV2([ConfChangeSingle(REMOVE, 2), ConfChangeSingle(ADD, 5)]),
        ConfChangeV2([ConfChangeSingle(LEARNER, 3)]),
        ConfChangeV2([ConfChangeSingle(REMOVE, 1)]),
    ]
    for step in range(200):
        leader = cluster.leader()
        if leader is not None:
            with contextlib.suppress(ProposalRejected):
                cluster[leader].propose(b"w%d" % step)
            if plan and step % 10 == 5:
                try:
                    cluster[leader].propose_conf_change(plan[0])
                    plan.pop(0)
                except ProposalRejected:
                    pass
        cluster.tick()
        if not plan and step > 120:
            break
    assert not plan
    final = cluster.leader()
    assert final is not None
    config = cluster[final].configuration
    assert config.voters.incoming.voters == {4, 5}
    assert config.learners == {3}
    cluster.tick(3)
    successes = [
        data
        for node in cluster.nodes.values()
        for r in node.results
        if r.code is DLedgerCode.SUCCESS
        for data in [cluster.nodes[node.id].r().log.get(r.index)]
    ]
    assert len(successes) > 100
    writes = [d for d in cluster.applied_data(final) if d.startswith(b"w")]
    assert writes == sorted(set(writes), key=writes.index)  # applied once each, in order
    for i in (3, 4, 5):
        assert cluster.nodes[i].sm.digest == cluster.nodes[final].sm.digest
