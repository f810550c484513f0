"""A bound on the segment files a store keeps mapped: consume queues' files.

Every consume queue is a directory of segment files, and a broker may hold
tens of thousands of queues. Mapping each file for good costs a file
descriptor per file (Python's ``mmap`` keeps its own duplicate) and a
kernel mapping, so enough distinct queues exhaust the process's open-file
limit (``EMFILE``) and a restart, which opens every queue, fails the same way.

A ``PooledSegment`` holds no descriptor of its own: it maps its file on
first use and closes the descriptor it opened for that at once, leaving the
mapping's duplicate as the only one. The ``MappingPool`` unmaps segments
beyond ``limit``, not recently used ones first (CLOCK: using a segment
only sets a flag, so every write does not reorder a list); a segment
unmapped is mapped again on its next use. Unmapping loses nothing: written pages stay in the page
cache, and syncing opens the file by its path (``fdatasync`` works on the
file, whichever descriptor names it).

Between ``hold`` and ``release`` no segment ``pin``ned meanwhile is
unmapped (the pool may then exceed its limit by the segments of one batch),
so a writer that first reserves every entry of a batch can then write them
without mapping anything, i.e. without a step that can fail.

The pool is used by one thread (the store's writer and readers); syncing
from a flush thread touches no mapping.
"""

from __future__ import annotations

import errno
import mmap
import os
from collections import OrderedDict
from collections.abc import Callable

from triomq.store import StoreCorruption, StoreOutOfResources

#: Errors of ``open``/``mmap`` that say the process is short of descriptors or mappings.
_SHORT_OF_MAPPINGS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def default_limit() -> int:
    """1024 files, or half the process's open-file limit if that is lower."""
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 1024
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(1, min(1024, soft // 2))


class MappingPool:
    """The mapped ``PooledSegment``s of a store, in the order the CLOCK hand visits them."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a mapping pool needs a limit of at least 1, not {limit}")
        self.limit = limit
        self._mapped: OrderedDict[PooledSegment, None] = OrderedDict()
        self._held = False
        self._batch = 0
        #: Segments mapped again after being unmapped (the cost of a low limit).
        self.remaps = 0

    @property
    def mapped(self) -> int:
        return len(self._mapped)

    def hold(self) -> None:
        """Until ``release``, keep every segment pinned from now on mapped."""
        self._held = True
        self._batch += 1

    def pin(self, seg: PooledSegment) -> None:
        seg.pinned_in = self._batch

    def release(self) -> None:
        self._held = False
        self._unmap_down_to(self.limit)

    def map(self, seg: PooledSegment) -> mmap.mmap:
        """Map ``seg``, first unmapping others to stay within the limit.

        Short of descriptors or mappings anyway (the process holds other
        files), it gives back half of its mappings and tries once more.
        """
        if not self._held:
            self._unmap_down_to(self.limit - 1)
        try:
            mm = seg.open_mapping()
        except OSError as exc:
            if exc.errno not in _SHORT_OF_MAPPINGS:
                raise
            self._unmap_down_to(len(self._mapped) // 2)
            try:
                mm = seg.open_mapping()
            except OSError as again:
                if again.errno in StoreOutOfResources.ERRNOS:
                    raise StoreOutOfResources(f"mapping {seg.path}", again.errno) from None
                raise
        if seg.mapped_before:
            self.remaps += 1
        seg.mapped_before = True
        seg.referenced = True
        self._mapped[seg] = None
        return mm

    def forget(self, seg: PooledSegment) -> None:
        self._mapped.pop(seg, None)

    def _unmap_down_to(self, count: int) -> None:
        """Unmap segments until ``count`` stay mapped, if two rounds of the hand
        find enough: one used since the hand last passed it gets another round;
        while held, one pinned in this batch stays."""
        for _ in range(2 * len(self._mapped)):
            if len(self._mapped) <= count:
                return
            seg = next(iter(self._mapped))
            if seg.referenced or (self._held and seg.pinned_in == self._batch):
                seg.referenced = False
                self._mapped.move_to_end(seg)
                continue
            try:
                seg.unmap()
            except BufferError:  # a view of it is alive: keep it
                self._mapped.move_to_end(seg)
                continue
            del self._mapped[seg]


class PooledSegment:
    """A segment file mapped while it is in use (the ``Segment`` interface)."""

    def __init__(self, pool: MappingPool, path: str, start: int, size: int,
                 writable: bool) -> None:
        self.path = path
        self.start = start
        self.size = size
        self.end = start + size
        #: Blocks up to here are allocated (see ``SegmentQueue.write``).
        self.allocated = 0
        self.writable = writable
        #: Used since the pool's CLOCK hand last passed it.
        self.referenced = False
        #: The pool's batch it was last pinned in (see ``MappingPool.hold``).
        self.pinned_in = -1
        self.mapped_before = False
        self._pool = pool
        self._mm: mmap.mmap | None = None
        self._advice: int | None = None
        actual = os.stat(path).st_size
        if actual != size:
            raise StoreCorruption(path, 0, f"segment is {actual} bytes, expected {size}")

    @property
    def mm(self) -> mmap.mmap:
        mm = self._mm
        if mm is None:
            return self._pool.map(self)
        self.referenced = True
        return mm

    def pin(self) -> None:
        """Map it, and keep it mapped until the pool's current hold ends."""
        if self._mm is None:
            self._pool.map(self)
        self._pool.pin(self)

    def open_mapping(self) -> mmap.mmap:
        fd = os.open(self.path, os.O_RDWR if self.writable else os.O_RDONLY)
        try:
            mm = mmap.mmap(fd, self.size,
                           access=mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ)
        finally:
            os.close(fd)  # the mapping keeps a duplicate of its own
        if self._advice is not None:
            mm.madvise(self._advice)
        self._mm = mm
        return mm

    def unmap(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def advise(self, advice: int) -> None:
        """Apply ``madvise(advice)`` now if mapped, and whenever mapped again."""
        self._advice = advice
        if self._mm is not None:
            self._mm.madvise(advice)

    def _with_fd(self, call: Callable[[int], object]) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR if self.writable else os.O_RDONLY)
        except OSError as exc:
            if exc.errno in StoreOutOfResources.ERRNOS:
                raise StoreOutOfResources(f"opening {self.path}", exc.errno) from None
            raise
        try:
            call(fd)
        finally:
            os.close(fd)

    def sync(self) -> None:
        """Make the segment's written bytes durable."""
        self._with_fd(os.fdatasync)

    def sync_all(self) -> None:
        """Make the segment's bytes and size durable."""
        self._with_fd(os.fsync)

    def allocate(self, lo: int, hi: int) -> None:
        self._with_fd(lambda fd: os.posix_fallocate(fd, lo, hi - lo))

    def close(self) -> None:
        self._pool.forget(self)
        self.unmap()
