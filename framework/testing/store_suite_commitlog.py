"""The commit log's conformance suite: ``CommitLogSuite``.

Appends and reads, consume queues, truncation, replication into a slave's
log (``append_raw``, lent space) and its torn tails, retention, and
reopening after each (``triomq.testing.store_suite`` says how to run it).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest

from triomq.protocol.commitlog_layout import BLANK_MAGIC, segment_start, tags_code
from triomq.protocol.delay_levels import SCHEDULE_TOPIC
from triomq.protocol.message import MessageRecord, encode
from triomq.store import CommitLog, OffsetMismatch, OffsetOutOfRange, StoreCorruption, StoreError
from triomq.testing.store_suite_base import SEGMENT_SIZE, _StoreSuite, make_record, same_message


class CommitLogSuite(_StoreSuite):
    """Conformance tests of a ``CommitLog`` factory (set ``factory``)."""

    defaults: ClassVar[Mapping[str, Any]] = {"segment_size": SEGMENT_SIZE}
    #: Options that make the factory rebuild its consume queues from the log when it
    #: opens (none for a store that keeps them with the log in one transaction).
    recover_options: ClassVar[Mapping[str, Any]] = {}

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

    def test_schedule_topic_entries_carry_delivery_times(self, tmp_path: Path) -> None:
        """A ``SCHEDULE_TOPIC_XXXX`` entry's tags code is its store time plus its level's
        delay (``message_delay_level``; a level past the last is the last), on the
        master's append, a slave's replicated append and a recovered log alike."""
        levels = {"message_delay_level": "100ms 2s 1m"}

        def delayed(i: int, delay: str | None, tags: str | None = "tagA") -> MessageRecord:
            r = make_record(i, topic=SCHEDULE_TOPIC, queue_id=0, tags=tags)
            props = dict(r.properties) if delay is None else {**r.properties, "DELAY": delay}
            return attrs.evolve(r, properties=props)

        cases = [("1", 100), ("2", 2000), ("3", 60_000), ("9", 60_000), (None, None),
                 ("0", None), ("x", None), ("-1", None)]
        records = [delayed(i, delay) for i, (delay, _) in enumerate(cases)]
        expected = [2_000_000 + 10 * i + wait if wait is not None else tags_code("tagA")
                    for i, (_, wait) in enumerate(cases)]
        with self.opened(tmp_path / "m", **levels) as master, \
                self.opened(tmp_path / "s", **levels) as slave:
            master.append_batch(records[:4])
            for r in records[4:]:
                master.append(r)
            master.append(make_record(99, topic="t", tags=None))
            codes = [e.tags_code for e in master.queue_entries(SCHEDULE_TOPIC, 0, 0, 20)]
            assert codes == expected
            assert master.queue_entries("t", 0, 0, 1)[0].tags_code == 0
            data = master.read(0, master.max_offset)
            for pos in range(0, len(data), 333):
                slave.append_raw(pos, data[pos:pos + 333])
            assert (slave.queue_entries(SCHEDULE_TOPIC, 0, 0, 20)
                    == master.queue_entries(SCHEDULE_TOPIC, 0, 0, 20))
        with self.opened(tmp_path / "m", **levels, **self.recover_options) as recovered:
            assert [e.tags_code for e in recovered.queue_entries(SCHEDULE_TOPIC, 0, 0, 20)
                    ] == expected
