"""Role changes: torn tails dropped, <epoch, startOffset> recorded, stale entries forgotten."""

from __future__ import annotations

import pytest

from triomq.ha.checkpoint import EpochCheckpointFile
from triomq.ha.epoch import EpochCache, EpochStart
from triomq.ha.errors import EpochError
from triomq.ha.roles import become_master, become_slave


class TornLog:
    """A log whose last whole record ends at ``whole`` (the rest is a torn tail)."""

    def __init__(self, max_offset: int, whole: int, min_offset: int = 0) -> None:
        self.max_offset = max_offset
        self.whole = whole
        self.min_offset = min_offset

    def truncate_to_last_whole_record(self) -> int:
        self.max_offset = self.whole
        return self.whole


async def inline(function, *args):
    return function(*args)


def cache(*pairs):
    return EpochCache(EpochStart(e, s) for e, s in pairs)


async def test_become_master_records_the_epoch_at_the_last_whole_record(tmp_path):
    store = EpochCheckpointFile(tmp_path)
    store.save(cache((1, 0)))
    log = TornLog(max_offset=130, whole=120)
    epochs = await become_master(log, store, 3, offload=inline)
    assert epochs == cache((1, 0), (3, 120))
    assert store.load() == epochs
    assert log.max_offset == 120


async def test_restarting_master_continues_its_term(tmp_path):
    store = EpochCheckpointFile(tmp_path)
    store.save(cache((1, 0), (3, 120)))
    assert await become_master(TornLog(500, 500), store, 3, offload=inline) == cache(
        (1, 0), (3, 120)
    )
    assert not (tmp_path / "epochFileCheckpoint.bak").exists()  # nothing rewritten


async def test_an_epoch_entry_past_the_log_end_is_forgotten(tmp_path):
    # The entry for epoch 3 was saved, but the bytes before it were never flushed.
    store = EpochCheckpointFile(tmp_path)
    store.save(cache((1, 0), (2, 100), (3, 200)))
    assert await become_slave(TornLog(150, 150), store, offload=inline) == cache((1, 0), (2, 100))
    assert store.load() == cache((1, 0), (2, 100))
    store.save(cache((1, 0), (3, 200)))
    assert await become_master(TornLog(150, 150), store, 3, offload=inline) == cache(
        (1, 0), (3, 150)
    )


async def test_stale_epoch_is_refused(tmp_path):
    store = EpochCheckpointFile(tmp_path)
    store.save(cache((1, 0), (5, 10)))
    with pytest.raises(EpochError, match="older"):
        await become_master(TornLog(20, 20), store, 4, offload=inline)


async def test_become_slave_without_changes_writes_nothing(tmp_path):
    store = EpochCheckpointFile(tmp_path)
    assert await become_slave(TornLog(0, 0), store, offload=inline) == EpochCache()
    assert list(tmp_path.iterdir()) == []


async def test_a_log_without_epochs_is_adopted_from_its_first_byte(tmp_path):
    # A store written before HA: its bytes become the first term's, so slaves copy them.
    store = EpochCheckpointFile(tmp_path)
    epochs = await become_master(TornLog(900, 880, min_offset=300), store, 2, offload=inline)
    assert epochs == cache((2, 300))
    assert store.load() == epochs
    (tmp_path / "empty").mkdir()
    empty = EpochCheckpointFile(tmp_path / "empty")
    assert await become_master(TornLog(300, 300, min_offset=300), empty, 2,
                               offload=inline) == cache((2, 300))
