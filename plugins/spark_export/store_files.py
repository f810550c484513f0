"""Read-only access to a store root's files: segments, log end, confirm offset, epochs.

Where a store root has segment files, the Spark reader does not go through
a store plugin: a RocketMQ store is a directory of files
(``triomq.protocol.commitlog_layout``), so the driver lists ``commitlog/``
and Spark tasks read segment byte ranges directly, whichever program
(triomq's mmap store or RocketMQ itself) wrote them. Other stores (LMDB...)
are read through their plugin (``plugin_store``). Nothing here writes.

The confirm offset (the group's confirmed offset: every replica of the
SyncStateSet has the bytes below it) lives where RocketMQ 5 keeps it: the
binary ``checkpoint`` file of the store root (RocketMQ's ``StoreCheckpoint``),
a big-endian long at byte 32 (``confirmPhyOffset``), after
``physicMsgTimestamp``, ``logicsMsgTimestamp``, ``indexMsgTimestamp`` and
``masterFlushedOffset`` (8 bytes each).
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from collections.abc import Iterator

import attrs

from triomq.plugins.spark_export.errors import SparkExportError
from triomq.protocol.columns import RecordStarts, record_starts
from triomq.protocol.commitlog_layout import (
    COMMITLOG_DIR,
    DEFAULT_SEGMENT_SIZE,
    EPOCH_CHECKPOINT,
    ROCKETMQ_CHECKPOINT,
    SegmentNameError,
    scan_log,
    segment_start,
    sorted_segments,
)
from triomq.protocol.message import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    RecordError,
    check,
)
from triomq.protocol.store_checkpoint import CONFIRM_PHY_OFFSET, StoreCheckpointError, read_long

log = logging.getLogger("triomq.spark")

_TOTAL_MAGIC = struct.Struct(">iI")


@attrs.frozen
class SegmentFile:
    """A commit-log segment file: its start offset, path and file size."""

    start: int
    path: str
    file_size: int


@attrs.frozen
class LogEnd:
    """Where the readable log ends and why.

    ``stop`` is ``"end"`` (the data fills the last segment), ``"zero"`` (zero
    fill after the last record), ``"torn"`` (a record still arriving or cut
    by a crash) or ``"bad"`` (a corrupt record; ``reason`` says why).
    """

    offset: int
    stop: str
    reason: str | None = None

    @property
    def clean(self) -> bool:
        """Whether the log ends without a torn or corrupt tail."""
        return self.stop in ("end", "zero")


class StoreFiles:
    """The files of one store root, listed once; ``refresh`` lists them again."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.commitlog_dir = os.path.join(self.root, COMMITLOG_DIR)
        self.segments: list[SegmentFile] = []
        self.segment_size = 0
        self._by_start: dict[int, SegmentFile] = {}
        self.refresh()

    @classmethod
    def open(cls, root: str | None, where: str = "path") -> StoreFiles:
        """Open the store at ``root``; ``SparkExportError`` naming ``where`` if it is not one.

        A store without ``commitlog/`` (an LMDB store...) is read through the
        store plugin that recognises it (``plugin_store.PluginStoreFiles``).
        """
        if not root:
            raise SparkExportError(where, "no store root given (load(STORE_DIR))")
        if not os.path.isdir(root):
            raise SparkExportError(root, "is not a directory")
        if not os.path.isdir(os.path.join(root, COMMITLOG_DIR)):
            from triomq.plugins.spark_export.plugin_store import PluginStoreFiles

            return PluginStoreFiles(root)  # type: ignore[return-value]
        return cls(root)

    def refresh(self) -> None:
        """List the segments again (a live store grows and retention deletes)."""
        try:
            names = [n for n in os.listdir(self.commitlog_dir) if not n.endswith(".tmp")]
            listed = sorted_segments(names, self.commitlog_dir)
        except SegmentNameError as exc:
            raise SparkExportError(self.commitlog_dir, str(exc)) from None
        self.segments = [
            SegmentFile(start, path, os.path.getsize(path))
            for start, name in listed
            for path in [os.path.join(self.commitlog_dir, name)]
        ]
        self.segment_size = self._infer_segment_size()
        self._by_start = {seg.start: seg for seg in self.segments}

    def _infer_segment_size(self) -> int:
        if not self.segments:
            return 0
        if len(self.segments) == 1:
            # One segment: its (preallocated) file size; an empty file says nothing.
            return self.segments[0].file_size or DEFAULT_SEGMENT_SIZE
        steps = {b.start - a.start for a, b in zip(self.segments, self.segments[1:], strict=False)}
        size = min(steps)
        for seg in self.segments:
            if seg.start % size or seg.file_size > size:
                raise SparkExportError(
                    seg.path, f"does not fit segments of {size} bytes (start or file size)"
                )
        return size

    @property
    def min_offset(self) -> int:
        """The first physical offset on disk (0 for an empty log)."""
        return self.segments[0].start if self.segments else 0

    def segment_at(self, offset: int) -> SegmentFile | None:
        """The segment holding ``offset``, if it exists."""
        if not self.segments:
            return None
        return self._by_start.get(segment_start(offset, self.segment_size))

    def log_end(self, from_offset: int | None = None) -> LogEnd:
        """Walk the log from ``from_offset`` (a record boundary; default: the last
        segment's start) and return where the whole records end.

        The walk hops by record length (``walk_file``), ``scan_log`` says why
        it stopped (zero fill, torn, bad), and the last record walked is fully
        checked (lengths, magic, body CRC).
        When it fails, the records walked are checked newest first until one
        passes: a bad tail ends at the last valid record. A bad record
        followed by valid ones is not a tail; the reader that meets it fails.
        """
        if not self.segments:
            return LogEnd(0, "end")
        offset = self.segments[-1].start if from_offset is None else from_offset
        while True:
            seg = self.segment_at(offset)
            if seg is None:
                return LogEnd(offset, "end")
            pos = offset - seg.start
            walked = walk_file(seg.path, pos, self.segment_size)
            with _mapped(seg.path) as buf:
                if self._blank_at(buf, walked.stop) or walked.stop == self.segment_size:
                    offset = seg.start + self.segment_size
                    continue
                found = self._classify(buf, seg, walked.stop)
                if walked.last is None or _valid(buf, seg, walked.last):
                    return found
                # A bad tail: check newest first where it begins.
                starts = list(record_starts(buf, pos, walked.last + 1, step=1).cuts)
                while starts:
                    try:
                        check(buf, starts[-1], base_offset=seg.start)
                        break
                    except RecordError as exc:
                        found = LogEnd(seg.start + starts.pop(), "bad", exc.reason)
                return found

    def _blank_at(self, buf: memoryview, pos: int) -> bool:
        """Whether the blank that ends a segment starts at ``pos``."""
        if pos + 8 > len(buf):
            return False
        total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
        return magic == BLANK_MAGIC and pos + total == self.segment_size

    def _classify(self, buf: memoryview, seg: SegmentFile, pos: int) -> LogEnd:
        """Why the data of ``seg`` ends at ``pos`` (the walk stopped there)."""
        if pos == len(buf):
            return LogEnd(seg.start + pos, "end")
        scan = scan_log(buf[pos:], seg.start + pos, self.segment_size)
        found = LogEnd(scan.end, scan.stop, None if scan.error is None else scan.error.reason)
        # The error's traceback holds views of the mapping: drop it before unmapping.
        del scan
        return found

    def boundary_at_or_below(self, offset: int, hint: int | None = None) -> int:
        """The last record boundary at or below ``offset``.

        ``hint``, a known boundary at or below ``offset``, shortens the walk.
        """
        seg = self.segment_at(offset)
        if seg is None or offset <= seg.start:
            return offset
        lo = hint if hint is not None and seg.start <= hint <= offset else seg.start
        walked = walk_file(seg.path, lo - seg.start, offset - seg.start + 1)
        return lo if walked.last is None else seg.start + walked.last

    def confirm_offset(self) -> int | None:
        """The confirm offset recorded in ``checkpoint``, ``None`` if there is none."""
        path = os.path.join(self.root, ROCKETMQ_CHECKPOINT)
        try:
            with open(path, "rb") as f:
                head = f.read(CONFIRM_PHY_OFFSET + 8)
        except FileNotFoundError:
            return None
        try:
            return read_long(head, CONFIRM_PHY_OFFSET, path)
        except StoreCheckpointError as exc:
            raise SparkExportError(path, f"holds no confirmPhyOffset: {exc}") from None

    @property
    def epoch_checkpoint_path(self) -> str:
        """The path of the store's epoch checkpoint."""
        return os.path.join(self.root, EPOCH_CHECKPOINT)


def _valid(buf: memoryview, seg: SegmentFile, pos: int) -> bool:
    """Whether the record at ``pos`` of ``seg`` passes the full checks."""
    try:
        check(buf, pos, base_offset=seg.start)
    except RecordError:
        return False
    return True


#: ``walk_file`` reads this much at a time into one buffer: reading into warm
#: memory costs a third of mapping the file, whose pages fault in one by one.
WALK_CHUNK = 4 << 20


def walk_file(path: str, pos: int, end: int, *, first_cut: int | None = None,
              step: int | None = None, max_cuts: int | None = None) -> RecordStarts:
    """``columns.record_starts`` over the file at ``path`` (positions are file positions).

    The file is read in chunks of ``WALK_CHUNK`` bytes (more for a longer
    record); a record that a chunk cuts is walked in the next one, a record
    the file cuts stops the walk there. With ``max_cuts`` the walk may stop
    once it has found that many cuts (``stop`` is then where it got to).
    """
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        end = min(end, size)
        chunk = bytearray(WALK_CHUNK)
        cuts: list[int] = []
        last = None
        grid = next_cut = pos if first_cut is None else first_cut
        while pos < end:
            if max_cuts is not None and len(cuts) >= max_cuts:
                break
            f.seek(pos)
            with memoryview(chunk) as whole, whole[:f.readinto(chunk)] as view:
                # The grid stays the file's: a point not yet answered may lie before
                # this chunk (inside a record walked earlier); the chunk's first
                # record answers it and the next points keep their places.
                found = record_starts(view, 0, end - pos, first_cut=next_cut - pos, step=step)
                cuts += [pos + cut for cut in found.cuts]
                if found.cuts and step is not None:
                    next_cut = grid + ((cuts[-1] - grid) // step + 1) * step
                elif found.cuts:
                    next_cut = size + 1
                if found.last is not None:
                    last = pos + found.last
                more = _cut_by_chunk(view, found.stop, size - pos)
            pos += found.stop
            if more is None or pos >= end:
                break
            if more > len(chunk):
                chunk = bytearray(more)
    if max_cuts is not None:
        cuts = cuts[:max_cuts]
    return RecordStarts(pos, last, tuple(cuts))


def _cut_by_chunk(view: memoryview, stop: int, file_left: int) -> int | None:
    """Why a chunk's walk stopped at ``stop`` (``file_left`` bytes of the file from
    the chunk's start): ``None`` for a header the walk does not take or a record
    the file cuts, else the bytes the next chunk needs (the chunk cut a header
    or record)."""
    if len(view) >= file_left:
        return None
    if stop + 8 > len(view):
        return 8
    total, magic = _TOTAL_MAGIC.unpack_from(view, stop)
    if magic in (MAGIC_V1, MAGIC_V2) and MIN_RECORD_SIZE <= total <= file_left - stop:
        return total
    return None


class _Mapped:
    """A read-only mapping of a file, empty for an empty file."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed in __exit__
        size = os.fstat(self._file.fileno()).st_size
        self._mm = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if size else None

    def __enter__(self) -> memoryview:
        self._view = memoryview(self._mm) if self._mm is not None else memoryview(b"")
        return self._view

    def __exit__(self, *exc: object) -> None:
        self._view.release()
        if self._mm is not None:
            self._mm.close()
        self._file.close()


def _mapped(path: str) -> _Mapped:
    return _Mapped(path)


def map_range(path: str, lo: int, hi: int) -> memoryview:
    """A read-only view of the bytes ``[lo, hi)`` of a file (fewer if the file is
    shorter), straight from the page cache.

    Reading a task's tens of MiB into a new ``bytes`` instead costs as many
    fresh pages, faulted in and zeroed: several times the mapping's cost,
    and far more on a virtual machine whose host backs memory lazily. The
    mapping goes once the view and every view or Arrow buffer taken of it
    are gone. SegmentFile files never shrink (retention deletes them whole), so
    the mapped bytes stay readable.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        hi = min(hi, size)
        if lo >= hi:
            return memoryview(b"")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return memoryview(mapped)[lo:hi]


def iter_segment_ranges(files: StoreFiles, start: int, end: int
                        ) -> Iterator[tuple[SegmentFile, int, int]]:
    """``(segment, lo, hi)`` for each segment overlapping ``[start, end)``."""
    for seg in files.segments:
        lo = max(start, seg.start)
        hi = min(end, seg.start + files.segment_size)
        if lo < hi:
            yield seg, lo, hi
