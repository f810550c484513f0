"""The conformance suites of the stores a Raft node keeps its durable state in.

``EntryLogSuite`` checks an ``EntryLog`` (Raft entries by index, the hard
state) and ``MetaStoreSuite`` a ``MetaStore`` (the small key-value store
that holds the snapshot); ``triomq.testing.store_suite`` says how to run them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from triomq.store import EntryLog, EntryRecord, HardState, IndexOutOfRange, MetaStore, StoreError
from triomq.testing.store_suite_base import _StoreSuite


class EntryLogSuite(_StoreSuite):
    """Conformance tests of an ``EntryLog`` factory (set ``factory``)."""

    @staticmethod
    def entries(lo: int, hi: int, term: int = 1, size: int = 10) -> list[EntryRecord]:
        return [EntryRecord(i, term, bytes([i % 256]) * size) for i in range(lo, hi)]

    def test_satisfies_protocol(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            assert isinstance(log, EntryLog)

    def test_empty(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            assert (log.first_index, log.last_index) == (1, 0)
            assert log.term_at(0) == 0
            assert log.hard_state == HardState()
            with pytest.raises(IndexOutOfRange):
                log.get(1)

    def test_append_get_slice(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            log.append(self.entries(1, 6, term=1))
            log.append(self.entries(6, 11, term=2))
            log.sync()
            assert log.last_index == 10
            assert log.get(7) == EntryRecord(7, 2, bytes([7]) * 10)
            assert [e.index for e in log.entries(3, 8)] == [3, 4, 5, 6, 7]
            assert [e.index for e in log.entries(3, 8, max_bytes=25)] == [3, 4]
            assert [e.index for e in log.entries(3, 8, max_bytes=1)] == [3]
            assert log.term_at(5) == 1
            assert log.term_at(6) == 2
            with pytest.raises(StoreError):
                log.append(self.entries(12, 13))
            with pytest.raises(IndexOutOfRange):
                log.entries(5, 12)

    def test_many_entries_cross_segments(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            log.append([EntryRecord(i, 1 + i // 100, bytes(i % 700)) for i in range(1, 400)])
        with self.opened(tmp_path) as log:
            assert log.last_index == 399
            assert log.get(399) == EntryRecord(399, 4, bytes(399 % 700))
            assert log.get(250).data == bytes(250)

    def test_append_records_is_append(self, tmp_path: Path) -> None:
        entries = [EntryRecord(i, 1 + i // 100, bytes([i % 256]) * (i % 700))
                   for i in range(1, 400)]
        with self.opened(tmp_path) as log:
            log.append_records(1, [e.term for e in entries[:7]], [e.data for e in entries[:7]])
            # Batches big enough to reach segment ends, then one at a time.
            for lo, hi in ((7, 150), (150, 390), *((i, i + 1) for i in range(390, 399))):
                part = entries[lo:hi]
                log.append_records(lo + 1, [e.term for e in part], [e.data for e in part])
            assert log.entries(1, 400) == entries
        with self.opened(tmp_path) as log:
            assert log.entries(1, 400) == entries
            assert log.term_at(399) == 4

    def test_append_records_refuses_gaps_and_mismatches(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            log.append_records(1, [1, 1], [b"a", b"b"])
            with pytest.raises(StoreError):
                log.append_records(4, [1], [b"d"])
            with pytest.raises(StoreError):
                log.append_records(3, [1, 1], [b"c"])
            log.append_records(3, [], [])
            assert log.last_index == 2
            assert log.get(2) == EntryRecord(2, 1, b"b")

    def test_truncate_suffix(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            log.append(self.entries(1, 21))
            log.truncate_suffix(15)
            assert log.last_index == 14
            log.append(self.entries(15, 18, term=3))
            log.truncate_suffix(100)
        with self.opened(tmp_path) as log:
            assert log.last_index == 17
            assert log.term_at(15) == 3
            assert log.term_at(14) == 1

    def test_compact_prefix(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            log.append(self.entries(1, 11, term=1))
            log.append(self.entries(11, 21, term=2))
            log.compact_prefix(12)
            assert (log.first_index, log.last_index) == (12, 20)
            assert log.term_at(11) == 2
            with pytest.raises(IndexOutOfRange):
                log.get(11)
        with self.opened(tmp_path) as log:
            assert (log.first_index, log.last_index) == (12, 20)
            assert log.term_at(11) == 2
            assert log.get(12).term == 2
            log.compact_prefix(21)
            assert (log.first_index, log.last_index) == (21, 20)
            log.append(self.entries(21, 23, term=5))
        with self.opened(tmp_path) as log:
            assert [e.index for e in log.entries(21, 23)] == [21, 22]

    def test_compact_past_the_end_needs_a_term(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            log.append(self.entries(1, 4))
            with pytest.raises(IndexOutOfRange):
                log.compact_prefix(50)
            log.compact_prefix(50, term=7)
            assert (log.first_index, log.last_index, log.term_at(49)) == (50, 49, 7)
            log.append(self.entries(50, 52, term=8))
        with self.opened(tmp_path) as log:
            assert (log.first_index, log.last_index, log.term_at(49)) == (50, 51, 7)

    def test_hard_state(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            log.set_hard_state(HardState(term=3, vote=2))
            log.set_hard_state(HardState(term=4, vote=0))
        with self.opened(tmp_path) as log:
            assert log.hard_state == HardState(term=4, vote=0)


class MetaStoreSuite(_StoreSuite):
    """Conformance tests of a ``MetaStore`` factory (set ``factory``)."""

    def test_satisfies_protocol(self, tmp_path: Path) -> None:
        store = self.open(tmp_path)
        assert isinstance(store, MetaStore)
        store.close()

    def test_put_get_delete_items(self, tmp_path: Path) -> None:
        store = self.open(tmp_path)
        assert store.get("a") is None
        store.put("b", b"2")
        store.put("a", b"1")
        store.put_many({"c": b"3", "a": b"one"})
        store.delete("b")
        store.delete("missing")
        assert store.items() == [("a", b"one"), ("c", b"3")]
        store.close()
        store = self.open(tmp_path)
        assert store.get("a") == b"one"
        assert store.items() == [("a", b"one"), ("c", b"3")]
        store.put("bin", bytes(range(256)))
        store.close()
        store = self.open(tmp_path)
        assert store.get("bin") == bytes(range(256))
        store.close()
