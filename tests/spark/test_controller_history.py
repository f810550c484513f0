"""``triomq.controller.core.history``: the commit point of controllers' logs, and the replay."""

from __future__ import annotations

from triomq.consensus.core.confchange import ConfState
from triomq.consensus.core.log import Entry, EntryKind, RaftLog, Snapshot
from triomq.controller import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    ElectMasterEvent,
    ReplicasInfoManager,
    encode_event,
)
from triomq.controller.core.history import commit_point, replay

VOTERS = ConfState(voters=[1, 2, 3])
EVENTS = [
    ApplyBrokerIdEvent("c", "b", 1, "10.0.0.1:1", "x1"),
    ApplyBrokerIdEvent("c", "b", 2, "10.0.0.2:1", "x2"),
    ElectMasterEvent("b", 1, 1, 1),
    AlterSyncStateSetEvent("b", 1, {1, 2}, 2),
    ElectMasterEvent("b", 2, 2, 3),
]


def log_of(terms: list[int], snapshot: Snapshot | None = None) -> RaftLog:
    """A log whose entries after the snapshot have ``terms``; NOOPs open each term."""
    snap = snapshot or Snapshot(conf_state=VOTERS)
    entries, events = [], iter(EVENTS)
    previous = snap.term
    for i, term in enumerate(terms, snap.index + 1):
        if term != previous:
            entries.append(Entry(i, term, b"", EntryKind.NOOP))
        else:
            entries.append(Entry(i, term, encode_event(next(events))))
        previous = term
    return RaftLog(snap, entries)


def test_the_newest_terms_entries_on_a_quorum_are_committed():
    full = [1, 1, 1, 1, 1, 1]
    point = commit_point([log_of(full), log_of(full[:4]), log_of(full[:5])])
    assert (point.index, point.term, point.basis) == (5, 1, "quorum")
    assert point.source in (0, 2)


def test_an_older_term_on_a_quorum_is_not_committed_when_a_newer_term_exists():
    # Raft's figure 8: term 1 on all three, but one log has an entry of term 2 that
    # could still win an election and overwrite it.
    logs = [log_of([1, 1, 1]), log_of([1, 1, 1]), log_of([1, 1, 2])]
    point = commit_point(logs)
    assert (point.index, point.basis) == (0, "snapshot")


def test_fewer_logs_than_members_prove_only_the_snapshots():
    logs = [log_of([1, 1, 1, 1]), log_of([1, 1, 1, 1])]
    assert commit_point(logs).basis == "snapshot"


def test_a_snapshot_alone_is_committed():
    state = ReplicasInfoManager()
    for event in EVENTS[:3]:
        assert state.apply(event)
    snap = Snapshot(7, 2, VOTERS, state.snapshot())
    point = commit_point([log_of([2, 2], snap)])
    assert (point.index, point.term, point.basis) == (7, 2, "snapshot")
    history = replay([log_of([2, 2], snap)])
    assert history.groups["b"].master_broker_id == 1
    assert [(m.broker_id, m.event, m.index) for m in history.master_changes] == [
        (1, "snapshot", 7)]


def test_replay_lists_master_and_sync_state_set_changes_with_their_raft_position():
    terms = [1, 1, 1, 1, 1, 1]
    logs = [log_of(terms), log_of(terms), log_of(terms)]
    history = replay(logs)
    assert history.commit.index == 6 and history.undecodable == 0
    assert [(m.broker_id, m.master_epoch, m.address, m.event, m.index, m.term)
            for m in history.master_changes] == [
        (1, 1, "10.0.0.1:1", "ElectMaster", 4, 1), (2, 2, "10.0.0.2:1", "ElectMaster", 6, 1)]
    assert [(sorted(c.sync_state_set), c.sync_state_set_epoch, c.index)
            for c in history.sync_state_set_changes] == [
        ([1], 1, 4), ([1, 2], 2, 5), ([2], 3, 6)]
    group = history.groups["b"]
    assert (group.master_broker_id, group.master_epoch, group.sync_state_set) == (2, 2, {2})


def test_replay_stops_at_the_commit_point():
    logs = [log_of([1, 1, 1, 1, 1, 1]), log_of([1, 1, 1, 1]), log_of([1, 1, 1, 1])]
    history = replay(logs)
    assert history.commit.index == 4
    assert [m.index for m in history.master_changes] == [4]
