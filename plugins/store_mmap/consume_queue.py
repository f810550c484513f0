"""Consume queues: per (topic, queueId), 20-byte entries pointing into the commit log.

Entry ``i`` (queue offset ``i``) lives at byte ``20 * i`` of the queue's
logical byte space, cut into segment files of ``entries_per_file``
entries named by their start byte (RocketMQ's layout). Entries are written
in order, so the non-zero entries of the last file are a prefix; the
physical offsets of a queue's entries increase, which makes every search a
binary search. A consume queue is derived data: recovery rebuilds its tail
from the commit log.

A store's queues share a ``MappingPool``, which bounds the files they keep
mapped (and so the descriptors they hold) however many queues there are.
Blocks are allocated ``PREALLOCATE_CHUNK`` bytes ahead, not the commit
log's megabytes: a store may hold tens of thousands of mostly idle queues.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from triomq.plugins.store_mmap.mapping_pool import MappingPool
from triomq.plugins.store_mmap.segments import SegmentQueue
from triomq.protocol.commitlog_layout import (
    CQ_ENTRY_SIZE,
    pack_cq_entry,
    pack_cq_entry_into,
    unpack_cq_entry,
)

_ZERO_ENTRY = bytes(CQ_ENTRY_SIZE)
_BLANK_ENTRY = pack_cq_entry(0, 0x7FFFFFFF, 0)

#: Bytes of a queue file's blocks allocated ahead at a time (3,276 entries).
PREALLOCATE_CHUNK = 64 << 10


class ConsumeQueue:
    """The consume queue stored in ``directory``."""

    def __init__(self, directory: str, entries_per_file: int, *, writable: bool = True,
                 pool: MappingPool | None = None) -> None:
        self.files = SegmentQueue(directory, entries_per_file * CQ_ENTRY_SIZE, writable=writable,
                                  sync_creation_lazily=True, read_ahead_new=False, pool=pool,
                                  preallocate_chunk=PREALLOCATE_CHUNK)
        self.min_offset, end = self._find_bounds()
        self.max_offset = max(end, self.min_offset)
        self._synced = self.max_offset

    def _find_bounds(self) -> tuple[int, int]:
        """The first entry of the first file that is not a blank (see ``_start_at``),
        and the first all-zero entry of the last file: the queue's offsets.

        Read with ``pread``, not through a mapping: opening a store probes every
        queue once, and mapping each would cost a kernel mapping and, past the
        pool's limit, unmapping another (the page cache is the same either way).
        """
        segments = self.files.segments
        if not segments:
            return 0, 0
        first, last = segments[0], segments[-1]
        fd = os.open(first.path, os.O_RDONLY)
        try:
            base = first.start // CQ_ENTRY_SIZE
            at = _first_entry(fd, first.size, _not_blank)
            if last is first:  # the usual queue: one file, opened once
                return base + at, base + _first_entry(fd, first.size, _is_zero, at)
            low = base + at
        finally:
            os.close(fd)
        fd = os.open(last.path, os.O_RDONLY)
        try:
            return low, last.start // CQ_ENTRY_SIZE + _first_entry(fd, last.size, _is_zero)
        finally:
            os.close(fd)

    def _start_at(self, queue_offset: int) -> None:
        """Let an empty queue start at ``queue_offset`` (a replica joining mid-stream).

        Like RocketMQ, the entries before it in its file are blank entries
        (offset 0, size 0x7FFFFFFF), so the written entries stay a prefix.
        """
        self.files.delete_from(0)
        pos = queue_offset * CQ_ENTRY_SIZE
        self.files.reserve(pos - pos % self.files.segment_size, pos + CQ_ENTRY_SIZE)
        seg = self.files.get_or_create(pos)
        seg.mm[0:pos - seg.start] = _BLANK_ENTRY * ((pos - seg.start) // CQ_ENTRY_SIZE)
        self.min_offset = self.max_offset = self._synced = queue_offset

    def _ensure(self, queue_offset: int) -> None:
        """Restart an empty queue whose next entry would leave a gap in its files."""
        if self.max_offset == self.min_offset and queue_offset != self.max_offset:
            end = self.files.end
            if end is None or queue_offset * CQ_ENTRY_SIZE > end or queue_offset < self.min_offset:
                self._start_at(queue_offset)

    def reserve(self, first: int, count: int) -> None:
        """Take the files and blocks entries ``[first, first + count)`` need, so
        that writing them cannot fail; ``StoreOutOfResources`` if they cannot be had."""
        lo = first * CQ_ENTRY_SIZE
        hi = lo + count * CQ_ENTRY_SIZE
        files = self.files
        if files.segments and first == self.max_offset:  # the usual case: in the last file
            seg = files.segments[-1]
            if seg.start <= lo and hi <= (seg.allocated if files.preallocate else seg.end):
                seg.pin()  # mapped, and kept so while the pool is held
                return
        self._ensure(first)
        files.reserve(lo, hi)

    def put(self, queue_offset: int, physical_offset: int, size: int, tags_code: int) -> None:
        """Write entry ``queue_offset`` (idempotent: recovery may rewrite it)."""
        self._ensure(queue_offset)
        pos = queue_offset * CQ_ENTRY_SIZE
        seg = self.files.get_or_create(pos)
        pack_cq_entry_into(seg.mm, pos - seg.start, physical_offset, size, tags_code)
        if queue_offset >= self.max_offset:
            self.max_offset = queue_offset + 1
        if queue_offset < self._synced:
            self._synced = queue_offset

    def put_run(self, first: int, entries: bytes | bytearray) -> None:
        """Write consecutive packed entries starting at queue offset ``first``."""
        self._ensure(first)
        self.files.write(first * CQ_ENTRY_SIZE, entries)
        end = first + len(entries) // CQ_ENTRY_SIZE
        if end > self.max_offset:
            self.max_offset = end
        if first < self._synced:
            self._synced = first

    def get(self, queue_offset: int) -> tuple[int, int, int]:
        """``(physical_offset, size, tags_code)`` of an entry in ``[min, max)``."""
        pos = queue_offset * CQ_ENTRY_SIZE
        seg = self.files.find(pos)
        if seg is None:
            raise IndexError(queue_offset)
        return unpack_cq_entry(seg.mm, pos - seg.start)

    def first_at_or_after(self, physical_offset: int) -> int:
        """The first queue offset whose record starts at or after ``physical_offset``."""
        return self._first(lambda phys, size: phys >= physical_offset)

    def _first(self, pred) -> int:
        """The first queue offset in ``[min, max)`` whose entry satisfies the monotone ``pred``."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            phys, size, _ = self.get(mid)
            if pred(phys, size):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def truncate(self, queue_offset: int) -> None:
        """Drop entries at or after ``queue_offset``."""
        queue_offset = max(queue_offset, self.min_offset)
        if queue_offset >= self.max_offset:
            return
        start = queue_offset * CQ_ENTRY_SIZE
        self.files.zero(start, self.max_offset * CQ_ENTRY_SIZE)
        # Whole files past the cut go; the first file stays so min_offset survives.
        self.files.delete_from(start + 1 if start == self.files.first_start else start)
        self.max_offset = queue_offset
        self._synced = min(self._synced, queue_offset)

    def truncate_physical(self, physical_end: int) -> None:
        """Drop entries of records that do not end at or before ``physical_end``."""
        if self.max_offset == self.min_offset:
            return
        phys, size, _ = self.get(self.max_offset - 1)
        if phys + size > physical_end:
            self.truncate(self._first(lambda p, n: p + n > physical_end))

    def drop_before_physical(self, min_physical: int) -> None:
        """Forget entries of records below ``min_physical`` (retention)."""
        new_min = self.first_at_or_after(min_physical)
        self.files.delete_before(new_min * CQ_ENTRY_SIZE)
        self.min_offset = new_min

    def sync(self) -> None:
        """Make the entries written since the last sync durable."""
        if self._synced < self.max_offset:
            self.files.sync_range(self._synced * CQ_ENTRY_SIZE, self.max_offset * CQ_ENTRY_SIZE)
            self._synced = self.max_offset

    def close(self) -> None:
        self.files.close()


def _not_blank(entry: bytes) -> bool:
    return entry != _BLANK_ENTRY


def _is_zero(entry: bytes) -> bool:
    return entry == _ZERO_ENTRY


def _first_entry(fd: int, size: int, found: Callable[[bytes], bool], low: int = 0) -> int:
    """The index of the first entry of the file ``fd`` (of ``size`` bytes) for which
    ``found`` holds, searched from entry ``low`` on (the entries it holds for are a
    suffix), or the file's entry count."""
    lo, hi = low, size // CQ_ENTRY_SIZE
    if lo < hi and found(os.pread(fd, CQ_ENTRY_SIZE, lo * CQ_ENTRY_SIZE)):
        return lo  # a first file without blanks; an empty queue
    while lo < hi:
        mid = (lo + hi) // 2
        if found(os.pread(fd, CQ_ENTRY_SIZE, mid * CQ_ENTRY_SIZE)):
            hi = mid
        else:
            lo = mid + 1
    return lo


def queue_dir(root: str, topic: str, queue_id: int) -> str:
    """``<root>/<topic>/<queueId>``."""
    return os.path.join(root, topic, str(queue_id))
