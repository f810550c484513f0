"""DLedger push replication: compare, truncate, pipelined append, commit."""

from __future__ import annotations

from triomq.consensus.core.log import Entry, EntryKind, bootstrap_entries
from triomq.consensus.core.messages import (
    DLedgerCode,
    HeartbeatRequest,
    PushRequest,
    PushResponse,
    PushType,
)
from triomq.consensus.core.raft import ProposalRejected, Raft, RaftSettings
from triomq.consensus.core.ready import AppendEntries, Role, TruncateSuffix
from triomq.testing.raftsim_cluster import RaftCluster


def pushes(cluster, push_type, dst=None):
    return [
        m
        for m in cluster.delivered
        if isinstance(m, PushRequest) and m.type is push_type and (dst is None or m.dst == dst)
    ]


def test_entries_replicate_and_commit_on_every_node():
    cluster = RaftCluster()
    cluster.elect(1)
    for i in range(5):
        cluster.propose(1, b"cmd%d" % i)
    cluster.tick()
    expected = [b"cmd%d" % i for i in range(5)]
    for node in (1, 2, 3):
        assert cluster.applied_data(node) == expected
    results = cluster.results(1)
    assert {r.code for r in results.values()} == {DLedgerCode.SUCCESS}
    assert pushes(cluster, PushType.COMPARE)  # every new leader compares first


def test_proposal_on_a_follower_is_rejected_with_the_leader_hint():
    cluster = RaftCluster()
    cluster.elect(2)
    try:
        cluster[1].propose(b"x")
    except ProposalRejected as rejected:
        assert rejected.code is DLedgerCode.NOT_LEADER
        assert rejected.leader_id == 2
    else:
        raise AssertionError("a follower accepted a proposal")


def test_divergent_suffix_is_truncated():
    cluster = RaftCluster()
    cluster.elect(1)
    common = cluster.propose(1, b"common")
    cluster.isolate(1)
    for i in range(3):
        cluster[1].propose(b"lost%d" % i)  # only on node 1
    cluster.settle()
    cluster.run_until(lambda: cluster[2].role is Role.LEADER or cluster[3].role is Role.LEADER)
    new = cluster.leader()
    cluster.propose(new, b"kept")
    cluster.heal()
    cluster.run_until(lambda: cluster[1].log.last_index == cluster[new].log.last_index)
    cluster.tick(2)
    assert cluster[1].log.entries == cluster[new].log.entries
    assert cluster.applied_data(1) == [b"common", b"kept"]
    assert pushes(cluster, PushType.TRUNCATE, dst=1)
    writes = [w for r in cluster.nodes[1].readies for w in r.writes]
    assert any(isinstance(w, TruncateSuffix) for w in writes)
    lost = {r.code for r in cluster.nodes[1].results if r.index > common}
    assert lost == {DLedgerCode.TERM_CHANGED}


def _follower():
    hard_state, entries = bootstrap_entries([1, 2, 3])
    node = Raft(
        2,
        RaftSettings(fast_forward_ticks=2, push_timeout_ticks=2),
        hard_state=hard_state,
        entries=entries,
    )
    node.step(HeartbeatRequest(src=1, dst=2, term=1, commit_index=0))
    node.ready()
    return node


def _append(index, term=1, prev_term=1, commit=0):
    return PushRequest(
        src=1,
        dst=2,
        term=term,
        type=PushType.APPEND,
        index=index,
        commit_index=commit,
        prev_term=prev_term,
        entries=(Entry(index, term, b"e%d" % index),),
    )


def _codes(node):
    return [(m.index, m.code) for m in node.ready().messages if isinstance(m, PushResponse)]


def test_out_of_order_appends_are_buffered_and_duplicates_answered_repeated():
    node = _follower()
    node.step(_append(5))
    node.step(_append(6))
    assert _codes(node) == []
    node.step(_append(5))
    assert _codes(node) == [(5, DLedgerCode.REPEATED_PUSH)]
    node.step(_append(4))
    # One ready() answers the three appends: the ack of 6 covers 4 and 5.
    assert _codes(node) == [(6, DLedgerCode.SUCCESS)]
    assert node.log.last_index == 6


def test_acks_of_one_ready_merge_but_other_answers_stay():
    node = _follower()
    node.step(_append(4))
    node.step(_append(5))
    node.step(_append(5))  # a duplicate of an entry held: SUCCESS again
    node.step(_append(7))  # buffered behind the gap
    node.step(_append(7))
    assert _codes(node) == [(5, DLedgerCode.SUCCESS), (7, DLedgerCode.REPEATED_PUSH)]
    node.step(_append(6))
    assert _codes(node) == [(7, DLedgerCode.SUCCESS)]


def test_fast_forward_check_reports_a_push_stuck_behind_a_gap():
    node = _follower()
    node.step(_append(7))
    for _ in range(3):
        node.tick()
    assert _codes(node) == [(7, DLedgerCode.INCONSISTENT_STATE)]
    assert node.log.last_index == 3


def test_append_that_does_not_fit_is_inconsistent():
    node = _follower()
    node.step(_append(3, term=1))  # already held, same term: an ack
    assert _codes(node) == [(3, DLedgerCode.SUCCESS)]

    def push(index, entry_term, prev_term):
        entries = (Entry(index, entry_term, b"other"),)
        return PushRequest(
            src=1,
            dst=2,
            term=2,
            type=PushType.APPEND,
            index=index,
            commit_index=0,
            prev_term=prev_term,
            entries=entries,
        )

    node.step(push(4, 2, prev_term=2))  # the entry before it has another term here
    assert _codes(node) == [(4, DLedgerCode.INCONSISTENT_STATE)]
    node.step(push(3, 2, prev_term=1))  # held with another term
    assert _codes(node) == [(3, DLedgerCode.INCONSISTENT_STATE)]


def test_a_batch_is_answered_once_up_to_the_first_misfit():
    node = _follower()

    def batch(index, prev_term, *terms, term=2):
        entries = tuple(Entry(index + i, t, b"%d" % t) for i, t in enumerate(terms))
        return PushRequest(
            src=1,
            dst=2,
            term=term,
            type=PushType.APPEND,
            index=index,
            commit_index=0,
            prev_term=prev_term,
            entries=entries,
        )

    node.step(batch(3, 1, 1, 2, 2))  # 3 is held, 4 and 5 are new
    assert _codes(node) == [(5, DLedgerCode.SUCCESS)]
    node.step(batch(4, 1, 2, 2, 2))  # overlaps what is held, then extends
    assert _codes(node) == [(6, DLedgerCode.SUCCESS)]
    node.step(batch(5, 2, 2, 3, 3, term=3))  # 6 is held with another term
    assert _codes(node) == [(6, DLedgerCode.INCONSISTENT_STATE)]
    assert node.log.last_index == 6


def test_follower_does_not_commit_entries_not_known_to_match():
    node = _follower()
    node.step(HeartbeatRequest(src=1, dst=2, term=1, commit_index=3))
    assert node.commit_index == 0  # nothing compared yet in this term
    node.step(
        PushRequest(
            src=1, dst=2, term=1, type=PushType.COMPARE, index=3, commit_index=3, entry_term=1
        )
    )
    assert node.commit_index == 3


def test_pipeline_is_bounded_by_max_pending_size():
    cluster = RaftCluster(config=RaftSettings(max_pending_size=3))
    cluster.elect(1)

    def sent(dst):
        return sum(len(m.entries) for m in pushes(cluster, PushType.APPEND, dst=dst))

    before = sent(2)  # the leader's noop
    cluster.drop = lambda m: isinstance(m, PushResponse) and m.src == 2
    for i in range(10):
        cluster[1].propose(b"%d" % i)
    cluster.settle()
    assert sent(2) == before + 3
    assert sent(3) == before + 10
    # Proposals made between two ready() calls share APPENDs (batch push).
    batches = [m for m in pushes(cluster, PushType.APPEND, dst=3) if len(m.entries) > 1]
    assert batches


def test_byte_quota_limits_each_tick():
    cluster = RaftCluster(config=RaftSettings(push_quota_bytes=1000))
    cluster.elect(1)
    cluster.isolate(3)
    before = len(pushes(cluster, PushType.APPEND, dst=2))
    for _ in range(4):
        cluster[1].propose(bytes(900))
    cluster.settle()
    assert len(pushes(cluster, PushType.APPEND, dst=2)) == before + 1
    cluster.tick()
    assert len(pushes(cluster, PushType.APPEND, dst=2)) == before + 2


def test_lost_append_is_retried_after_the_push_timeout():
    cluster = RaftCluster(config=RaftSettings(push_timeout_ticks=3))
    cluster.elect(1)
    lost = []

    def drop_once(m):
        if isinstance(m, PushRequest) and m.type is PushType.APPEND and m.dst == 2 and not lost:
            lost.append(m)
            return True
        return False

    cluster.drop = drop_once
    cluster.isolate(3)
    index = cluster.propose(1, b"x")
    assert cluster.results(1) == {}
    cluster.tick(3)
    assert cluster.results(1)[index].code is DLedgerCode.SUCCESS
    assert len([m for m in pushes(cluster, PushType.APPEND, dst=2) if m.index == index]) == 1


def test_commit_is_pushed_to_caught_up_followers():
    cluster = RaftCluster(config=RaftSettings(heartbeat_ticks=5, election_ticks=20))
    cluster.elect(1)
    cluster.propose(1, b"x")
    cluster.tick()
    assert pushes(cluster, PushType.COMMIT)
    assert cluster.applied_data(2) == [b"x"]


def test_term_changed_for_proposals_of_a_deposed_leader():
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.isolate(1)
    index = cluster[1].propose(b"orphan")
    cluster.settle()
    cluster.run_until(lambda: cluster[2].role is Role.LEADER or cluster[3].role is Role.LEADER)
    cluster.heal()
    cluster.tick(2)
    assert cluster.results(1)[index].code is DLedgerCode.TERM_CHANGED


def test_wait_quorum_ack_timeout():
    cluster = RaftCluster(config=RaftSettings(max_wait_ack_ticks=4))
    cluster.elect(1)
    cluster.partition({1}, one_way=False)
    index = cluster[1].propose(b"slow")
    cluster.tick(4, nodes=[1])
    assert cluster.results(1)[index].code is DLedgerCode.WAIT_QUORUM_ACK_TIMEOUT


def test_noop_entry_opens_each_term():
    cluster = RaftCluster()
    cluster.elect(1)
    last = cluster[1].log.get(cluster[1].log.last_index)
    assert last.kind is EntryKind.NOOP and last.term == cluster[1].term
    writes = [w for r in cluster.nodes[2].readies for w in r.writes]
    assert any(isinstance(w, AppendEntries) for w in writes)


def _compare_answer(leader, index, next_term):
    progress = leader.tracker.progress[2]
    progress.become_compare()
    progress.compare_index = index
    leader.step(
        PushResponse(
            src=2,
            dst=1,
            term=leader.term,
            type=PushType.COMPARE,
            code=DLedgerCode.SUCCESS,
            index=index,
            begin_index=1,
            end_index=index + 1,
            next_term=next_term,
        )
    )
    return [m for m in leader.ready().messages if isinstance(m, PushRequest) and m.dst == 2]


def test_a_matching_suffix_is_never_truncated():
    cluster = RaftCluster()
    cluster.elect(1)
    cluster.propose(1, b"a")
    leader = cluster[1]
    index = leader.log.last_index - 1
    # The peer's next entry has our term there: the logs match further, compare on.
    [push] = _compare_answer(leader, index, next_term=leader.log.term_at(index + 1))
    assert push.type is PushType.COMPARE and push.index == leader.log.last_index
    # A different term there is a real conflict: truncate after the match.
    [push] = _compare_answer(leader, index, next_term=1)
    assert push.type is PushType.TRUNCATE and push.index == index and push.conflict_term == 1


def test_propose_many_is_propose_of_each():
    one_by_one, batched = RaftCluster(), RaftCluster()
    for cluster in (one_by_one, batched):
        cluster.elect(1)
    commands = [b"cmd%d" % i for i in range(300)]
    indexes = [one_by_one[1].propose(c) for c in commands]
    first = batched[1].propose_many(commands)
    assert list(range(first, first + len(commands))) == indexes
    for cluster in (one_by_one, batched):
        cluster.settle()
        cluster.tick()
    for node in (1, 2, 3):
        assert batched.applied_data(node) == one_by_one.applied_data(node) == commands
    assert batched.results(1) == one_by_one.results(1)
    assert {r.code for r in batched.results(1).values()} == {DLedgerCode.SUCCESS}


def test_propose_many_appends_all_or_nothing():
    cluster = RaftCluster()
    cluster.elect(1)
    last = cluster[1].log.last_index
    try:
        cluster[1].propose_many([b"ok", "not bytes"])
    except TypeError:
        pass
    else:
        raise AssertionError("a str command was accepted")
    assert cluster[1].log.last_index == last
    assert cluster[1].propose_many([]) == last + 1
    assert cluster[1].propose_many([bytearray(b"a"), memoryview(b"b")]) == last + 1
    assert [e.data for e in cluster[1].log.slice(last + 1, last + 2)] == [b"a", b"b"]
    try:
        cluster[2].propose_many([b"x"])
    except ProposalRejected as rejected:
        assert rejected.code is DLedgerCode.NOT_LEADER
    else:
        raise AssertionError("a follower accepted proposals")

