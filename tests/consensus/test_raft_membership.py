"""Membership change by ConfChangeV2 entries: learners, joint consensus, rules."""

from __future__ import annotations

import pytest

from triomq.consensus.core.confchange import (
    ConfChangeSingle,
    ConfChangeTransition,
    ConfChangeType,
    ConfChangeV2,
)
from triomq.consensus.core.log import Entry, EntryKind, RaftLog, Snapshot, bootstrap_entries
from triomq.consensus.core.messages import PushResponse
from triomq.consensus.core.raft import ProposalRejected
from triomq.consensus.core.ready import Role
from triomq.testing.raftsim_cluster import RaftCluster

ADD = ConfChangeType.ADD_NODE
LEARNER = ConfChangeType.ADD_LEARNER_NODE
REMOVE = ConfChangeType.REMOVE_NODE


def change(*pairs, transition=ConfChangeTransition.AUTO):
    return ConfChangeV2([ConfChangeSingle(t, n) for t, n in pairs], transition)


def committed(cluster, leader, cc):
    index = cluster[leader].propose_conf_change(cc)
    cluster.settle()
    assert cluster[leader].commit_index >= index
    return index


def test_learner_replicates_but_does_not_count():
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.add_node(4)
    committed(cluster, 1, change((LEARNER, 4)))
    assert cluster[1].configuration.learners == {4}
    cluster.propose(1, b"a")
    cluster.tick()
    assert cluster.applied_data(4) == [b"a"]
    cluster.isolate(4)
    cluster.propose(1, b"b")  # still commits without the learner
    assert cluster[1].commit_index == cluster[1].log.last_index


def test_promote_learner_then_remove_a_voter():
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.add_node(4)
    committed(cluster, 1, change((LEARNER, 4)))
    committed(cluster, 1, change((ADD, 4)))
    assert cluster[1].configuration.voters.incoming.voters == {1, 2, 3, 4}
    committed(cluster, 1, change((REMOVE, 2)))
    assert cluster[1].configuration.voters.incoming.voters == {1, 3, 4}
    cluster.isolate(2)
    cluster.propose(1, b"after")
    assert cluster.results(1)[cluster[1].log.last_index].code.name == "SUCCESS"


def test_configuration_takes_effect_on_append_and_reverts_on_truncate():
    _, entries = bootstrap_entries([1, 2, 3])
    log = RaftLog(Snapshot(), entries)
    assert log.configuration.voters.incoming.voters == {1, 2, 3}
    log.append(Entry(4, 2, change((ADD, 4)).encode(), EntryKind.CONF_CHANGE))
    assert log.configuration.voters.incoming.voters == {1, 2, 3, 4}
    assert log.configuration_index == 4
    log.truncate_after(3)
    assert log.configuration.voters.incoming.voters == {1, 2, 3}
    assert log.configuration_index == 3


@pytest.mark.parametrize("transition", [ConfChangeTransition.AUTO, ConfChangeTransition.IMPLICIT])
def test_joint_change_is_left_automatically(transition):
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.add_node(4)
    cluster.add_node(5)
    cc = change((ADD, 4), (ADD, 5), (REMOVE, 3), transition=transition)
    committed(cluster, 1, cc)
    cluster.tick()
    config = cluster[1].configuration
    assert not config.is_joint
    assert config.voters.incoming.voters == {1, 2, 4, 5}


def test_explicit_joint_change_waits_for_an_explicit_leave():
    cluster = RaftCluster()
    cluster.elect(1)
    committed(cluster, 1, change((LEARNER, 3), transition=ConfChangeTransition.EXPLICIT))
    cluster.tick(3)
    config = cluster[1].configuration
    assert config.is_joint and not config.auto_leave
    assert config.learners_next == {3}
    assert config.voters.outgoing.voters == {1, 2, 3}
    committed(cluster, 1, ConfChangeV2())
    config = cluster[1].configuration
    assert not config.is_joint
    assert config.learners == {3}
    assert config.voters.incoming.voters == {1, 2}


def test_rejection_rules():
    cluster = RaftCluster()
    cluster.elect(1)
    # leave while not joint
    with pytest.raises(ProposalRejected, match="not joint"):
        cluster[1].propose_conf_change(ConfChangeV2())
    # a change while the previous one is not committed (pendingConfIndex)
    cluster.isolate(1)
    cluster[1].propose_conf_change(change((ADD, 4), transition=ConfChangeTransition.EXPLICIT))
    with pytest.raises(ProposalRejected, match="not committed yet"):
        cluster[1].propose_conf_change(change((ADD, 5)))
    cluster.heal()
    cluster.tick()
    assert cluster[1].configuration.is_joint
    # a change while joint that is not the leave
    with pytest.raises(ProposalRejected, match="joint: leave it first"):
        cluster[1].propose_conf_change(change((ADD, 5)))
    # the Changer's own refusals
    committed(cluster, 1, ConfChangeV2())
    with pytest.raises(ProposalRejected, match="removed all voters"):
        cluster[1].propose_conf_change(change((REMOVE, 1), (REMOVE, 2), (REMOVE, 3), (REMOVE, 4)))


def test_removing_every_voter_is_refused():
    cluster = RaftCluster([1])
    cluster.elect(1)
    with pytest.raises(ProposalRejected, match="removed all voters"):
        cluster[1].propose_conf_change(change((REMOVE, 1)))


def test_new_leader_commits_an_inherited_change_before_accepting_another():
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.add_node(4)
    # The change reaches node 2 only and no ack returns: it stays uncommitted.
    cluster.drop = lambda m: m.dst in (1, 3)
    index = cluster[1].propose_conf_change(change((LEARNER, 4)))
    cluster.settle()
    cluster.heal()
    cluster.isolate(1)
    blocked = []
    # Hold node 3's acks so the new leader's first entry cannot commit yet.
    cluster.drop = lambda m: isinstance(m, PushResponse) and m.src == 3 and not blocked
    cluster.run_until(lambda: cluster[2].role is Role.LEADER, max_ticks=40)
    assert cluster[2].configuration.learners == {4}
    with pytest.raises(ProposalRejected, match="not committed yet"):
        cluster[2].propose_conf_change(change((REMOVE, 4)))
    blocked.append(True)
    cluster.tick(6)
    assert cluster[2].commit_index > index
    committed(cluster, 2, change((REMOVE, 4)))


def test_removed_leader_steps_down_and_hands_over():
    cluster = RaftCluster()
    cluster.elect(1)
    committed(cluster, 1, change((REMOVE, 1)))
    cluster.settle()
    assert cluster[1].role is Role.FOLLOWER
    cluster.run_until(lambda: cluster.leader() in (2, 3), max_ticks=30)
    new = cluster.leader()
    cluster.propose(new, b"served")
    cluster.tick(25)
    assert cluster[1].role is Role.FOLLOWER  # never campaigns again
    assert cluster.leader() == new


def test_a_lagging_member_follows_a_leader_its_configuration_does_not_name():
    # Node 3 misses the changes that make 4 a voter, so its configuration
    # still reads {1, 2, 3}. With 1 down, leader 4 needs 3 for a quorum of
    # {1, 2, 3, 4}: 3 must take the entries of the current term's leader.
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.add_node(4)
    cluster.isolate(3)
    committed(cluster, 1, change((LEARNER, 4)))
    committed(cluster, 1, change((ADD, 4)))
    cluster[1].transfer_leadership(4)
    cluster.settle()
    assert cluster[4].role is Role.LEADER
    cluster.crash(1)
    cluster.heal()
    assert 4 not in cluster[3].configuration.ids()
    index = cluster.propose(4, b"needs node 3")
    cluster.tick(cluster.config.push_timeout_ticks)  # 4 probes 3's log again
    assert cluster.results(4)[index].code.name == "SUCCESS"
    assert cluster[3].leader_id == 4
    assert cluster[3].configuration.voters.incoming.voters == {1, 2, 3, 4}
