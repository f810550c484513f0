"""The in-memory log mirror and the leader's progress tracker."""

from __future__ import annotations

import pytest

from triomq.consensus.core.confchange import (
    ConfChangeSingle,
    ConfChangeType,
    ConfChangeV2,
    Configuration,
    ConfState,
)
from triomq.consensus.core.log import (
    Entry,
    EntryKind,
    LogError,
    RaftLog,
    Snapshot,
    bootstrap_entries,
)
from triomq.consensus.core.quorum import JointConfig
from triomq.consensus.core.tracker import ProgressState, ProgressTracker


def _log(extra_terms=(2, 2, 3)):
    _, entries = bootstrap_entries([1, 2, 3])
    log = RaftLog(Snapshot(), entries)
    for term in extra_terms:
        log.append(Entry(log.last_index + 1, term, b"x"))
    return log


def test_bounds_terms_and_slices():
    log = _log()
    assert (log.first_index, log.last_index, log.last_term) == (1, 6, 3)
    assert log.term_at(0) == 0 and log.term_at(4) == 2 and log.term_at(7) is None
    assert [e.index for e in log.slice(2, 4)] == [2, 3, 4]
    assert log.slice(5, 2) == []
    assert log.is_up_to_date(6, 3) and log.is_up_to_date(1, 4)
    assert not log.is_up_to_date(9, 2) and not log.is_up_to_date(5, 3)


def test_append_rejects_gaps_and_older_terms():
    log = _log()
    with pytest.raises(LogError, match="does not follow"):
        log.append(Entry(9, 3))
    with pytest.raises(LogError, match="term"):
        log.append(Entry(7, 2))
    log.compact(Snapshot(4, 2, ConfState(voters=[1, 2, 3])))
    with pytest.raises(LogError, match="inside the snapshot"):
        log.truncate_after(2)


def test_extend_is_append_of_each():
    remove_3 = ConfChangeV2([ConfChangeSingle(ConfChangeType.REMOVE_NODE, 3)])
    add_4 = ConfChangeV2([ConfChangeSingle(ConfChangeType.ADD_NODE, 4)])
    batch = [
        Entry(4, 2, b"a"),
        Entry(5, 2, remove_3.encode(), EntryKind.CONF_CHANGE),
        Entry(6, 3, b"b"),
        Entry(7, 3, add_4.encode(), EntryKind.CONF_CHANGE),
    ]
    one_by_one, extended = _log(()), _log(())
    for entry in batch:
        one_by_one.append(entry)
    extended.extend(batch)
    assert extended.entries == one_by_one.entries
    assert [extended.configuration_at(i) for i in range(3, 8)] == [
        one_by_one.configuration_at(i) for i in range(3, 8)
    ]
    assert extended.configuration.voters.incoming.voters == {1, 2, 4}


def test_extend_rejects_gaps_disorder_and_older_terms_whole():
    log = _log()
    for bad in (
        [Entry(8, 3)],
        [Entry(7, 2)],
        [Entry(7, 3), Entry(9, 3)],
        [Entry(7, 4), Entry(8, 3)],
    ):
        with pytest.raises(LogError):
            log.extend(bad)
        assert log.last_index == 6
    log.extend([])
    assert log.last_index == 6


def test_compact_keeps_the_matching_suffix_and_configuration():
    log = _log()
    log.compact(Snapshot(4, 2, ConfState(voters=[1, 2, 3])))
    assert log.first_index == 5 and log.last_index == 6
    assert log.term_at(4) == 2 and log.term_at(3) is None and log.get(4) is None
    assert log.configuration.voters.incoming.voters == {1, 2, 3}
    # A snapshot the log does not match replaces everything.
    log.compact(Snapshot(10, 7, ConfState(voters=[1, 2])))
    assert log.entries == [] and log.last_index == 10
    assert log.configuration.voters.incoming.voters == {1, 2}


def test_configuration_history():
    log = _log(())
    change = ConfChangeV2([ConfChangeSingle(ConfChangeType.REMOVE_NODE, 3)])
    log.append(Entry(4, 2, change.encode(), EntryKind.CONF_CHANGE))
    assert log.configuration_at(3).voters.incoming.voters == {1, 2, 3}
    assert log.configuration.voters.incoming.voters == {1, 2}
    assert [c.voters.incoming.voters for c in log.configurations_since(3)] == [
        {1, 2, 3},
        {1, 2},
    ]
    assert log.known_ids() == {1, 2, 3}
    # A change that cannot apply (removing the last voters) changes nothing.
    bad = ConfChangeV2([ConfChangeSingle(ConfChangeType.REMOVE_NODE, 1)])
    log.append(Entry(5, 2, bad.encode(), EntryKind.CONF_CHANGE))
    log.append(Entry(6, 2, bad.encode(), EntryKind.CONF_CHANGE))
    assert log.configuration.voters.incoming.voters == {2}
    with pytest.raises(Exception, match="not CONF_CHANGE"):
        Entry(1, 1).conf_change()


def test_tracker_follows_configurations_and_counts_quorums():
    config = Configuration(voters=JointConfig([1, 2, 3], [1, 4]), learners=[5])
    tracker = ProgressTracker(1, config)
    assert set(tracker.progress) == {2, 3, 4, 5}
    tracker.progress[2].acknowledge(7)
    tracker.progress[3].acknowledge(5)
    tracker.progress[4].acknowledge(6)
    tracker.progress[5].acknowledge(9)  # a learner never counts
    assert tracker.committed(self_index=8) == 6
    assert not tracker.quorum_active()
    tracker.progress[2].recent_active = True
    assert not tracker.quorum_active()  # the outgoing half {1, 4} lacks 4
    tracker.progress[4].recent_active = True
    assert tracker.quorum_active()
    tracker.update(Configuration(voters=[1, 2]))
    assert set(tracker.progress) == {2}


def test_progress_transitions():
    tracker = ProgressTracker(1, Configuration(voters=[1, 2]))
    progress = tracker.progress[2]
    assert progress.state is ProgressState.COMPARE
    progress.become_append(4)
    progress.pending.update({5: 0, 6: 0, 7: 0})
    progress.acknowledge(6)
    assert progress.match_index == 6 and list(progress.pending) == [7]
    progress.become_compare()
    assert progress.state is ProgressState.COMPARE and not progress.pending
    assert progress.match_index == 6  # a watermark never goes back within a term


def test_entries_covered_by_the_snapshot_are_skipped_on_load():
    _, entries = bootstrap_entries([1, 2, 3])
    more = (*entries, Entry(4, 2, b"a"), Entry(5, 2, b"b"))
    log = RaftLog(Snapshot(4, 2, ConfState(voters=[1, 2, 3])), more)
    assert (log.first_index, log.last_index) == (5, 5)
    assert log.get(5).data == b"b"
