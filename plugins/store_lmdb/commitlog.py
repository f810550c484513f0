"""The commit log in LMDB.

The log is a byte stream like the mmap store's, blanks included (``segment_size``
virtual segments), so replicas on either plugin hold identical bytes. It is
stored as chunks keyed by their start offset; a chunk never crosses a
virtual segment, so retention deletes whole keys. Every operation is one
transaction: an append, a truncation or a retention step is all or nothing,
which makes ``truncate`` crash-safe without further care.

Databases: ``log`` (offset -> bytes), ``cq`` (topic 0 queueId queueOffset ->
physicalOffset, size, tagsCode, storeTimestamp), ``queues`` (topic 0 queueId
-> min, max queue offset) and ``state`` (``dispatched``: end of the last
whole record; ``segment_size``).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from triomq.plugins.store_lmdb.env import OPTION_KEYS, Env
from triomq.protocol.commitlog_layout import (
    DEFAULT_SEGMENT_SIZE,
    check_placement,
    pack_records,
    scan_log,
    segment_start,
    tags_code,
)
from triomq.protocol.delay_levels import (
    DEFAULT_MESSAGE_DELAY_LEVEL,
    cq_tags_code,
    parse_delay_levels,
)
from triomq.protocol.message import MessageRecord, RecordError, decode, store_timestamp_at
from triomq.store import (
    AppendResult,
    OffsetMismatch,
    OffsetOutOfRange,
    QueueEntry,
    ScratchAppend,
    ScratchRead,
    StoreCorruption,
    StoreError,
    read_into_by_read,
    store_options,
)

_U64 = struct.Struct(">Q")
_QID = struct.Struct(">i")
_CQ = struct.Struct(">qiqq")
_RANGE = struct.Struct(">QQ")
_READ_WINDOW = 4 << 20

_tags_code = functools.lru_cache(maxsize=4096)(tags_code)


def _qkey(topic: str, queue_id: int) -> bytes:
    return topic.encode() + b"\x00" + _QID.pack(queue_id)


def log_bounds(txn: Any, log_db: Any, state_db: Any) -> tuple[int, int]:
    """The log's first and end offsets: its chunks', or the stored base when it
    holds none (everything was truncated or nothing written yet)."""
    cur = txn.cursor(db=log_db)
    if cur.first():
        first = _U64.unpack(cur.key())[0]
        cur.last()
        return first, _U64.unpack(cur.key())[0] + len(cur.value())
    base = txn.get(b"base", db=state_db)
    start = _U64.unpack(base)[0] if base else 0
    return start, start


def read_range(txn: Any, log_db: Any, offset: int, end: int) -> bytes:
    """The log's bytes in ``[offset, end)``, from the chunks keyed by their start offset
    in ``log_db`` (within the log's range, ``offset < end``)."""
    parts = []
    cur = txn.cursor(db=log_db)
    cur.set_range(_U64.pack(offset))
    if not cur.key() or _U64.unpack(cur.key())[0] > offset:
        cur.prev()
    for key, value in cur:
        at = _U64.unpack(key)[0]
        if at >= end:
            break
        parts.append(value[max(offset, at) - at:min(end, at + len(value)) - at])
    return b"".join(parts)


class LmdbCommitLog(ScratchAppend, ScratchRead):
    """A ``triomq.store.CommitLog`` in one LMDB environment.

    Options: ``segment_size`` (virtual segment size for blank padding;
    default 1 GiB; fixed at creation), ``map_size`` (initial, grows),
    ``sync`` (default True: each append is durable when it returns).
    """

    def __init__(self, directory: str, *, segment_size: int = DEFAULT_SEGMENT_SIZE,
                 message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL, **options: Any) -> None:
        self.directory = directory
        try:
            #: The delays of ``SCHEDULE_TOPIC_XXXX``'s levels, for its entries' tags codes.
            self.delay_levels = parse_delay_levels(message_delay_level)
        except ValueError as exc:
            raise StoreError(f"message_delay_level: {exc}") from None
        self._env = Env(directory, ("log", "cq", "queues", "state"), **options)
        self._log = self._env.db("log")
        self._cq = self._env.db("cq")
        self._qdb = self._env.db("queues")
        self._state = self._env.db("state")
        with self._env.read() as txn:
            stored = txn.get(b"segment_size", db=self._state)
            dispatched = txn.get(b"dispatched", db=self._state)
            self._min, self._max = log_bounds(txn, self._log, self._state)
            self._queues = {
                (k[:-5].decode(), _QID.unpack(k[-4:])[0]): list(_RANGE.unpack(v))
                for k, v in txn.cursor(db=self._qdb)
            }
        if stored is not None and _U64.unpack(stored)[0] != segment_size:
            self._env.close()
            raise StoreError(f"{directory}: created with segment_size "
                             f"{_U64.unpack(stored)[0]}, opened with {segment_size}")
        self.segment_size = segment_size
        self._dispatched = _U64.unpack(dispatched)[0] if dispatched else self._max
        if stored is None:
            self._env.write(lambda txn: txn.put(b"segment_size", _U64.pack(segment_size),
                                                db=self._state))
        self._flushed = self._max

    @classmethod
    def open(cls, directory: str, options: Mapping[str, Any]) -> LmdbCommitLog:
        """The ``triomq_log_store`` factory."""
        used = ("segment_size", "map_size", "sync", "message_delay_level")
        return cls(directory, **store_options(options, OPTION_KEYS, used, "lmdb"))

    @property
    def min_offset(self) -> int:
        return self._min

    @property
    def max_offset(self) -> int:
        return self._max

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    # ----------------------------------------------------------------- writing

    def _put_bytes(self, txn, offset: int, data: bytes | bytearray) -> None:
        """Store ``data`` at ``offset`` as chunks that never cross a segment."""
        view = memoryview(data)
        done = 0
        while done < len(view):
            at = offset + done
            n = min(len(view) - done, segment_start(at, self.segment_size)
                    + self.segment_size - at)
            txn.put(_U64.pack(at), view[done:done + n], db=self._log)
            done += n

    def _index(self, txn, queues: dict, r: MessageRecord, queue_offset: int,
               phys: int, size: int) -> None:
        topic, queue_id, store_ts = r.topic, r.queue_id, r.store_timestamp
        if "\x00" in topic:
            raise StoreError(f"topic {topic!r} contains a NUL character")
        qkey = _qkey(topic, queue_id)
        code = cq_tags_code(topic, r.properties, store_ts, self.delay_levels, _tags_code(r.tags))
        txn.put(qkey + _U64.pack(queue_offset), _CQ.pack(phys, size, code, store_ts),
                db=self._cq)
        rng = queues.get((topic, queue_id))
        if rng is None or (rng[0] == rng[1] and queue_offset != rng[1]):
            # A new queue, or an empty one a replica joins mid-stream.
            rng = queues[topic, queue_id] = [queue_offset, queue_offset + 1]
        rng[1] = max(rng[1], queue_offset + 1)
        txn.put(qkey, _RANGE.pack(*rng), db=self._qdb)

    def _copy_queues(self) -> dict:
        return {k: list(v) for k, v in self._queues.items()}

    def append(self, record: MessageRecord) -> AppendResult:
        return self.append_batch((record,))[0]

    def append_batch(self, records: Sequence[MessageRecord]) -> list[AppendResult]:
        if self._dispatched != self._max:
            raise StoreError(f"the log ends with a torn record at {self._dispatched}; "
                             "truncate_to_last_whole_record() first")
        base = self._max
        try:
            batch = pack_records(records, base, self.segment_size, self.queue_max_offset)
        except ValueError as exc:
            raise StoreError(str(exc)) from None
        buf, placed = batch.data, batch.placed
        queues = self._copy_queues()
        end = base + len(buf)

        def write(txn):
            self._put_bytes(txn, base, buf)
            for r, (phys, size, qoff) in zip(records, placed, strict=True):
                self._index(txn, queues, r, qoff, phys, size)
            txn.put(b"dispatched", _U64.pack(end), db=self._state)

        self._env.write(write)
        self._commit(queues, end, end)
        return [AppendResult(p, s, q, r.store_timestamp)
                for r, (p, s, q) in zip(records, placed, strict=True)]

    def _commit(self, queues: dict, max_offset: int, dispatched: int) -> None:
        self._queues = queues
        self._max = max_offset
        self._dispatched = dispatched
        if self._env.sync_writes:
            self._flushed = max_offset
        self._flushed = min(self._flushed, max_offset)

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        if offset != self._max:
            self._start_at(offset)
        if not data:
            return self._max
        start = self._dispatched
        buf = (self.read(start, offset - start) if offset > start else b"") + bytes(data)
        scan = scan_log(buf, start, self.segment_size)
        if scan.stop == "bad":
            raise StoreCorruption("replicated data", scan.error.offset, scan.error.reason)
        if scan.stop == "zero":
            raise StoreCorruption("replicated data", scan.end,
                                  "zero fill where a record should start")
        records = []
        ends = {k: tuple(v) for k, v in self._queues.items()}
        try:
            for span in scan.spans:
                if span.blank:
                    continue
                check_placement(buf, span.offset - start, span.offset)
                r = decode(buf, span.offset - start, base_offset=start, verify_crc=False)[0]
                lo, hi = ends.get((r.topic, r.queue_id), (0, 0))
                if r.queue_offset > hi > lo:  # may rewrite or extend a queue, not skip ahead
                    raise RecordError(span.offset, f"queue offset {r.queue_offset} skips ahead "
                                                   f"of {r.topic}:{r.queue_id}'s end {hi}")
                ends[r.topic, r.queue_id] = (lo, max(hi, r.queue_offset + 1))
                records.append((span, r))
        except RecordError as exc:
            raise StoreCorruption("replicated data", exc.offset, exc.reason) from None
        queues = self._copy_queues()
        end = offset + len(data)

        def write(txn):
            self._put_bytes(txn, offset, data)
            for span, r in records:
                self._index(txn, queues, r, r.queue_offset, span.offset, span.size)
            txn.put(b"dispatched", _U64.pack(scan.end), db=self._state)

        self._env.write(write)
        self._commit(queues, end, scan.end)
        return end

    def _start_at(self, offset: int) -> None:
        """Let an empty log start at a later segment boundary, else ``OffsetMismatch``."""
        if self._max != self._min or offset < self._max or offset % self.segment_size:
            raise OffsetMismatch(offset, self._max)

        def write(txn):
            txn.put(b"base", _U64.pack(offset), db=self._state)
            txn.put(b"dispatched", _U64.pack(offset), db=self._state)

        self._env.write(write)
        self._min = self._max = self._dispatched = offset
        self._flushed = max(self._flushed, offset)

    # ----------------------------------------------------------------- reading

    def read(self, offset: int, size: int) -> bytes:
        if not self._min <= offset <= self._max:
            raise OffsetOutOfRange(offset, self._min, self._max)
        end = min(offset + max(size, 0), self._max)
        if end <= offset:
            return b""
        with self._env.read() as txn:
            return read_range(txn, self._log, offset, end)

    def read_into(self, offset: int, buffer: bytearray | memoryview) -> int:
        return read_into_by_read(self.read, offset, buffer)

    def read_record(self, offset: int) -> MessageRecord:
        if not self._min <= offset < self._dispatched:
            raise OffsetOutOfRange(offset, self._min, self._dispatched)
        head = self.read(offset, 4)
        size = int.from_bytes(head, "big", signed=True)
        try:
            if size <= 0 or offset + size > self._dispatched:
                raise RecordError(offset, f"total size {size} runs past the log end")
            return decode(self.read(offset, size), base_offset=offset)[0]
        except RecordError as exc:
            raise StoreCorruption(self.directory, exc.offset, exc.reason) from None

    def iter_records(self, start: int | None = None, end: int | None = None
                     ) -> Iterator[MessageRecord]:
        pos = self._min if start is None else start
        end = self._dispatched if end is None else min(end, self._dispatched)
        if not self._min <= pos <= self._max:
            raise OffsetOutOfRange(pos, self._min, self._max)
        while pos < end:
            window = _READ_WINDOW
            while True:
                buf = self.read(pos, min(window, end - pos))
                scan = scan_log(buf, pos, self.segment_size)
                if scan.stop == "bad":
                    raise StoreCorruption(self.directory, scan.error.offset, scan.error.reason)
                if scan.spans or len(buf) >= end - pos:
                    break
                window = max(window * 2, int.from_bytes(buf[:4], "big"))
            for span in scan.spans:
                if not span.blank:
                    yield decode(buf, span.offset - pos, base_offset=pos, verify_crc=False)[0]
            if scan.end == pos:
                return
            pos = scan.end

    def last_whole_record_end(self) -> int:
        return self._dispatched

    # ---------------------------------------------------------------- truncate

    def truncate(self, offset: int) -> None:
        if offset >= self._max:
            return
        if offset < self._min:
            raise OffsetOutOfRange(offset, self._min, self._max)
        queues = self._copy_queues()

        def write(txn):
            cur = txn.cursor(db=self._log)
            cur.set_range(_U64.pack(offset))
            if not cur.key() or _U64.unpack(cur.key())[0] > offset:
                if cur.prev():
                    at = _U64.unpack(cur.key())[0]
                    if at + len(cur.value()) > offset:
                        cur.put(cur.key(), cur.value()[:offset - at])
                    cur.next()
                else:
                    cur.first()
            while cur.key():
                if not cur.delete():
                    break
            if offset == self._min:
                txn.put(b"base", _U64.pack(offset), db=self._state)
            boundary = self._truncate_queues(txn, queues, offset)
            txn.put(b"dispatched", _U64.pack(boundary), db=self._state)
            return boundary

        boundary = self._env.write(write)
        self._commit(queues, offset, boundary)

    def _truncate_queues(self, txn, queues: dict, offset: int) -> int:
        """Delete entries of records not ending by ``offset``; return the last boundary."""
        boundary = max(self._min, segment_start(offset, self.segment_size))
        for (topic, qid), rng in queues.items():
            qkey = _qkey(topic, qid)
            while rng[1] > rng[0]:
                k = qkey + _U64.pack(rng[1] - 1)
                phys, size, _, _ = _CQ.unpack(txn.get(k, db=self._cq))
                if phys + size <= offset:
                    boundary = max(boundary, phys + size)
                    break
                txn.delete(k, db=self._cq)
                rng[1] -= 1
            txn.put(qkey, _RANGE.pack(*rng), db=self._qdb)
        if boundary < offset:
            with_txn = bytes(self._read_in(txn, boundary, offset))
            boundary = scan_log(with_txn, boundary, self.segment_size).end
        return boundary

    def _read_in(self, txn, lo: int, hi: int) -> bytes:
        parts = []
        cur = txn.cursor(db=self._log)
        cur.set_range(_U64.pack(lo))
        if not cur.key() or _U64.unpack(cur.key())[0] > lo:
            cur.prev()
        for key, value in cur:
            at = _U64.unpack(key)[0]
            if at >= hi:
                break
            parts.append(value[max(lo, at) - at:min(hi, at + len(value)) - at])
        return b"".join(parts)

    def truncate_to_last_whole_record(self) -> int:
        self.truncate(self._dispatched)
        return self._max

    def flush(self) -> int:
        if not self._env.closed:
            self._env.sync()
        self._flushed = self._max
        return self._flushed

    # --------------------------------------------------------------- retention

    def retain(self, now_ms: int, max_age_ms: int | None = None,
               max_bytes: int | None = None) -> int:
        keep_from = self._min
        seg = segment_start(self._min, self.segment_size)
        while True:
            nxt = seg + self.segment_size
            if nxt >= self._dispatched:
                break
            too_big = max_bytes is not None and self._max - seg > max_bytes
            too_old = (max_age_ms is not None
                       and store_timestamp_at(self.read(nxt, 80)) < now_ms - max_age_ms)
            if not (too_big or too_old):
                break
            keep_from = seg = nxt
        if keep_from == self._min:
            return self._min
        queues = self._copy_queues()

        def write(txn):
            cur = txn.cursor(db=self._log)
            while cur.first() and _U64.unpack(cur.key())[0] < keep_from:
                cur.delete()
            for (topic, qid), rng in queues.items():
                qkey = _qkey(topic, qid)
                while rng[0] < rng[1]:
                    k = qkey + _U64.pack(rng[0])
                    if _CQ.unpack(txn.get(k, db=self._cq))[0] >= keep_from:
                        break
                    txn.delete(k, db=self._cq)
                    rng[0] += 1
                txn.put(qkey, _RANGE.pack(*rng), db=self._qdb)

        self._env.write(write)
        self._queues = queues
        self._min = keep_from
        return self._min

    # ------------------------------------------------------------------ queues

    def queues(self) -> list[tuple[str, int]]:
        return sorted(self._queues)

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        rng = self._queues.get((topic, queue_id))
        return 0 if rng is None else rng[0]

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        rng = self._queues.get((topic, queue_id))
        return 0 if rng is None else rng[1]

    def _entry(self, txn, topic: str, queue_id: int, q: int) -> tuple[int, int, int, int]:
        return _CQ.unpack(txn.get(_qkey(topic, queue_id) + _U64.pack(q), db=self._cq))

    def queue_entries(self, topic: str, queue_id: int, start: int, max_count: int
                      ) -> list[QueueEntry]:
        rng = self._queues.get((topic, queue_id))
        if rng is None:
            return []
        lo = max(start, rng[0])
        hi = min(rng[1], lo + max(max_count, 0))
        with self._env.read() as txn:
            return [QueueEntry(q, *self._entry(txn, topic, queue_id, q)[:3])
                    for q in range(lo, hi)]

    def search_queue_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        rng = self._queues.get((topic, queue_id))
        if rng is None:
            return 0
        lo, hi = rng
        with self._env.read() as txn:
            while lo < hi:
                mid = (lo + hi) // 2
                if self._entry(txn, topic, queue_id, mid)[3] < timestamp_ms:
                    lo = mid + 1
                else:
                    hi = mid
        return lo

    def earliest_store_time(self, topic: str, queue_id: int) -> int | None:
        rng = self._queues.get((topic, queue_id))
        if rng is None or rng[0] == rng[1]:
            return None
        with self._env.read() as txn:
            return self._entry(txn, topic, queue_id, rng[0])[3]

    def close(self) -> None:
        if not self._env.closed:
            # A record still arriving from the master: a recovery would cut it anyway.
            self.truncate(self._dispatched)
            self.flush()
            self._env.close()

    def __enter__(self) -> LmdbCommitLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
