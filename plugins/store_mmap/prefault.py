"""Warming a segment's pages ahead of its writes, off the writer's thread.

The first write to each page of a fresh mapped segment costs a page fault:
the kernel allocates a page-cache page, zero-fills it and maps it. On a
virtual machine whose memory the host hands out lazily, that first touch
may also fault on the host, and a fresh segment can cost more than the
bytes' copy itself several times over. RocketMQ avoids it with
``AllocateMappedFileService`` and ``warmMappedFile``; ``Warmer`` does the
same job a window at a time: a short-lived thread populates the pages
(``madvise(MADV_POPULATE_WRITE)`` or ``..._READ``, Linux 5.14+) a little
ahead of the write position; the call releases the GIL, so the writer
keeps running.

Writable or readable: a page populated writable costs the writer nothing
more, but it is dirty, so a sync before the writer reaches it writes its
zeros to disk too. Populated readable, it is allocated, zeroed and mapped
and the writer's first write only takes a small fault (the page becomes
writable and dirty, its block is reserved). So the pages a writer asks for
(every half window it writes) are warmed writable only if the queue was
not synced since it last asked: a writer far ahead of its syncs (a slave
catching up, a broker not flushing per put) gets writable pages and at
most a window of zeros written per sync, a writer synced more often (a
flush per put) gets readable ones and no extra disk writes.

Large folios for a writer that fills them between syncs: while the writer
writes a folio or more (``FOLIO``, 2 MiB) between two syncs, or asks for
more pages twice without a sync between (not at its first ask: a master
flushing per put has not synced yet then; so the first ask warms only two
folios ahead, and a writer that goes on without a sync asks again one folio
later), the segment is mapped ``MADV_HUGEPAGE`` from the range it asks for
to its end (the writer's own faults, where it overtakes the warming, get
large folios too), so the kernel hands out page cache in 2 MiB folios
(filesystems with large folios: ext4 since Linux 6.16, XFS), one fault and
one allocation per folio instead of 512: populating runs three to six
times faster on recycled memory here (about half as fast on memory this
virtual machine had not touched for a while, which its host backs lazily). A written mapped folio
is dirty as a whole, so a sync writes all of it: a writer syncing more
often than it fills a folio (a master flushing per put, a slave that
caught up and follows a trickle) would write 2 MiB per sync. So a sync
that finds less than a folio written since the previous one stops the
large folios until a sync finds a folio written again, and drops those
already warmed: right after the sync, when it is clean, the writer's own
folio leaves the page cache (its faults read it back in small pages), and
at its next write the writer punches the warmed ones ahead of it out of the
file (``MADV_REMOVE``: they hold only zeros; only the writer's thread knows
nothing was written there since).

Warming never changes a byte of the file, so it has no bearing on crash
safety. A warmed queue needs no ``posix_fallocate`` ahead of its writes
either (the populating faults reserve the blocks): that call locks the
file's mapping against every page fault while it runs, which would make
the writer wait on the warmer. Where the kernel does not support the
advice, warming is off.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import threading
from typing import Protocol

import attrs

#: Bytes warmed ahead of the write position.
WARM_AHEAD = 32 << 20
#: Bytes per ``madvise`` call. The thread needs the GIL between two calls,
#: which a writer copying into (and faulting) its pages holds: large calls
#: keep the warmer from waiting for it often (2 MiB calls left the writer
#: faulting more of its pages itself, in interleaved runs). ``stop`` waits for
#: one call at most (about 10-20 ms here).
WARM_CHUNK = 8 << 20
_MADV_POPULATE_READ = 22
_MADV_POPULATE_WRITE = 23


def _folio_size() -> int:
    """The kernel's PMD folio size (``hpage_pmd_size``), 2 MiB on x86-64."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 2 << 20


#: Bytes per large folio; a writer filling one between syncs gets them.
FOLIO = _folio_size()


def _load_madvise():
    """libc's ``madvise`` (a ctypes call releases the GIL) if the kernel knows
    ``MADV_POPULATE_READ`` and ``..._WRITE``, else None."""
    if sys.platform != "linux":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    probe = mmap.mmap(-1, mmap.PAGESIZE)
    try:
        supported = all(_populate(madvise, probe, 0, mmap.PAGESIZE, advice) == 0
                        for advice in (_MADV_POPULATE_READ, _MADV_POPULATE_WRITE))
    finally:
        probe.close()
    return madvise if supported else None


def _populate(madvise, mm: mmap.mmap, lo: int, hi: int, advice: int) -> int:
    """``madvise(advice)`` on ``mm[lo:hi]``: 0 or the errno."""
    pages = (ctypes.c_char * (hi - lo)).from_buffer(mm, lo)
    try:
        return 0 if madvise(ctypes.addressof(pages), hi - lo, advice) == 0 else ctypes.get_errno()
    finally:
        del pages  # the mapping may be closed again once no view of it remains


_madvise = _load_madvise()
#: Whether this system can warm pages (Linux 5.14 or later).
SUPPORTED = _madvise is not None
#: Whether mappings take ``MADV_HUGEPAGE`` (a kernel with transparent huge pages).
LARGE_FOLIOS = SUPPORTED and hasattr(mmap, "MADV_HUGEPAGE") and hasattr(mmap, "MADV_REMOVE")


class WarmSegment(Protocol):
    """What the warmer needs of a segment (``segments.Segment``)."""

    fd: int
    mm: mmap.mmap
    start: int
    size: int


@attrs.define
class WarmReport:
    """What a ``Warmer`` did: bytes it populated writable and readable, and
    ``madvise`` calls the kernel refused (those pages fault on the writer's
    side instead)."""

    writable_bytes: int = 0
    readable_bytes: int = 0
    failed_calls: int = 0


class Warmer:
    """Keeps one segment queue's pages warm ahead of its writer.

    The writer calls ``wrote(seg, end)`` after writing ``seg`` up to
    ``end``; a thread then warms ``seg`` up to ``end + WARM_AHEAD`` and
    exits once there (no thread lingers while the log is idle). Call
    ``synced`` after each sync of the queue and ``stop`` before unmapping
    any segment. ``report`` counts what was warmed, and how.
    """

    def __init__(self) -> None:
        #: Off for good once the kernel refuses the advice.
        self._large_folios = LARGE_FOLIOS
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._segment: WarmSegment | None = None
        #: Warm ``_segment`` from ``_start`` up to ``_target``.
        self._start = 0
        self._target = 0
        self._stopping = False
        self._syncs = 0
        self._syncs_seen = 0
        self._writable = True
        #: Where the writer got to (segment, end), now and at the last sync.
        self._written: tuple[WarmSegment | None, int] = (None, 0)
        self._written_at_sync: tuple[WarmSegment | None, int] = (None, 0)
        #: Whether the writer fills folios between syncs (see above).
        self._fills_folios = False
        self._asked = False
        #: Bytes warmed ahead at each ask: two folios at the first, until the
        #: writer shows whether it fills folios between syncs.
        self._window = 2 * FOLIO
        #: ``_segment`` holds large folios warmed up to here.
        self._large_until = 0
        #: Large folios the writer is to punch out, from past its end to here.
        self._punch: tuple[WarmSegment, int] | None = None
        self.report = WarmReport()

    def synced(self) -> None:
        """The queue was synced: the next pages asked for are warmed readable,
        and large folios stop if the writer wrote less than one since the
        previous sync (see above)."""
        with self._lock:
            self._syncs += 1
            (seg, end), (seg_before, end_before) = self._written, self._written_at_sync
            self._written_at_sync = self._written
            if seg is None or seg_before is None:
                return
            self._fills_folios = seg.start + end - seg_before.start - end_before >= FOLIO
            lo = end - end % FOLIO
            if not self._fills_folios and seg is self._segment and self._large_until > lo:
                self._drop_large_folios(seg, lo)

    def _drop_large_folios(self, seg: WarmSegment, lo: int) -> None:
        """Right after a sync, under the lock: map ``[lo, _large_until)`` for
        small pages, drop the writer's folio at ``lo`` (clean now) from the
        page cache, and leave the large folios after it to the writer."""
        hi, self._large_until = self._large_until, 0
        folio_end = min(lo + FOLIO, hi)
        try:
            seg.mm.madvise(mmap.MADV_NOHUGEPAGE, lo, seg.size - lo)
            seg.mm.madvise(mmap.MADV_DONTNEED, lo, folio_end - lo)
            # Dirty pages stay: the kernel never drops those.
            os.posix_fadvise(seg.fd, lo, folio_end - lo, os.POSIX_FADV_DONTNEED)
        except OSError:  # left as they are; warming keeps to small pages
            self._large_folios = False
            return
        if folio_end < hi:
            self._punch = (seg, hi)

    def _punch_ahead(self, seg: WarmSegment, end: int) -> None:
        """On the writer's thread: punch the large folios past ``end`` out."""
        with self._lock:
            punch, self._punch = self._punch, None
            if punch is None or punch[0] is not seg or seg is not self._segment:
                return
            lo, hi = end + (-end) % FOLIO, punch[1]
            if lo < hi:
                try:
                    seg.mm.madvise(mmap.MADV_REMOVE, lo, hi - lo)
                except OSError:  # a filesystem without hole punching
                    self._large_folios = False

    def wrote(self, seg: WarmSegment, end: int) -> None:
        """``seg`` is written up to ``end``: warm ahead of it if not already asked."""
        self._written = (seg, end)
        if self._punch is not None:
            self._punch_ahead(seg, end)
        if seg is self._segment and end + self._window // 2 <= self._target:
            return
        with self._lock:
            if self._asked:
                self._window = WARM_AHEAD
            target = min(seg.size, end + self._window)
            if self._stopping or (seg is self._segment and target <= self._target):
                return
            # Writable only if no sync came since the writer last asked for more.
            self._writable = self._syncs == self._syncs_seen
            self._syncs_seen = self._syncs
            if self._writable and self._asked:
                self._fills_folios = True  # half a window written without a sync
            self._asked = True
            if seg is not self._segment:
                self._segment, self._start = seg, end
                self._large_until = 0
            elif self._start < end:
                # The writer caught up: it faults its next pages itself and
                # warming goes on a chunk further, so neither waits on the other.
                self._start = end + WARM_CHUNK
            self._target = target
            self._start_thread()

    def finish(self) -> None:
        """Wait until the pages asked for so far are warm."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()

    def stop(self) -> None:
        """Stop warming and wait for the thread to let go of its segment.

        Later writes start warming again.
        """
        with self._lock:
            self._stopping = True
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._lock:
            self._stopping = False
            self._segment = self._punch = None
            self._target = self._large_until = 0

    def _start_thread(self) -> None:
        if self._thread is None and self._start < self._target:
            self._thread = threading.Thread(target=self._run, name="triomq-warm-segment",
                                            daemon=True)
            self._thread.start()

    def _next(self) -> tuple[WarmSegment, int, int, int, bool] | None:
        with self._lock:
            seg = self._segment
            if self._stopping or seg is None or self._start >= self._target:
                self._thread = None
                return None
            lo = self._start - self._start % mmap.PAGESIZE
            hi = min(self._target, lo + WARM_CHUNK)
            self._start = hi
            large = self._large_folios and self._fills_folios
            if large:
                try:
                    seg.mm.madvise(mmap.MADV_HUGEPAGE, lo, seg.size - lo)
                except OSError:  # a kernel without transparent huge pages
                    self._large_folios = large = False
            advice = _MADV_POPULATE_WRITE if self._writable else _MADV_POPULATE_READ
            return seg, lo, hi, advice, large

    def _run(self) -> None:
        while (job := self._next()) is not None:
            seg, lo, hi, advice, large = job
            # A failure (EFAULT, ENOMEM under memory pressure) only means these
            # pages fault on the writer's side, as without warming.
            failed = _populate(_madvise, seg.mm, lo, hi, advice) != 0
            with self._lock:
                if failed:
                    self.report.failed_calls += 1
                elif advice == _MADV_POPULATE_WRITE:
                    self.report.writable_bytes += hi - lo
                else:
                    self.report.readable_bytes += hi - lo
            if large:
                # Recorded once populated: a sync dropping large folios while
                # this chunk was being warmed leaves it to the next sync. The
                # kernel's folio at ``hi`` reaches the next folio boundary.
                with self._lock:
                    if seg is self._segment:
                        until = min(seg.size, hi + (-hi) % FOLIO)
                        self._large_until = max(self._large_until, until)
