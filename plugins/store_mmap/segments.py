"""Segment files mapped in memory: one directory of fixed-size, 20-digit-named files.

``SegmentQueue`` is RocketMQ's mapped file queue: segments are preallocated
(sparse) to ``segment_size`` and mapped whole, so appends and reads are
slice operations on an ``mmap``. Durability is ``os.fdatasync`` on the
file (the mapping is shared, so it covers the mapped writes) and runs in
the caller's thread, which is a worker thread when called from trio.

A new segment is created as ``<name>.tmp`` and renamed once sized and
synced; a leftover ``*.tmp`` (a crash during creation) is removed at open.
Any other file that is not a segment is an error naming it.

Writes allocate the file's blocks a few MiB ahead (``posix_fallocate``):
on ext4 a write through the mapping that first touches a page of a sparse
file allocates its block in the page fault, which costs as much as the
copy itself. Only a window ahead of the data is reserved, not whole 1 GiB
segments. A commit log's queue instead warms its pages ahead of the
writes in a background thread (``prefault.Warmer``), which takes those
first-touch faults, block reservation included, off the writer's thread.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import json
import mmap
import os
import threading
from typing import TYPE_CHECKING, Any

from triomq.durable_files import TEMP_SUFFIX, fsync_directory
from triomq.plugins.store_mmap import prefault
from triomq.protocol.commitlog_layout import SegmentNameError, parse_segment_name, segment_name
from triomq.store import StoreCorruption, StoreError, StoreOutOfResources

if TYPE_CHECKING:
    from triomq.plugins.store_mmap.mapping_pool import MappingPool

#: Bytes of blocks ``SegmentQueue.write`` allocates ahead at a time.
PREALLOCATE_CHUNK = 4 << 20


def read_json(path: str) -> Any | None:
    """The JSON document at ``path``, ``None`` if the file does not exist."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise StoreCorruption(path, 0, f"not valid JSON: {exc}") from None


class DirectoryLock:
    """An exclusive lock on ``<directory>/lock`` held while a store is open.

    A POSIX record lock, like the one RocketMQ takes on the same file of its
    store root: a second process (triomq or RocketMQ) cannot open the store
    for writing meanwhile, and the lock goes away with the process.
    """

    def __init__(self, directory: str) -> None:
        path = os.path.join(directory, "lock")
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.fd)
            raise StoreError(f"{directory} is in use by another process (lock on {path})"
                             ) from None

    def release(self) -> None:
        os.close(self.fd)


class Segment:
    """One mapped segment file starting at ``start``."""

    def __init__(self, path: str, start: int, size: int, writable: bool) -> None:
        self.path = path
        self.start = start
        self.size = size
        self.end = start + size
        #: Blocks up to here are allocated (``SegmentQueue.write`` reserves ahead
        #: unless the queue warms its pages).
        self.allocated = 0
        flags = os.O_RDWR if writable else os.O_RDONLY
        self.fd = os.open(path, flags)
        try:
            actual = os.fstat(self.fd).st_size
            if actual != size:
                raise StoreCorruption(path, 0, f"segment is {actual} bytes, expected {size}")
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
            self.mm = mmap.mmap(self.fd, size, access=access)
        except BaseException:
            os.close(self.fd)
            raise

    def sync(self) -> None:
        """Make the segment's written bytes durable."""
        os.fdatasync(self.fd)

    def sync_all(self) -> None:
        """Make the segment's bytes and size durable."""
        os.fsync(self.fd)

    def allocate(self, lo: int, hi: int) -> None:
        os.posix_fallocate(self.fd, lo, hi - lo)

    def advise(self, advice: int) -> None:
        self.mm.madvise(advice)

    def pin(self) -> None:
        """Nothing to do: a plain segment stays mapped while open (see ``PooledSegment``)."""

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)


def out_of_resources(exc: OSError, what: str) -> Exception:
    """``exc`` as a ``StoreOutOfResources`` if it says the process or disk ran short."""
    if exc.errno in StoreOutOfResources.ERRNOS:
        return StoreOutOfResources(what, exc.errno)
    return exc


class SegmentQueue:
    """The segments of one directory, contiguous, by start offset.

    ``segment_size=None`` (read-only use on a foreign store) takes the size
    of the first segment found. ``warm=True`` (a writable queue written
    in large volumes, i.e. a commit log) warms pages ahead of the writes.

    ``sync_creation_lazily=True`` (the commit log's and consume queues'
    files) leaves a new segment's size and name to be made durable by the
    next ``sync_range``, before any data, instead of at once: creating a
    file costs two journal commits (file, directory), which would stall the
    writer for milliseconds per file. A power cut before that sync may lose
    the new file, never a byte a sync reported durable. The name still
    appears only once the file is sized (rename of a ``*.tmp``), and
    journaling filesystems commit the sizing no later than the rename.

    ``read_ahead_new=False`` maps the segment this queue is filling, when
    it created it, for random access (``MADV_RANDOM``) until the next one is
    created. A write fault in a new file's hole would otherwise read ahead:
    allocate and zero up to ``read_ahead_kb`` of page cache (8 MiB on the
    development VM) at once, in the writer's thread, for bytes written much
    later or never (a consume queue's first 20-byte entry cost ~1.5 ms, 0.01
    ms without), and ahead of the commit log's page warming. Full segments
    and those found on disk keep the default advice, for their readers.

    With a ``pool`` (consume queues) the segments are ``PooledSegment``s,
    mapped only while in use; ``preallocate_chunk`` is how far ahead blocks
    are allocated. Running short of descriptors, mappings or disk space
    while creating, mapping or reserving a segment raises
    ``StoreOutOfResources`` and changes nothing.
    """

    def __init__(self, directory: str, segment_size: int | None, *, writable: bool = True,
                 warm: bool = False, sync_creation_lazily: bool = False,
                 read_ahead_new: bool = True, pool: MappingPool | None = None,
                 preallocate_chunk: int = PREALLOCATE_CHUNK) -> None:
        self.directory = directory
        self.writable = writable
        self._pool = pool
        self._chunk = preallocate_chunk
        self._lazy_creation = sync_creation_lazily and writable
        self._read_ahead_new = read_ahead_new
        #: The segment mapped for random access while being filled.
        self._filling: Segment | None = None
        #: Segments created since the last ``sync_range``, their creation not durable yet.
        self._created: list[Segment] = []
        self._warmer = prefault.Warmer() if warm and writable and prefault.SUPPORTED else None
        #: Blocks are allocated ahead of writes (warming reserves them itself, see prefault).
        self.preallocate = writable and self._warmer is None
        # Held for structural changes (create, delete) and while syncing, so a
        # flush in a worker thread never touches a segment being removed.
        self.lock = threading.RLock()
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            names = []
            if writable:
                os.makedirs(directory, exist_ok=True)
        found: list[tuple[int, str]] = []
        for name in names:
            path = os.path.join(directory, name)
            if name.endswith(TEMP_SUFFIX):
                if writable:
                    os.unlink(path)
                continue
            try:
                found.append((parse_segment_name(name, directory), path))
            except SegmentNameError as exc:
                raise StoreCorruption(path, 0, "not a segment file (expected a 20-digit "
                                      "start offset)") from exc
        found.sort()
        if segment_size is None:
            segment_size = os.path.getsize(found[0][1]) if found else 0
            if found and segment_size <= 0:
                raise StoreCorruption(found[0][1], 0, "empty segment file")
        self.segment_size = segment_size
        self.segments: list[Segment] = []
        self._starts: list[int] = []
        try:
            for start, path in found:
                if start % segment_size:
                    raise StoreCorruption(path, 0, f"start offset is not a multiple of the "
                                          f"segment size {segment_size}")
                if self.segments and start != self.segments[-1].end:
                    raise StoreCorruption(path, 0, f"gap: previous segment ends at "
                                          f"{self.segments[-1].end}")
                self._add(self._open_segment(path, start, writable))
        except BaseException:
            self.close()
            raise

    def _open_segment(self, path: str, start: int, writable: bool) -> Segment:
        if self._pool is None:
            return Segment(path, start, self.segment_size, writable)
        from triomq.plugins.store_mmap.mapping_pool import PooledSegment
        return PooledSegment(self._pool, path, start, self.segment_size, writable)

    def _add(self, seg: Segment) -> None:
        self.segments.append(seg)
        self._starts.append(seg.start)

    @property
    def first_start(self) -> int | None:
        return self._starts[0] if self._starts else None

    @property
    def end(self) -> int | None:
        """The end offset of the last segment."""
        return self.segments[-1].end if self.segments else None

    def find(self, offset: int) -> Segment | None:
        """The segment holding ``offset``, if it exists."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        seg = self.segments[i]
        return seg if offset < seg.end else None

    def segments_from(self, offset: int) -> list[Segment]:
        """The segments holding ``offset`` and after."""
        i = max(bisect.bisect_right(self._starts, offset) - 1, 0)
        return self.segments[i:]

    def get_or_create(self, offset: int) -> Segment:
        """The segment holding ``offset``, creating it after the last one if needed."""
        seg = self.find(offset)
        if seg is not None:
            return seg
        start = offset - offset % self.segment_size
        with self.lock:
            if self.segments and start != self.segments[-1].end:
                raise ValueError(f"segment at {start} would leave a gap after "
                                 f"{self.segments[-1].end}")
            path = os.path.join(self.directory, segment_name(start))
            try:
                seg = self._create(path, start)
            except OSError as exc:
                raise out_of_resources(exc, f"creating {path}") from None
            if not self._read_ahead_new:
                if self._filling is not None:
                    self._filling.advise(mmap.MADV_NORMAL)
                seg.advise(mmap.MADV_RANDOM)
                self._filling = seg
            self._add(seg)
            if self._lazy_creation:
                self._created.append(seg)
            return seg

    def _create(self, path: str, start: int) -> Segment:
        """Create and open the segment file ``path`` (nothing left behind if it fails)."""
        tmp = path + TEMP_SUFFIX
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            try:
                os.ftruncate(fd, self.segment_size)
                if not self._lazy_creation:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        try:
            if not self._lazy_creation:
                fsync_directory(self.directory)
            seg = self._open_segment(path, start, True)
            _ = seg.mm  # a pooled segment maps here, where failing changes nothing
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        return seg

    def reserve(self, lo: int, hi: int) -> None:
        """Create, map and allocate what writing ``[lo, hi)`` needs, so that
        ``write`` of those bytes cannot fail for want of resources."""
        offset = lo
        while offset < hi:
            seg = self.get_or_create(offset)
            end = min(hi, seg.end)
            if end - seg.start > seg.allocated and self.preallocate:
                self._reserve(seg, offset - seg.start, end - seg.start)
            seg.pin()  # mapped now, and kept so while the pool is held
            offset = end

    def delete_from(self, start: int) -> None:
        """Remove the segments starting at or after ``start``, the last one first."""
        self._stop_warming()
        with self.lock:
            while self.segments and self.segments[-1].start >= start:
                seg = self.segments.pop()
                self._starts.pop()
                self._forget(seg)
                seg.close()
                os.unlink(seg.path)
            fsync_directory(self.directory)

    def delete_before(self, start: int) -> None:
        """Remove the segments ending at or before ``start``, the first one first."""
        self._stop_warming()
        with self.lock:
            removed = 0
            while self.segments and self.segments[0].end <= start:
                seg = self.segments.pop(0)
                self._starts.pop(0)
                self._forget(seg)
                seg.close()
                os.unlink(seg.path)
                removed += 1
            if removed:
                fsync_directory(self.directory)

    def _forget(self, seg: Segment) -> None:
        """``seg`` is being removed: no sync or advice for it any more."""
        if seg in self._created:
            self._created.remove(seg)
        if seg is self._filling:
            self._filling = None

    def sync_range(self, lo: int, hi: int) -> None:
        """fdatasync the segments holding bytes in ``[lo, hi)``.

        Segment creations not yet durable are made durable first.
        """
        with self.lock:
            if self._created:
                for seg in self._created:
                    seg.sync_all()
                fsync_directory(self.directory)
                self._created.clear()
            for seg in self.segments_from(lo):
                if seg.start >= hi:
                    break
                seg.sync()
            if self._warmer is not None:
                self._warmer.synced()

    def read(self, offset: int, size: int) -> bytes:
        """Bytes ``[offset, offset + size)``, across segments (must exist)."""
        parts = []
        end = offset + size
        while offset < end:
            seg = self.find(offset)
            if seg is None:
                raise ValueError(f"no segment holds offset {offset}")
            n = min(end, seg.end) - offset
            parts.append(seg.mm[offset - seg.start:offset - seg.start + n])
            offset += n
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read_into(self, offset: int, buffer: memoryview) -> None:
        """Copy ``[offset, offset + len(buffer))`` into ``buffer`` (segments must exist)."""
        done = 0
        while done < len(buffer):
            seg = self.find(offset + done)
            if seg is None:
                raise ValueError(f"no segment holds offset {offset + done}")
            pos = offset + done - seg.start
            n = min(len(buffer) - done, seg.size - pos)
            # Through a view: slicing the mmap itself would copy into a new bytes first.
            with memoryview(seg.mm) as mapped:
                buffer[done:done + n] = mapped[pos:pos + n]
            done += n

    def view(self, offset: int, size: int) -> memoryview:
        """A read-only view of ``[offset, offset + n)``, ``n <= size``, in the one
        segment holding ``offset`` (it must exist)."""
        seg = self.find(offset)
        if seg is None:
            raise ValueError(f"no segment holds offset {offset}")
        pos = offset - seg.start
        with memoryview(seg.mm) as mapped, mapped[pos:min(pos + size, seg.size)] as part:
            return part.toreadonly()

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``offset``, creating segments as needed."""
        if self.segments:  # the usual case: inside the last segment, blocks reserved
            seg = self.segments[-1]
            pos = offset - seg.start
            end = pos + len(data)
            if pos >= 0 and end <= (seg.allocated if self.preallocate else seg.size):
                seg.mm[pos:end] = data
                if self._warmer is not None:
                    self._warmer.wrote(seg, end)
                return
        view = memoryview(data)
        done = 0
        while done < len(view):
            seg = self.get_or_create(offset + done)
            pos = offset + done - seg.start
            n = min(len(view) - done, seg.size - pos)
            if pos + n > seg.allocated and self.preallocate:
                self._reserve(seg, pos, pos + n)
            seg.mm[pos:pos + n] = view[done:done + n]
            done += n
            if self._warmer is not None:
                self._warmer.wrote(seg, pos + n)

    def lend(self, offset: int, size: int) -> memoryview:
        """A writable view of ``[offset, offset + n)``, ``1 <= n <= size``, in one
        segment (created if needed). Call ``lent_written`` once bytes are in."""
        seg = self.get_or_create(offset)
        pos = offset - seg.start
        end = min(pos + max(1, size), seg.size)
        if end > seg.allocated and self.preallocate:
            self._reserve(seg, pos, end)
        with memoryview(seg.mm) as mapped:
            return mapped[pos:end]

    def lent_written(self, end: int) -> None:
        """Bytes were written into lent space up to offset ``end``."""
        if self._warmer is not None and (seg := self.find(end - 1)) is not None:
            self._warmer.wrote(seg, end - seg.start)

    def _reserve(self, seg: Segment, lo: int, hi: int) -> None:
        """Allocate ``seg``'s blocks from ``lo`` to ``hi`` rounded up to a chunk."""
        chunk = self._chunk
        start = max(seg.allocated, lo - lo % chunk)
        end = min(seg.size, hi + chunk - hi % chunk)
        try:
            seg.allocate(start, end)
        except OSError as exc:
            if exc.errno in StoreOutOfResources.ERRNOS:
                # A write into a hole with no space left would kill the process (SIGBUS).
                raise StoreOutOfResources(f"allocating {seg.path}", exc.errno) from None
            self.preallocate = False  # not supported here: plain sparse writes
            return
        seg.allocated = end

    def zero(self, lo: int, hi: int) -> None:
        """Overwrite ``[lo, hi)`` with zeros where segments exist, skipping zero pages."""
        chunk = 1 << 20
        zeros = bytes(chunk)
        for seg in self.segments_from(lo):
            if seg.start >= hi:
                break
            a = max(lo, seg.start) - seg.start
            b = min(hi, seg.end) - seg.start
            while a < b:
                n = min(chunk, b - a)
                if seg.mm[a:a + n] != zeros[:n]:
                    seg.mm[a:a + n] = zeros[:n]
                a += n

    def _stop_warming(self) -> None:
        """Let the warmer finish with a segment before any segment is unmapped."""
        if self._warmer is not None:
            self._warmer.stop()

    def close(self) -> None:
        self._stop_warming()
        with self.lock:
            for seg in self.segments:
                seg.close()
            self.segments.clear()
            self._starts.clear()


#: Every option a store of this plugin takes (each kind uses some of them).
OPTION_KEYS = ("segment_size", "cq_entries_per_file", "checkpoint_interval", "full_recovery",
               "max_open_consume_queue_files", "message_delay_level")
