"""The mmap commit log: RocketMQ-layout segment files plus consume queues.

Layout under the store root: ``commitlog/`` segments, ``consumequeue/``
queues, ``triomq_checkpoint.json`` (see ``checkpoint``) and ``lock`` (held
while open, as RocketMQ does, so two processes never write one store).
Opening runs recovery (``recovery``):

- clean restart (checkpoint says ``clean``): trust ``max_offset``, scan
  nothing, so the time does not grow with the log;
- abnormal restart: scan from the checkpoint's ``recover_from`` (the first
  segment when there is no checkpoint, e.g. a store written by RocketMQ),
  re-index every record found in the consume queues, and cut the log at the
  first record the record rule refuses (``triomq.log_check``: lengths,
  magic, CRC, UTF-8 topic and properties, placement, queue offsets), where
  ``triomq store verify`` reports the data ends.

Cutting zeroes the bytes from the cut to the end of data and removes later
segments, so a record past the cut can never be found again.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from triomq.plugins.store_mmap.checkpoint import Checkpoint
from triomq.plugins.store_mmap.consume_queue import ConsumeQueue, queue_dir
from triomq.plugins.store_mmap.mapping_pool import MappingPool, default_limit
from triomq.plugins.store_mmap.recovery import Recovery, record_tags_code
from triomq.plugins.store_mmap.replicated import check_replicated
from triomq.plugins.store_mmap.segments import (
    OPTION_KEYS,
    DirectoryLock,
    SegmentQueue,
    out_of_resources,
)
from triomq.protocol.commitlog_layout import (
    COMMITLOG_DIR,
    CONSUMEQUEUE_DIR,
    CQ_ENTRY_SIZE,
    DEFAULT_CQ_ENTRIES_PER_FILE,
    DEFAULT_SEGMENT_SIZE,
    QueueRun,
    index_records,
    iter_spans,
    pack_records,
    runs_fit,
    scan_log,
    segment_start,
)
from triomq.protocol.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from triomq.protocol.message import (
    MessageRecord,
    RecordError,
    decode,
    store_timestamp_at,
)
from triomq.store import (
    AppendResult,
    OffsetMismatch,
    OffsetOutOfRange,
    QueueEntry,
    StoreClosed,
    StoreCorruption,
    StoreError,
    StoreOutOfResources,
    store_options,
)

DEFAULT_CHECKPOINT_INTERVAL = 64 << 20


class MmapCommitLog(Recovery):
    """A ``triomq.store.CommitLog`` on memory-mapped segment files.

    Options: ``segment_size`` (bytes per segment; default 1 GiB, or the size
    of the existing segments), ``cq_entries_per_file`` (default 300,000),
    ``checkpoint_interval`` (bytes flushed between checkpoint updates, which
    bounds the scan of an abnormal restart; default 64 MiB: ``flush`` syncs
    the commit log, the consume queues are synced at each checkpoint and an
    abnormal restart indexes the records after it again), ``full_recovery``
    (scan from the first segment whatever the checkpoint says),
    ``max_open_consume_queue_files`` (consume-queue files kept mapped, one
    descriptor each, however many queues there are; default 1024, or half
    the process's open-file limit if lower).

    An append that would need a file, mapping or disk space the process
    cannot get raises ``StoreOutOfResources`` before writing anything.
    """

    def __init__(self, root: str, *, segment_size: int | None = None,
                 cq_entries_per_file: int = DEFAULT_CQ_ENTRIES_PER_FILE,
                 checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL,
                 full_recovery: bool = False,
                 max_open_consume_queue_files: int | None = None,
                 message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL) -> None:
        self.root = root
        try:
            #: The delays of ``SCHEDULE_TOPIC_XXXX``'s levels, for its entries' tags codes.
            self.delay_levels = parse_delay_levels(message_delay_level)
        except ValueError as exc:
            raise StoreError(f"message_delay_level: {exc}") from None
        if segment_size is not None and segment_size < 4096:
            raise StoreError(f"segment_size {segment_size} is below 4096 bytes")
        if max_open_consume_queue_files is None:
            max_open_consume_queue_files = default_limit()
        if max_open_consume_queue_files < 1:
            raise StoreError(f"max_open_consume_queue_files {max_open_consume_queue_files} "
                             "is below 1")
        #: The consume queues' mapped files.
        self.cq_files = MappingPool(max_open_consume_queue_files)
        os.makedirs(root, exist_ok=True)
        self._lock = DirectoryLock(root)
        try:
            self._log = SegmentQueue(os.path.join(root, COMMITLOG_DIR), segment_size, warm=True,
                                     sync_creation_lazily=True, read_ahead_new=False)
        except BaseException:
            self._lock.release()
            raise
        if not self._log.segment_size:
            self._log.segment_size = segment_size or DEFAULT_SEGMENT_SIZE
        self.segment_size = self._log.segment_size
        self._cq_root = os.path.join(root, CONSUMEQUEUE_DIR)
        self._cq_entries = cq_entries_per_file
        self._checkpoint_interval = checkpoint_interval
        self._cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self._closed = False
        self._write_pos = 0
        self._dispatched = 0
        self._flushed = 0
        self._recover_from = 0
        #: What the last open found: ``clean``, ``scanned`` bytes, ``cut_at`` (or None).
        self.recovery: dict[str, Any] = {}
        try:
            self._load_queues()
            self._recover(Checkpoint.load(root), full_recovery)
        except BaseException:
            self._close_files()
            raise

    @classmethod
    def open(cls, directory: str, options: Mapping[str, Any]) -> MmapCommitLog:
        """The ``triomq_log_store`` factory."""
        used = ("segment_size", "cq_entries_per_file", "checkpoint_interval", "full_recovery",
                "max_open_consume_queue_files", "message_delay_level")
        return cls(directory, **store_options(options, OPTION_KEYS, used, "mmap"))

    # ------------------------------------------------------------------ offsets

    @property
    def min_offset(self) -> int:
        first = self._log.first_start
        return self._write_pos if first is None else first

    @property
    def max_offset(self) -> int:
        return self._write_pos

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def _save_checkpoint(self, *, clean: bool) -> None:
        # A recovery re-indexes the records from ``recover_from`` on (all of them
        # after a clean stop): the queue entries before it must be on disk first.
        # Between checkpoints they need not be, so a flush syncs the commit log
        # alone, as RocketMQ's group commit does (its consume queues are flushed
        # apart, and rebuilt from the commit log after a crash).
        for cq in list(self._cqs.values()):
            cq.sync()
        Checkpoint(clean=clean, max_offset=self._write_pos, dispatched=self._dispatched,
                   recover_from=self._recover_from).save(self.root)

    # ------------------------------------------------------------------ append

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"commit log {self.root} is closed")

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            if not topic or "/" in topic or topic in (".", ".."):
                raise StoreError(f"topic {topic!r} cannot name a consume-queue directory")
            directory = queue_dir(self._cq_root, topic, queue_id)
            try:
                cq = ConsumeQueue(directory, self._cq_entries, pool=self.cq_files)
            except OSError as exc:
                raise out_of_resources(exc, f"creating {directory}") from None
            self._cqs[topic, queue_id] = cq
        return cq

    def append(self, record: MessageRecord) -> AppendResult:
        return self.append_batch((record,))[0]

    def append_batch(self, records: Sequence[MessageRecord]) -> list[AppendResult]:
        self._check_open()
        if self._dispatched != self._write_pos:
            raise StoreError(f"the log ends with a torn record at {self._dispatched}; "
                             "truncate_to_last_whole_record() first")
        base = self._write_pos
        try:
            batch = pack_records(records, base, self.segment_size,
                                 lambda t, q: self._queue(t, q).max_offset,
                                 result_type=AppendResult, delay_levels=self.delay_levels)
        except ValueError as exc:
            raise StoreError(str(exc)) from None
        # Everything that can run short (queue files, mappings, blocks) first:
        # a failure leaves the log and the queues as they were.
        self.cq_files.hold()
        try:
            runs = [(self._queue(topic, queue_id), first, entries)
                    for (topic, queue_id), (first, entries) in batch.queue_runs.items()]
            for cq, first, entries in runs:
                cq.reserve(first, len(entries) // CQ_ENTRY_SIZE)
            self._log.write(base, batch.data)
            for cq, first, entries in runs:
                cq.put_run(first, entries)
        finally:
            self.cq_files.release()
        self._write_pos = self._dispatched = base + len(batch.data)
        return batch.results

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        self._check_open()
        if offset != self._write_pos:
            self._start_at(offset)
        if not data:
            return self._write_pos
        self._log.write(offset, data)
        return self._take_written(offset, offset + len(data))

    def append_buffer(self, offset: int, size: int) -> memoryview:
        self._check_open()
        if offset != self._write_pos:
            self._start_at(offset)
        return self._log.lend(offset, size)

    def append_written(self, offset: int, size: int) -> int:
        self._check_open()
        if offset != self._write_pos:
            raise OffsetMismatch(offset, self._write_pos)
        if not size:
            return self._write_pos
        self._log.lent_written(offset + size)
        return self._take_written(offset, offset + size)

    def _take_written(self, offset: int, end: int) -> int:
        """Check and index the bytes ``[offset, end)`` written past the end; append them."""
        start = self._dispatched
        # Written first, past max_offset where nothing reads it, then checked
        # in place: the bytes are copied once. Refused bytes are zeroed again.
        seg = self._log.find(start)
        if seg is not None and end <= seg.end:
            with memoryview(seg.mm) as view, view[start - seg.start:end - seg.start] as part:
                index = index_records(part, start, self.segment_size,
                                      delay_levels=self.delay_levels)
        else:  # the bytes to check span two segments
            index = index_records(self._log.read(start, end - start), start,
                                  self.segment_size, delay_levels=self.delay_levels)
        self.cq_files.hold()
        try:
            queues = None if index is None or index[1] == "zero" else self._queues_of(index[2])
            if queues is None:
                return self._append_raw_checked(offset, end, start)
            records_end, _, runs = index
            for cq, (_, _, first, entries) in zip(queues, runs, strict=True):
                cq.reserve(first, len(entries) // CQ_ENTRY_SIZE)
            for cq, (_, _, first, entries) in zip(queues, runs, strict=True):
                cq.put_run(first, entries)
        except (StoreCorruption, StoreOutOfResources):
            self._log.zero(offset, end)
            raise
        finally:
            self.cq_files.release()
        self._write_pos = end
        self._dispatched = records_end
        return self._write_pos

    def _queues_of(self, runs: list[QueueRun]) -> list[ConsumeQueue] | None:
        """The queue of each of ``runs``, or None if one would skip ahead of its
        queue's end (``runs_fit``). A replica's usual case, every run starting
        where its queue ends, is told without ``runs_fit``."""
        cqs = self._cqs
        queues = []
        for topic, queue_id, first, _ in runs:
            cq = cqs.get((topic, queue_id))
            if cq is None or first != cq.max_offset:
                break
            queues.append(cq)
        else:
            return queues
        if not runs_fit(runs, self._queue_bounds):
            return None
        return [self._queue(topic, queue_id) for topic, queue_id, _, _ in runs]

    def _append_raw_checked(self, offset: int, end: int, start: int) -> int:
        """``append_raw``'s bytes ``[offset, end)``, already written, checked record by
        record: raises the precise error for bad data."""
        buf = self._log.read(start, end - start)
        scan = scan_log(buf, start, self.segment_size)
        if scan.stop == "bad":
            raise StoreCorruption("replicated data", scan.error.offset, scan.error.reason)
        if scan.stop == "zero":
            raise StoreCorruption("replicated data", scan.end, "zero fill where a record "
                                  "should start")
        records = check_replicated(buf, start, scan.spans, self._queue_bounds)
        for _, r in records:
            self._queue(r.topic, r.queue_id).reserve(r.queue_offset, 1)
        for span, r in records:
            self._queue(r.topic, r.queue_id).put(r.queue_offset, span.offset, span.size,
                                                 record_tags_code(r, self.delay_levels))
        self._write_pos = end
        self._dispatched = scan.end
        return self._write_pos

    def _start_at(self, offset: int) -> None:
        """Let an empty log start at a later segment boundary, else ``OffsetMismatch``."""
        if (self._write_pos != self.min_offset or offset < self._write_pos
                or offset % self.segment_size):
            raise OffsetMismatch(offset, self._write_pos)
        with self._log.lock:
            self._log.delete_from(0)
            self._write_pos = self._dispatched = self._flushed = offset
            self._recover_from = offset
            self._save_checkpoint(clean=False)

    # -------------------------------------------------------------------- read

    def _check_range(self, offset: int) -> None:
        if not self.min_offset <= offset <= self._write_pos:
            raise OffsetOutOfRange(offset, self.min_offset, self._write_pos)

    def read(self, offset: int, size: int) -> bytes:
        self._check_open()
        self._check_range(offset)
        size = max(0, min(size, self._write_pos - offset))
        return self._log.read(offset, size) if size else b""

    def read_into(self, offset: int, buffer: bytearray | memoryview) -> int:
        self._check_open()
        self._check_range(offset)
        size = max(0, min(len(buffer), self._write_pos - offset))
        if size:
            with memoryview(buffer) as view, view[:size] as target:
                self._log.read_into(offset, target)
        return size

    def read_view(self, offset: int, scratch: bytearray | memoryview) -> memoryview:
        self._check_open()
        self._check_range(offset)
        size = min(len(scratch), self._write_pos - offset)
        if size <= 0:
            return memoryview(b"")
        return self._log.view(offset, size)

    def read_record(self, offset: int) -> MessageRecord:
        self._check_open()
        self._check_range(offset)
        seg = self._log.find(offset)
        if seg is None or offset >= self._dispatched:
            raise OffsetOutOfRange(offset, self.min_offset, self._dispatched)
        try:
            record, _ = decode(seg.mm, offset - seg.start, base_offset=seg.start)
        except RecordError as exc:
            raise StoreCorruption(seg.path, exc.offset, exc.reason) from None
        return record

    def iter_records(self, start: int | None = None, end: int | None = None
                     ) -> Iterator[MessageRecord]:
        self._check_open()
        start = self.min_offset if start is None else start
        end = self._dispatched if end is None else min(end, self._dispatched)
        self._check_range(start)
        for seg in self._log.segments_from(start):
            if seg.start >= end:
                return
            pos = max(start, seg.start) - seg.start
            try:
                for span in iter_spans(seg.mm, pos, min(seg.end, end) - seg.start,
                                       base_offset=seg.start, segment_end=seg.size):
                    if not span.blank:
                        yield decode(seg.mm, span.offset - seg.start, base_offset=seg.start,
                                     verify_crc=False)[0]
            except RecordError as exc:
                raise StoreCorruption(seg.path, exc.offset, exc.reason) from None

    def last_whole_record_end(self) -> int:
        return self._dispatched

    # ---------------------------------------------------------------- truncate

    def truncate(self, offset: int) -> None:
        self._check_open()
        if offset >= self._write_pos:
            return
        if offset < self.min_offset:
            raise OffsetOutOfRange(offset, self.min_offset, self._write_pos)
        with self._log.lock:
            # Recovery must start at or before the cut: a checkpoint past it would
            # make a later abnormal restart scan from the middle of new records.
            if self._recover_from > offset:
                self._recover_from = segment_start(offset, self.segment_size)
                self._save_checkpoint(clean=False)
            # Zero from the cut first (synced), then remove later segments: at
            # every moment a scan stops at the cut, so nothing past it returns.
            self._cut(offset, self._write_pos)
            for cq in self._cqs.values():
                cq.truncate_physical(offset)
            self._write_pos = offset
            self._flushed = min(self._flushed, offset)
            if self._dispatched > offset:
                self._dispatched = self._boundary_at_or_before(offset)

    def _boundary_at_or_before(self, offset: int) -> int:
        """The end of the last whole record at or before ``offset`` (queues already cut)."""
        # Queue entries end at record boundaries and so do segment starts.
        start = max(self.min_offset, segment_start(offset, self.segment_size))
        for cq in self._cqs.values():
            if cq.max_offset > cq.min_offset:
                phys, size, _ = cq.get(cq.max_offset - 1)
                start = max(start, phys + size)
        if start >= offset:
            return offset
        return scan_log(self._log.read(start, offset - start), start, self.segment_size).end

    def truncate_to_last_whole_record(self) -> int:
        self.truncate(self._dispatched)
        return self._write_pos

    # ------------------------------------------------------------------- flush

    def flush(self) -> int:
        with self._log.lock:
            if self._closed:
                return self._flushed
            hi = self._write_pos
            boundary = self._dispatched
            if hi > self._flushed:
                self._log.sync_range(self._flushed, hi)
            self._flushed = max(self._flushed, hi)
            if boundary - self._recover_from >= self._checkpoint_interval:
                self._recover_from = boundary
                self._save_checkpoint(clean=False)
            return self._flushed

    # --------------------------------------------------------------- retention

    def retain(self, now_ms: int, max_age_ms: int | None = None,
               max_bytes: int | None = None) -> int:
        self._check_open()
        segs = list(self._log.segments)
        keep_from = self.min_offset
        for seg, nxt in itertools.pairwise(segs):
            if nxt.start >= self._dispatched:
                break  # ``seg`` is the segment being written
            too_big = max_bytes is not None and self._write_pos - seg.start > max_bytes
            too_old = (max_age_ms is not None
                       and store_timestamp_at(nxt.mm, 0) < now_ms - max_age_ms)
            if not (too_big or too_old):
                break
            keep_from = nxt.start
        if keep_from > self.min_offset:
            with self._log.lock:
                self._recover_from = max(self._recover_from, keep_from)
                self._log.delete_before(keep_from)
                for cq in self._cqs.values():
                    cq.drop_before_physical(keep_from)
        return self.min_offset

    # ------------------------------------------------------------------ queues

    def queues(self) -> list[tuple[str, int]]:
        return sorted(self._cqs)

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        return 0 if cq is None else cq.min_offset

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        return 0 if cq is None else cq.max_offset

    def _queue_bounds(self, topic: str, queue_id: int) -> tuple[int, int]:
        cq = self._cqs.get((topic, queue_id))
        return (0, 0) if cq is None else (cq.min_offset, cq.max_offset)

    def queue_entries(self, topic: str, queue_id: int, start: int, max_count: int
                      ) -> list[QueueEntry]:
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return []
        lo = max(start, cq.min_offset)
        hi = min(cq.max_offset, lo + max(max_count, 0))
        return [QueueEntry(q, *cq.get(q)) for q in range(lo, hi)]

    def _store_time(self, phys: int) -> int:
        seg = self._log.find(phys)
        return store_timestamp_at(seg.mm, phys - seg.start)

    def search_queue_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            if self._store_time(cq.get(mid)[0]) < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def earliest_store_time(self, topic: str, queue_id: int) -> int | None:
        cq = self._cqs.get((topic, queue_id))
        if cq is None or cq.max_offset == cq.min_offset:
            return None
        return self._store_time(cq.get(cq.min_offset)[0])

    # ------------------------------------------------------------------- close

    def close(self) -> None:
        if self._closed:
            return
        # A record still arriving from the master: a recovery would cut it anyway.
        self.truncate(self._dispatched)
        self.flush()
        with self._log.lock:
            self._recover_from = self._dispatched
            self._save_checkpoint(clean=True)
            self._closed = True
            self._close_files()

    def _close_files(self) -> None:
        for cq in self._cqs.values():
            cq.close()
        self._log.close()
        self._lock.release()

    def __enter__(self) -> MmapCommitLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
