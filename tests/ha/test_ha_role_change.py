"""Role changes (``triomq.ha.core.role_change``): torn tails dropped, <epoch, startOffset>
recorded, stale entries forgotten; the core driven by hand, and through the
simulation's inline driver against a real epoch file."""

from __future__ import annotations

import pytest

from triomq.ha.checkpoint import EpochCheckpointFile
from triomq.ha.core.epoch import EpochCache, EpochStart
from triomq.ha.core.errors import EpochError
from triomq.ha.core.role_change import (
    EndTerm,
    LoadEpochs,
    RoleChange,
    SaveEpochs,
    StartTerm,
    ToMaster,
    ToSlave,
    TruncateTornTail,
)
from triomq.testing.clustersim_parts import change_role


class TornLog:
    """A log whose last whole record ends at ``whole`` (the rest is a torn tail)."""

    def __init__(self, max_offset: int, whole: int, min_offset: int = 0) -> None:
        self.max_offset = max_offset
        self.whole = whole
        self.min_offset = min_offset

    def truncate_to_last_whole_record(self) -> int:
        self.max_offset = self.whole
        return self.whole


def become_master(log, store, epoch: int) -> EpochCache:
    return change_role(RoleChange(ToMaster(epoch, 1), confirmed=-1), log, store,
                       lambda: None).epochs


def become_slave(log, store) -> EpochCache:
    return change_role(RoleChange(ToSlave("m", 1, 2), confirmed=-1), log, store,
                       lambda: None).epochs


def cache(*pairs):
    return EpochCache(EpochStart(e, s) for e, s in pairs)


def test_become_master_records_the_epoch_at_the_last_whole_record(tmp_path):
    store = EpochCheckpointFile(tmp_path)
    store.save(cache((1, 0)))
    log = TornLog(max_offset=130, whole=120)
    epochs = become_master(log, store, 3)
    assert epochs == cache((1, 0), (3, 120))
    assert store.load() == epochs
    assert log.max_offset == 120


def test_restarting_master_continues_its_term(tmp_path):
    store = EpochCheckpointFile(tmp_path)
    store.save(cache((1, 0), (3, 120)))
    assert become_master(TornLog(500, 500), store, 3) == cache(
        (1, 0), (3, 120)
    )
    assert not (tmp_path / "epochFileCheckpoint.bak").exists()  # nothing rewritten


def test_an_epoch_entry_past_the_log_end_is_forgotten(tmp_path):
    # The entry for epoch 3 was saved, but the bytes before it were never flushed.
    store = EpochCheckpointFile(tmp_path)
    store.save(cache((1, 0), (2, 100), (3, 200)))
    assert become_slave(TornLog(150, 150), store) == cache((1, 0), (2, 100))
    assert store.load() == cache((1, 0), (2, 100))
    store.save(cache((1, 0), (3, 200)))
    assert become_master(TornLog(150, 150), store, 3) == cache(
        (1, 0), (3, 150)
    )


def test_stale_epoch_is_refused(tmp_path):
    store = EpochCheckpointFile(tmp_path)
    store.save(cache((1, 0), (5, 10)))
    with pytest.raises(EpochError, match="older"):
        become_master(TornLog(20, 20), store, 4)


def test_become_slave_without_changes_writes_nothing(tmp_path):
    store = EpochCheckpointFile(tmp_path)
    assert become_slave(TornLog(0, 0), store) == EpochCache()
    assert list(tmp_path.iterdir()) == []


def test_a_log_without_epochs_is_adopted_from_its_first_byte(tmp_path):
    # A store written before HA: its bytes become the first term's, so slaves copy them.
    store = EpochCheckpointFile(tmp_path)
    epochs = become_master(TornLog(900, 880, min_offset=300), store, 2)
    assert epochs == cache((2, 300))
    assert store.load() == epochs
    (tmp_path / "empty").mkdir()
    empty = EpochCheckpointFile(tmp_path / "empty")
    assert become_master(TornLog(300, 300, min_offset=300), empty, 2) == cache((2, 300))


def test_a_change_ends_the_term_then_reconciles_the_log_then_starts_the_next():
    change = RoleChange(ToMaster(3, 1, frozenset({1, 2})), confirmed=700)
    assert change.start() == EndTerm()
    assert change.term_ended() == TruncateTornTail()
    assert change.truncated(500, 0) == LoadEpochs()
    assert change.loaded(cache((1, 0))) == SaveEpochs(cache((1, 0), (3, 500)))
    # What the ending term confirmed carries over, capped at the log's end.
    assert change.saved() == StartTerm(ToMaster(3, 1, frozenset({1, 2})),
                                       cache((1, 0), (3, 500)), 500)


def test_a_slave_change_saves_nothing_it_need_not_and_learns_its_confirm_offset_later():
    change = RoleChange(ToSlave("m:1", 4, 2), confirmed=90)
    change.start()
    change.term_ended()
    change.truncated(100, 0)
    assert change.loaded(cache((1, 0), (4, 60))) == StartTerm(ToSlave("m:1", 4, 2),
                                                                cache((1, 0), (4, 60)))


def test_a_restart_confirms_nothing_past_the_logs_start():
    change = RoleChange(ToMaster(2, 1), confirmed=-1)
    change.start()
    change.term_ended()
    change.truncated(900, 300)
    assert change.loaded(cache((2, 300))) == StartTerm(ToMaster(2, 1), cache((2, 300)), 300)
