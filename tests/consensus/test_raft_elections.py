"""Elections: pre-vote, check-quorum, leases, persistence order, transfer."""

from __future__ import annotations

import pytest

from triomq.consensus.core.log import HardState, bootstrap_entries
from triomq.consensus.core.messages import TimeoutNow, VoteRequest, VoteResponse
from triomq.consensus.core.raft import ProposalRejected, Raft, RaftSettings
from triomq.consensus.core.ready import PersistHardState, Role
from triomq.errors import ConfigError
from triomq.testing.raftsim_cluster import RaftCluster


def test_single_node_elects_itself_and_commits():
    cluster = RaftCluster([1])
    cluster.run_until(lambda: cluster[1].role is Role.LEADER)
    index = cluster.propose(1, b"x")
    assert cluster[1].commit_index == index
    assert cluster.applied_data(1) == [b"x"]


def test_three_nodes_elect_one_leader_by_timeout():
    cluster = RaftCluster()
    cluster.run_until(lambda: cluster.leader() is not None)
    leader = cluster.leader()
    terms = {cluster[i].term for i in (1, 2, 3)}
    assert len(terms) == 1
    assert [cluster[i].leader_id for i in (1, 2, 3)] == [leader] * 3


def test_vote_is_persisted_in_the_same_ready_before_the_response():
    hard_state, entries = bootstrap_entries([1, 2, 3])
    voter = Raft(2, hard_state=hard_state, entries=entries)
    voter.step(VoteRequest(src=1, dst=2, term=2, last_index=3, last_term=1))
    ready = voter.ready()
    assert PersistHardState(HardState(term=2, vote=1)) in ready.writes
    assert ready.messages == (VoteResponse(src=2, dst=1, term=2, granted=True),)


def test_candidate_persists_term_and_self_vote_before_requests():
    hard_state, entries = bootstrap_entries([1, 2, 3])
    node = Raft(1, RaftSettings(pre_vote=False), hard_state=hard_state, entries=entries)
    node.campaign()
    ready = node.ready()
    assert ready.writes == (PersistHardState(HardState(term=2, vote=1)),)
    assert {m.dst for m in ready.messages} == {2, 3}
    assert all(isinstance(m, VoteRequest) and m.term == 2 for m in ready.messages)


def test_one_vote_per_term_and_up_to_date_check():
    hard_state, entries = bootstrap_entries([1, 2, 3])
    voter = Raft(3, hard_state=hard_state, entries=entries)
    voter.step(VoteRequest(src=1, dst=3, term=2, last_index=3, last_term=1))
    voter.step(VoteRequest(src=2, dst=3, term=2, last_index=3, last_term=1))
    granted = [m.granted for m in voter.ready().messages]
    assert granted == [True, False]
    # A candidate whose log is behind is refused even in a fresh term.
    voter.step(VoteRequest(src=2, dst=3, term=3, last_index=2, last_term=1))
    assert [m.granted for m in voter.ready().messages] == [False]


def test_pre_vote_keeps_a_partitioned_node_from_inflating_terms():
    cluster = RaftCluster()
    cluster.elect(1)
    term = cluster[1].term
    cluster.isolate(3)
    cluster.tick(60)
    assert cluster[3].term == term  # pre-votes never reached a quorum
    assert cluster[3].role is Role.PRE_CANDIDATE or cluster[3].role is Role.FOLLOWER
    cluster.heal()
    cluster.tick(3)
    assert cluster.leader() == 1
    assert cluster[1].term == term


def test_without_pre_vote_the_partitioned_node_disrupts():
    cluster = RaftCluster(config=RaftSettings(pre_vote=False, check_quorum=False))
    cluster.elect(1)
    term = cluster[1].term
    cluster.isolate(3)
    cluster.tick(60)
    assert cluster[3].term > term + 1


def test_check_quorum_makes_an_isolated_leader_step_down():
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.isolate(1)
    cluster.tick(25, nodes=[1])
    assert cluster[1].role is Role.FOLLOWER


def test_without_check_quorum_an_isolated_leader_stays():
    cluster = RaftCluster(config=RaftSettings(check_quorum=False))
    cluster.elect(1)
    cluster.isolate(1)
    cluster.tick(25, nodes=[1])
    assert cluster[1].role is Role.LEADER


def test_lease_ignores_vote_requests_while_the_leader_is_alive():
    cluster = RaftCluster(config=RaftSettings(pre_vote=False))
    cluster.elect(1)
    term = cluster[1].term
    cluster[2].step(VoteRequest(src=3, dst=2, term=term + 5, last_index=99, last_term=term))
    assert cluster[2].term == term
    assert not cluster[2].ready().messages


def test_stale_leader_learns_the_new_term_and_steps_down():
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.isolate(1)
    cluster.run_until(lambda: cluster[2].role is Role.LEADER or cluster[3].role is Role.LEADER)
    new = cluster.leader()
    assert new in (2, 3)
    assert cluster[1].role is Role.LEADER  # still believes it
    cluster.heal()
    cluster.tick(2, nodes=[1])
    assert cluster[1].role is Role.FOLLOWER
    assert cluster[1].term == cluster[new].term


def test_learner_never_campaigns():
    cluster = RaftCluster([1])
    cluster.elect(1)
    cluster.add_node(2)
    from triomq.consensus.core.confchange import ConfChangeSingle, ConfChangeType, ConfChangeV2

    change = ConfChangeV2([ConfChangeSingle(ConfChangeType.ADD_LEARNER_NODE, 2)])
    cluster[1].propose_conf_change(change)
    cluster.settle()
    assert cluster[2].configuration.learners == {2}
    cluster.crash(1)
    cluster.tick(100)
    assert cluster[2].role is Role.FOLLOWER
    assert not any(isinstance(m, VoteRequest) and m.src == 2 for m in cluster.delivered)


def test_leadership_transfer():
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.propose(1, b"a")
    cluster[1].transfer_leadership(3)
    cluster.settle()
    assert cluster.leader() == 3
    assert cluster[1].role is Role.FOLLOWER
    assert any(isinstance(m, TimeoutNow) for m in cluster.delivered)
    cluster.propose(3, b"b")
    cluster.tick()  # followers learn the commit index from the next push
    assert cluster.applied_data(1) == [b"a", b"b"]


def test_transfer_waits_for_the_target_to_catch_up_and_blocks_proposals():
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.isolate(3)
    cluster.propose(1, b"a")
    cluster[1].transfer_leadership(3)
    with pytest.raises(ProposalRejected, match="LEADER_TRANSFERRING"):
        cluster[1].propose(b"b")
    cluster.heal()
    cluster.run_until(lambda: cluster.leader() == 3, max_ticks=10)


def test_transfer_is_abandoned_after_an_election_timeout():
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.isolate(3)
    cluster[1].transfer_leadership(3)
    cluster.tick(11, nodes=[1, 2])
    assert cluster[1].transferee == 0
    cluster.propose(1, b"again")


def test_transfer_rejections():
    cluster = RaftCluster()
    cluster.elect(1)
    with pytest.raises(ProposalRejected, match="not a voter"):
        cluster[1].transfer_leadership(9)
    with pytest.raises(ProposalRejected, match="NOT_LEADER"):
        cluster[2].transfer_leadership(3)
    cluster[1].transfer_leadership(1)
    assert cluster[1].transferee == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [("election_ticks", 0), ("heartbeat_ticks", -1), ("max_pending_size", 1.5)],
)
def test_config_validation(field, value):
    with pytest.raises(ConfigError, match=field):
        RaftSettings(**{field: value})
    with pytest.raises(ConfigError, match="heartbeat_ticks"):
        RaftSettings(election_ticks=3, heartbeat_ticks=3)
    with pytest.raises(ConfigError, match="node_id"):
        Raft(0)
    with pytest.raises(ConfigError, match="voters"):
        bootstrap_entries([])
