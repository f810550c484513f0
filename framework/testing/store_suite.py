"""The store conformance suite: what every ``triomq_log_store`` implementation must do.

Three pytest base classes, one per store kind. To run the suite against a
store, subclass in a test module of your own and name the factory (the
callable your ``triomq_log_store`` hook returns)::

    from triomq.testing.store_suite import CommitLogSuite, EntryLogSuite, MetaStoreSuite
    from my_store import MyCommitLog, MyEntryLog, MyMeta

    class TestMyCommitLog(CommitLogSuite):
        factory = staticmethod(MyCommitLog.open)

    class TestMyEntryLog(EntryLogSuite):
        factory = staticmethod(MyEntryLog.open)

    class TestMyMeta(MetaStoreSuite):
        factory = staticmethod(MyMeta.open)

``triomq.testing.store_models`` adds hypothesis stateful tests of the same
factories against in-memory models: ``commitlog_model_test(TestMyCommitLog)``
and ``entrylog_model_test(TestMyEntryLog)`` return test cases to assign to a
``Test...`` name in the module.

``options`` (a class attribute) is merged into what the suite passes the
factory; the commit-log suite always passes ``segment_size``
(``SEGMENT_SIZE``, small so that blanks and segment crossings happen).
Run with ``pytest``; each test uses ``tmp_path`` and reopens the store to
check persistence.
"""

from __future__ import annotations

import contextlib
import itertools
import random
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from triomq.protocol.commitlog_layout import BLANK_MAGIC, segment_start, tags_code
from triomq.protocol.message import MessageRecord, encode
from triomq.store import (
    CommitLog,
    Entry,
    EntryLog,
    HardState,
    IndexOutOfRange,
    MetaStore,
    OffsetMismatch,
    OffsetOutOfRange,
    StoreCorruption,
    StoreError,
)

SEGMENT_SIZE = 4096
Factory = Callable[[str, Mapping[str, Any]], Any]


def make_record(i: int, *, topic: str = "t", queue_id: int = 0, body_size: int = 50,
                tags: str | None = "tagA") -> MessageRecord:
    """A record whose body and timestamps derive from ``i``."""
    props = {"UNIQ_KEY": f"k{i}"}
    if tags:
        props["TAGS"] = tags
    return MessageRecord(
        topic=topic, body=bytes((i + j) % 251 for j in range(body_size)), queue_id=queue_id,
        born_timestamp=1_000_000 + i, store_timestamp=2_000_000 + 10 * i,
        born_host=("10.0.0.1", 4000), store_host=("10.0.0.2", 10911), properties=props,
    )


def same_message(a: MessageRecord, b: MessageRecord) -> bool:
    """Equal apart from the offsets the log assigns."""
    return (a.topic, a.body, a.queue_id, a.store_timestamp, dict(a.properties)) == (
        b.topic, b.body, b.queue_id, b.store_timestamp, dict(b.properties))


class _StoreSuite:
    """What the suites share: ``factory``, ``options`` and opening helpers."""

    factory: ClassVar[Factory]
    options: ClassVar[Mapping[str, Any]] = {}
    defaults: ClassVar[Mapping[str, Any]] = {}

    def open(self, path: Path | str, **extra: Any) -> Any:
        return type(self).factory(str(path), {**self.defaults, **self.options, **extra})

    @contextlib.contextmanager
    def opened(self, path: Path | str, **extra: Any) -> Iterator[Any]:
        store = self.open(path, **extra)
        try:
            yield store
        finally:
            store.close()


class CommitLogSuite(_StoreSuite):
    """Conformance tests of a ``CommitLog`` factory (set ``factory``)."""

    defaults: ClassVar[Mapping[str, Any]] = {"segment_size": SEGMENT_SIZE}

    def fill(self, log: CommitLog, n: int, *, queues: int = 3, body_size: int = 120
             ) -> list[MessageRecord]:
        records = [make_record(i, queue_id=i % queues, body_size=body_size) for i in range(n)]
        log.append_batch(records)
        return records

    def test_satisfies_protocol(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            assert isinstance(log, CommitLog)

    def test_empty(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            assert (log.min_offset, log.max_offset, log.flushed_offset) == (0, 0, 0)
            assert log.read(0, 100) == b""
            assert list(log.iter_records()) == []
            assert log.queues() == []
            assert log.queue_max_offset("t", 0) == 0
            assert log.earliest_store_time("t", 0) is None

    def test_append_assigns_offsets(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            results = [log.append(make_record(i, queue_id=i % 2)) for i in range(6)]
            assert results[0].physical_offset == 0
            for a, b in itertools.pairwise(results):
                assert b.physical_offset == a.physical_offset + a.size
            assert [r.queue_offset for r in results] == [0, 0, 1, 1, 2, 2]
            assert log.max_offset == results[-1].physical_offset + results[-1].size
            for i, res in enumerate(results):
                rec = log.read_record(res.physical_offset)
                assert same_message(rec, make_record(i, queue_id=i % 2))
                assert (rec.physical_offset, rec.queue_offset) == (res.physical_offset,
                                                                   res.queue_offset)

    def test_batch_equals_singles(self, tmp_path: Path) -> None:
        records = [make_record(i, queue_id=i % 3, body_size=200 + i) for i in range(60)]
        with self.opened(tmp_path / "a") as a, self.opened(tmp_path / "b") as b:
            for r in records:
                a.append(r)
            b.append_batch(records[:7])
            b.append_batch(records[7:])
            assert a.max_offset == b.max_offset
            assert a.read(0, a.max_offset) == b.read(0, b.max_offset)

    def test_blank_padding_and_no_record_crosses_a_segment(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            results = log.append_batch([make_record(i, body_size=300) for i in range(40)])
            assert log.max_offset > 3 * SEGMENT_SIZE
            for res in results:
                assert (segment_start(res.physical_offset, SEGMENT_SIZE)
                        == segment_start(res.physical_offset + res.size - 1, SEGMENT_SIZE))
            # The bytes between a segment's last record and its end are a blank.
            for a, b in itertools.pairwise(results):
                end = a.physical_offset + a.size
                if end != b.physical_offset:
                    head = log.read(end, 8)
                    assert int.from_bytes(head[:4], "big") == b.physical_offset - end
                    assert int.from_bytes(head[4:], "big") == BLANK_MAGIC
                    assert b.physical_offset % SEGMENT_SIZE == 0

    def test_reads_span_segments(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            self.fill(log, 100)
            whole = log.read(0, log.max_offset)
            assert len(whole) == log.max_offset
            pieces = b"".join(log.read(o, 1000) for o in range(0, log.max_offset, 1000))
            assert pieces == whole
            assert log.read(SEGMENT_SIZE - 10, 20) == whole[SEGMENT_SIZE - 10:SEGMENT_SIZE + 10]
            assert log.read(log.max_offset - 5, 100) == whole[-5:]

    def test_read_into_equals_read(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            self.fill(log, 100)
            whole = log.read(0, log.max_offset)
            buffer = bytearray(b"\xff" * 3000)
            for offset in (0, SEGMENT_SIZE - 10, log.max_offset - 5, log.max_offset):
                n = log.read_into(offset, buffer)
                assert n == min(len(buffer), log.max_offset - offset)
                assert buffer[:n] == whole[offset:offset + n]
                assert buffer[n:] == b"\xff" * (len(buffer) - n)  # nothing past the log end
                buffer[:] = b"\xff" * len(buffer)
            with pytest.raises(OffsetOutOfRange):
                log.read_into(log.max_offset + 1, buffer)

    def test_read_view_equals_read(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            self.fill(log, 100)
            whole = log.read(0, log.max_offset)
            scratch = bytearray(3000)
            for offset in (0, SEGMENT_SIZE - 10, log.max_offset - 5, log.max_offset):
                with log.read_view(offset, scratch) as view:
                    assert view.readonly
                    # Up to the scratch's size, the log's end or (lent) a segment's end.
                    end = min(offset + len(scratch), log.max_offset)
                    assert (len(view) == end - offset
                            or (len(view) > 0 and (offset + len(view)) % SEGMENT_SIZE == 0))
                    assert view == whole[offset:offset + len(view)]
            with pytest.raises(OffsetOutOfRange):
                log.read_view(log.max_offset + 1, scratch)
        # Every view released: the log truncated and closed as usual.
        with self.opened(tmp_path) as log:
            with log.read_view(0, scratch) as view:
                assert len(view) > 0
            log.truncate(0)
            assert log.max_offset == 0

    def test_read_out_of_range(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            self.fill(log, 5)
            with pytest.raises(OffsetOutOfRange):
                log.read(log.max_offset + 1, 10)
            with pytest.raises(OffsetOutOfRange):
                log.read(-1, 10)
            with pytest.raises((OffsetOutOfRange, StoreCorruption)):
                log.read_record(log.max_offset)

    def test_iter_records(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            records = self.fill(log, 80)
            got = list(log.iter_records())
            assert len(got) == 80
            assert all(same_message(a, b) for a, b in zip(got, records, strict=True))
            middle = got[40].physical_offset
            assert [r.physical_offset for r in log.iter_records(middle)] == [
                r.physical_offset for r in got[40:]]

    def test_consume_queues(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            results = log.append_batch([make_record(i, queue_id=i % 3) for i in range(30)])
            assert log.queues() == [("t", 0), ("t", 1), ("t", 2)]
            assert log.queue_max_offset("t", 1) == 10
            assert log.queue_min_offset("t", 1) == 0
            entries = log.queue_entries("t", 1, 2, 3)
            assert [e.queue_offset for e in entries] == [2, 3, 4]
            assert [e.physical_offset for e in entries] == [
                results[i].physical_offset for i in (7, 10, 13)]
            assert all(e.tags_code == tags_code("tagA") for e in entries)
            assert entries[0].size == results[7].size
            assert log.queue_entries("t", 1, 9, 10)[-1].queue_offset == 9
            assert log.queue_entries("nope", 0, 0, 10) == []

    def test_search_by_time_and_earliest(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            self.fill(log, 30, queues=1)
            # record i is stored at 2_000_000 + 10 * i
            assert log.search_queue_offset("t", 0, 0) == 0
            assert log.search_queue_offset("t", 0, 2_000_000 + 10 * 7) == 7
            assert log.search_queue_offset("t", 0, 2_000_000 + 10 * 7 - 3) == 7
            assert log.search_queue_offset("t", 0, 9_999_999) == 30
            assert log.earliest_store_time("t", 0) == 2_000_000

    def test_flush(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            self.fill(log, 10)
            assert log.flush() == log.max_offset == log.flushed_offset

    def test_reopen_keeps_everything(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            self.fill(log, 70)
            before = (log.max_offset, log.read(0, log.max_offset), log.queues(),
                      log.queue_max_offset("t", 2))
        with self.opened(tmp_path) as log:
            assert (log.max_offset, log.read(0, log.max_offset), log.queues(),
                    log.queue_max_offset("t", 2)) == before
            res = log.append(make_record(99, queue_id=2))
            assert res.queue_offset == before[3]
            assert res.physical_offset == before[0]

    def test_truncate(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            self.fill(log, 60)
            offsets = [r.physical_offset for r in log.iter_records()]
            cut = offsets[25]
            log.truncate(cut)
            assert log.max_offset == cut
            assert log.last_whole_record_end() == cut
            assert [r.physical_offset for r in log.iter_records()] == offsets[:25]
            assert [log.queue_max_offset("t", q) for q in range(3)] == [9, 8, 8]
            res = log.append(make_record(500, queue_id=1))
            assert (res.physical_offset, res.queue_offset) == (cut, 8)
        with self.opened(tmp_path) as log:
            got = list(log.iter_records())
            assert [r.physical_offset for r in got] == [*offsets[:25], cut]
            assert same_message(got[-1], make_record(500, queue_id=1))
            assert log.queue_max_offset("t", 1) == 9

    def test_truncate_to_zero_and_beyond_end(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            self.fill(log, 40)
            end = log.max_offset
            log.truncate(end + 100)
            assert log.max_offset == end
            log.truncate(0)
            assert log.max_offset == 0
            assert list(log.iter_records()) == []
            assert log.queue_max_offset("t", 0) == 0
        with self.opened(tmp_path) as log:
            assert log.max_offset == 0
            assert log.append(make_record(1)).physical_offset == 0

    def test_truncate_at_segment_boundary(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            self.fill(log, 80)
            log.truncate(2 * SEGMENT_SIZE)
            assert log.max_offset == 2 * SEGMENT_SIZE
            assert log.last_whole_record_end() == 2 * SEGMENT_SIZE
            assert log.append(make_record(1)).physical_offset == 2 * SEGMENT_SIZE
        with self.opened(tmp_path) as log:
            assert log.max_offset > 2 * SEGMENT_SIZE
            assert len(list(log.iter_records(2 * SEGMENT_SIZE))) == 1

    @staticmethod
    def assert_replica(slave: CommitLog, master: CommitLog) -> None:
        """``slave`` holds ``master``'s bytes and consume queues."""
        assert slave.read(0, slave.max_offset) == master.read(0, master.max_offset)
        assert slave.last_whole_record_end() == master.max_offset
        assert slave.queues() == master.queues()
        for topic, qid in master.queues():
            assert slave.queue_max_offset(topic, qid) == master.queue_max_offset(topic, qid)
            assert (slave.queue_entries(topic, qid, 0, 100)
                    == master.queue_entries(topic, qid, 0, 100))

    def test_append_raw_replicates_byte_for_byte(self, tmp_path: Path) -> None:
        rng = random.Random(7)
        with self.opened(tmp_path / "m") as master, self.opened(tmp_path / "s") as slave:
            self.fill(master, 90)
            data = master.read(0, master.max_offset)
            pos = 0
            while pos < len(data):
                n = rng.randint(1, 700)
                assert slave.append_raw(pos, data[pos:pos + n]) == min(pos + n, len(data))
                assert slave.last_whole_record_end() <= slave.max_offset
                pos += n
            self.assert_replica(slave, master)
            with pytest.raises(OffsetMismatch):
                slave.append_raw(pos + 1, b"x")
            with pytest.raises(OffsetMismatch):
                slave.append_raw(pos - 1, b"x")

    def test_append_into_lent_space_replicates_byte_for_byte(self, tmp_path: Path) -> None:
        """``append_buffer`` + ``append_written``: ``append_raw`` without a copy."""
        rng = random.Random(11)
        with self.opened(tmp_path / "m") as master, self.opened(tmp_path / "s") as slave:
            self.fill(master, 90)
            data = master.read(0, master.max_offset)
            pos = 0
            while pos < len(data):
                want = min(rng.randint(1, 3000), len(data) - pos)
                with slave.append_buffer(pos, want) as space:
                    assert 1 <= len(space) <= want
                    space[:] = data[pos:pos + len(space)]
                    n = len(space)
                if rng.random() < 0.3:
                    n = rng.randint(0, n)  # less than lent
                assert slave.append_written(pos, n) == pos + n
                pos += n
            self.assert_replica(slave, master)
            with pytest.raises(OffsetMismatch):
                slave.append_written(pos + 1, 1)
        with self.opened(tmp_path / "s") as slave:
            assert slave.read(0, slave.max_offset) == data

    def test_space_lent_again_keeps_the_bytes_written(self, tmp_path: Path) -> None:
        """A replica may receive several reads into lent space before one
        ``append_written``: lent again at the same offset, for more bytes, the
        space still holds what was written."""
        rng = random.Random(12)
        with self.opened(tmp_path / "m") as master, self.opened(tmp_path / "s") as slave:
            self.fill(master, 90)
            data = master.read(0, master.max_offset)
            pos = 0
            while pos < len(data):
                held = 0
                for _ in range(rng.randint(1, 4)):
                    want = held + min(rng.randint(1, 2000), len(data) - pos - held)
                    with slave.append_buffer(pos, want) as space:
                        assert space[:held] == data[pos:pos + held]
                        space[held:] = data[pos + held:pos + len(space)]
                        held = len(space)
                    if pos + held == len(data):
                        break
                assert slave.append_written(pos, held) == pos + held
                pos += held
            self.assert_replica(slave, master)

    def test_lent_space_refuses_garbage_and_stays_usable(self, tmp_path: Path) -> None:
        with self.opened(tmp_path / "m") as master, self.opened(tmp_path / "s") as slave:
            self.fill(master, 10, queues=1)
            data = master.read(0, master.max_offset)
            bad = bytearray(data)
            bad[4] ^= 0xFF  # the first record's magic code
            with slave.append_buffer(0, len(bad)) as space:
                n = len(space)
                space[:] = bad[:n]
            with pytest.raises(StoreCorruption):
                slave.append_written(0, n)
            assert slave.max_offset == 0
            pos = 0
            while pos < len(data):
                with slave.append_buffer(pos, len(data) - pos) as space:
                    n = len(space)
                    space[:] = data[pos:pos + n]
                pos = slave.append_written(pos, n)
            assert slave.read(0, slave.max_offset) == data
            assert slave.queue_max_offset("t", 0) == 10

    def test_empty_replica_starts_at_a_later_segment(self, tmp_path: Path) -> None:
        with self.opened(tmp_path / "m") as master, self.opened(tmp_path / "s") as slave:
            self.fill(master, 90)
            start = segment_start(master.max_offset, SEGMENT_SIZE) - SEGMENT_SIZE
            with pytest.raises(OffsetMismatch):
                slave.append_raw(start + 100, b"x")  # not a segment start
            slave.append_raw(start, master.read(start, master.max_offset - start))
            assert (slave.min_offset, slave.max_offset) == (start, master.max_offset)
            expected = list(master.iter_records(start))
            assert [r.physical_offset for r in slave.iter_records()] == [
                r.physical_offset for r in expected]
            for topic, qid in slave.queues():
                first = slave.queue_min_offset(topic, qid)
                entries = slave.queue_entries(topic, qid, 0, 1000)
                assert entries and entries[0].queue_offset == first > 0
                assert slave.queue_max_offset(topic, qid) == master.queue_max_offset(topic, qid)
            with pytest.raises(OffsetMismatch):
                slave.append_raw(slave.max_offset + SEGMENT_SIZE, b"x")  # no longer empty
        with self.opened(tmp_path / "s") as slave:
            assert (slave.min_offset, slave.max_offset) == (start, master.max_offset)
            for topic, qid in slave.queues():
                assert slave.queue_max_offset(topic, qid) == master.queue_max_offset(topic, qid)
                assert slave.queue_min_offset(topic, qid) > 0
            slave.append(make_record(1000, queue_id=1))

    def test_append_raw_rejects_garbage(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            bad = bytearray(encode(make_record(1)))
            bad[4] ^= 0xFF  # the magic code
            with pytest.raises(StoreCorruption):
                log.append_raw(0, bytes(bad))
            assert log.max_offset == 0

    def test_append_raw_rejects_inconsistent_offsets(self, tmp_path: Path) -> None:
        """The CRC covers only the body: header offsets are checked against the log."""
        with self.opened(tmp_path / "m") as master, self.opened(tmp_path / "s") as slave:
            self.fill(master, 10, queues=1)
            data = master.read(0, master.max_offset)
            second = [r.physical_offset for r in master.iter_records()][5]
            slave.append_raw(0, data[:second])
            moved = bytearray(data[second:])
            moved[28:36] = (second + 8).to_bytes(8, "big")  # physicalOffset field
            with pytest.raises(StoreCorruption, match="physicalOffset"):
                slave.append_raw(second, bytes(moved))
            skipped = bytearray(data[second:])
            skipped[20:28] = (7).to_bytes(8, "big")  # queue offset 7 where 5 is next
            with pytest.raises(StoreCorruption, match="skips ahead"):
                slave.append_raw(second, bytes(skipped))
            assert slave.max_offset == second
            assert slave.queue_max_offset("t", 0) == 5

    def test_torn_replicated_tail(self, tmp_path: Path) -> None:
        with self.opened(tmp_path / "m") as master, self.opened(tmp_path / "s") as slave:
            self.fill(master, 10)
            data = master.read(0, master.max_offset)
            whole = [r.physical_offset for r in master.iter_records()]
            slave.append_raw(0, data[:whole[6] + 30])
            assert slave.last_whole_record_end() == whole[6]
            with pytest.raises(StoreError):
                slave.append(make_record(1))
            assert slave.truncate_to_last_whole_record() == whole[6]
            assert slave.max_offset == whole[6]
            slave.append_raw(whole[6], data[whole[6]:])
            assert slave.read(0, slave.max_offset) == data

    def test_close_cuts_a_partial_replicated_record(self, tmp_path: Path) -> None:
        """A slave stopped while a record was arriving keeps only whole records:
        what a clean stop leaves verifies clean, and the master sends the rest again."""
        with self.opened(tmp_path / "m") as master:
            self.fill(master, 10)
            data = master.read(0, master.max_offset)
            whole = [r.physical_offset for r in master.iter_records()]
        with self.opened(tmp_path / "s") as slave:
            slave.append_raw(0, data[:whole[6] + 30])
        with self.opened(tmp_path / "s") as slave:
            assert slave.max_offset == whole[6]
            assert sum(slave.queue_max_offset("t", q) for q in range(3)) == 6
            slave.append_raw(whole[6], data[whole[6]:])
            assert slave.read(0, slave.max_offset) == data

    def test_retention_by_size_and_age(self, tmp_path: Path) -> None:
        with self.opened(tmp_path) as log:
            self.fill(log, 150, queues=2)
            total_segments = log.max_offset // SEGMENT_SIZE + 1
            assert total_segments >= 5
            assert log.retain(now_ms=0) == 0
            new_min = log.retain(now_ms=0, max_bytes=2 * SEGMENT_SIZE)
            assert new_min % SEGMENT_SIZE == 0
            assert log.max_offset - new_min <= 2 * SEGMENT_SIZE + SEGMENT_SIZE
            assert new_min > 0
            first = next(iter(log.iter_records()))
            assert first.physical_offset == new_min
            qmin = log.queue_min_offset("t", first.queue_id)
            assert log.queue_entries("t", first.queue_id, 0, 1)[0].physical_offset >= new_min
            assert qmin > 0
            with pytest.raises(OffsetOutOfRange):
                log.read(new_min - 1, 10)
            # Age: everything stored before the last record's time is old.
            newest = 2_000_000 + 10 * 149
            log.retain(now_ms=newest + 1000, max_age_ms=1000)
            assert segment_start(log.max_offset - 1, SEGMENT_SIZE) == log.min_offset
            kept = log.min_offset
        with self.opened(tmp_path) as log:
            assert log.min_offset == kept
            assert len(list(log.iter_records())) > 0


class EntryLogSuite(_StoreSuite):
    """Conformance tests of an ``EntryLog`` factory (set ``factory``)."""

    @staticmethod
    def entries(lo: int, hi: int, term: int = 1, size: int = 10) -> list[Entry]:
        return [Entry(i, term, bytes([i % 256]) * size) for i in range(lo, hi)]

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
            assert log.get(7) == Entry(7, 2, bytes([7]) * 10)
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
            log.append([Entry(i, 1 + i // 100, bytes(i % 700)) for i in range(1, 400)])
        with self.opened(tmp_path) as log:
            assert log.last_index == 399
            assert log.get(399) == Entry(399, 4, bytes(399 % 700))
            assert log.get(250).data == bytes(250)

    def test_append_records_is_append(self, tmp_path: Path) -> None:
        entries = [Entry(i, 1 + i // 100, bytes([i % 256]) * (i % 700)) for i in range(1, 400)]
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
            assert log.get(2) == Entry(2, 1, b"b")

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
