"""Opening an mmap commit log: its consume queues, then recovery.

A clean restart (the checkpoint says ``clean``) trusts ``max_offset`` and
scans nothing. An abnormal one scans from the checkpoint's
``recover_from`` (the first segment without a checkpoint, e.g. a store
written by RocketMQ), indexes every record found into the consume queues
again, and cuts the log at the first record the record rule refuses
(``triomq.log_check``), zeroing what follows so that no record past the
cut is ever found again. ``MmapCommitLog`` runs these steps of its own.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from triomq.plugins.store_mmap.checkpoint import Checkpoint
from triomq.plugins.store_mmap.consume_queue import ConsumeQueue
from triomq.plugins.store_mmap.replicated import check_queue_offset
from triomq.protocol.commitlog_layout import (
    CQ_ENTRY_SIZE,
    check_placement,
    index_records,
    iter_spans,
    runs_fit,
    tags_code,
    unpack_cq_entry,
)
from triomq.protocol.delay_levels import cq_tags_code
from triomq.protocol.message import MessageRecord, RecordError, decode
from triomq.store import StoreCorruption

#: A record's tags code, kept for the tags seen most (appends and recovery alike).
cached_tags_code = functools.lru_cache(maxsize=4096)(tags_code)


def record_tags_code(record: MessageRecord, delay_levels: tuple[int, ...]) -> int:
    """``record``'s consume-queue tags code (a schedule-topic record's: its delivery time)."""
    return cq_tags_code(record.topic, record.properties, record.store_timestamp, delay_levels,
                        cached_tags_code(record.tags))


class Recovery:
    """The opening and recovery steps of ``MmapCommitLog`` (whose state they use)."""

    delay_levels: tuple[int, ...]

    def _load_queues(self) -> None:
        if not os.path.isdir(self._cq_root):
            return
        for topic in sorted(os.listdir(self._cq_root)):
            tdir = os.path.join(self._cq_root, topic)
            if not os.path.isdir(tdir):
                raise StoreCorruption(tdir, 0, "not a topic directory")
            for qid in sorted(os.listdir(tdir)):
                if not qid.isdigit():
                    raise StoreCorruption(os.path.join(tdir, qid), 0, "not a queue id directory")
                self._cqs[topic, int(qid)] = ConsumeQueue(os.path.join(tdir, qid),
                                                          self._cq_entries, pool=self.cq_files)

    def _recover(self, cp: Checkpoint | None, full: bool) -> None:
        first = self._log.first_start
        end_of_files = self._log.end
        if first is None:
            self._write_pos = self._dispatched = self._flushed = self._recover_from = 0
            self.recovery = {"clean": cp is not None and cp.clean, "scanned": 0, "cut_at": None}
        elif (cp is not None and cp.clean and not full
              and first <= cp.dispatched <= cp.max_offset <= end_of_files):
            self._write_pos = cp.max_offset
            self._dispatched = cp.dispatched
            self._flushed = cp.max_offset
            self._recover_from = cp.dispatched
            self.recovery = {"clean": True, "scanned": 0, "cut_at": None}
        else:
            start = first if cp is None or full else cp.recover_from
            if not first <= start < end_of_files:
                start = first
            # The scan indexes every record from ``start`` again: entries past it
            # must not let a record skip ahead of what the log itself holds.
            for cq in self._cqs.values():
                cq.truncate_physical(start)
            end, reason = self._scan_and_index(start, end_of_files)
            self._cut(end, end_of_files)
            for key, cq in self._cqs.items():
                cq.truncate_physical(end)
                self._repair_queue_tail(key, cq, end)
            self._write_pos = self._dispatched = end
            self._log.sync_range(start, end)
            for cq in self._cqs.values():
                cq.sync()
            self._flushed = self._recover_from = end
            self.recovery = {"clean": False, "scanned": end - start,
                             "cut_at": end if reason else None, "reason": reason}
        if self.min_offset > 0:
            for cq in self._cqs.values():
                cq.drop_before_physical(self.min_offset)
        self._save_checkpoint(clean=False)

    def _scan_and_index(self, start: int, limit: int) -> tuple[int, str | None]:
        """Index every good record in ``[start, limit)``; return where the good data ends."""
        end = start
        for seg in self._log.segments_from(start):
            if seg.start >= limit:
                break
            pos = max(start, seg.start) - seg.start
            stop = min(seg.end, limit) - seg.start
            fast = self._index_segment(seg, pos, stop)
            if fast is not None:
                end, blank = fast
                if not blank:
                    break
                continue
            blank = False
            try:
                for span in iter_spans(seg.mm, pos, stop, base_offset=seg.start,
                                       segment_end=seg.size):
                    if span.blank:
                        blank = True
                    else:
                        self._index(seg.mm, span.offset - seg.start, seg.start, span.size)
                    end = span.offset + span.size
            except RecordError as exc:
                return exc.offset, f"{seg.path}: {exc.reason}"
            if not blank:
                break
        return end, None

    def _index_segment(self, seg: Any, pos: int, stop: int) -> tuple[int, bool] | None:
        """Index ``seg``'s records in ``[pos, stop)`` with ``index_records``.

        Returns where the records end and whether a blank ends the segment,
        or ``None`` (nothing indexed) when the per-record walk must run: a
        bad or torn record, or one that does not fit its queue.
        """
        # Released explicitly: a view left alive (say, in a traceback) would keep
        # the segment's mmap from closing.
        with memoryview(seg.mm) as view, view[pos:stop] as part:
            index = index_records(part, seg.start + pos, self.segment_size,
                                  delay_levels=self.delay_levels)
        if index is None or index[1] == "torn" or not runs_fit(index[2], self._queue_bounds):
            return None
        end, _, runs = index
        records_end = seg.start + pos
        for topic, queue_id, first, entries in runs:
            phys, size, _ = unpack_cq_entry(entries, len(entries) - CQ_ENTRY_SIZE)
            records_end = max(records_end, phys + size)
            self._queue(topic, queue_id).put_run(first, entries)
        # The walk reached the segment's end past the last record: a blank.
        return end, end == seg.end and records_end < end

    def _index(self, buf: Any, pos: int, base: int, size: int) -> None:
        """Put the (valid) record at ``buf[pos:]`` in its consume queue, if it fits there."""
        check_placement(buf, pos, base + pos)
        record, _ = decode(buf, pos, base_offset=base, verify_crc=False)
        cq = self._queue(record.topic, record.queue_id)
        check_queue_offset(record, base + pos, cq.min_offset, cq.max_offset)
        cq.put(record.queue_offset, base + pos, size,
               record_tags_code(record, self.delay_levels))

    def _repair_queue_tail(self, key: tuple[str, int], cq: ConsumeQueue, end: int) -> None:
        """Drop queue entries that point at something other than their record.

        After a crash during a truncation the queue may still hold entries of
        dropped records whose offsets are now taken by other records.
        """
        while cq.max_offset > cq.min_offset:
            q = cq.max_offset - 1
            phys, size, _ = cq.get(q)
            if phys < self.min_offset or self._entry_matches(key, q, phys, size, end):
                return
            cq.truncate(q)

    def _entry_matches(self, key: tuple[str, int], q: int, phys: int, size: int, end: int
                       ) -> bool:
        if phys + size > end:
            return False
        seg = self._log.find(phys)
        try:
            record, n = decode(seg.mm, phys - seg.start, base_offset=seg.start)
        except RecordError:
            return False
        return (n == size and record.queue_offset == q and record.physical_offset == phys
                and (record.topic, record.queue_id) == key)

    def _cut(self, end: int, data_end: int) -> None:
        """Durably drop every byte at or past ``end`` (up to ``data_end``)."""
        with self._log.lock:
            seg = self._log.find(end)
            if seg is not None:
                self._log.zero(end, min(seg.end, max(data_end, end)))
                seg.sync()
                self._log.delete_from(seg.end)
            else:
                self._log.delete_from(end)
