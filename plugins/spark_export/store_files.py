"""Read-only access to a store root's files: segments, log end, confirm offset, epochs.

The Spark reader never opens a store through a store plugin: a RocketMQ
store is a directory of files (``framework.protocol.commitlog_layout``), so
the driver lists ``commitlog/`` and Spark tasks read segment byte ranges
directly, whichever program (triomq's mmap store or RocketMQ itself) wrote
them. Nothing here writes.

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
import pyarrow as pa
import pyarrow.compute as pc

from framework.protocol.commitlog_layout import (
    COMMITLOG_DIR,
    DEFAULT_SEGMENT_SIZE,
    EPOCH_CHECKPOINT,
    ROCKETMQ_CHECKPOINT,
    SegmentNameError,
    scan_log,
    segment_start,
    sorted_segments,
)
from framework.protocol.message import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    RecordError,
    check,
)
from framework.protocol.store_checkpoint import CONFIRM_PHY_OFFSET, CheckpointError, read_long
from plugins.spark_export.errors import SparkExportError
from plugins.spark_export.record_index import checked_records

log = logging.getLogger("triomq.spark")

_TOTAL_MAGIC = struct.Struct(">iI")


@attrs.frozen
class Segment:
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
        self.segments: list[Segment] = []
        self.segment_size = 0
        self._by_start: dict[int, Segment] = {}
        self.refresh()

    @classmethod
    def open(cls, root: str | None, where: str = "path") -> StoreFiles:
        """Open the store at ``root``; ``SparkExportError`` naming ``where`` if it is not one."""
        if not root:
            raise SparkExportError(where, "no store root given (load(STORE_DIR))")
        if not os.path.isdir(root):
            raise SparkExportError(root, "is not a directory")
        if not os.path.isdir(os.path.join(root, COMMITLOG_DIR)):
            raise SparkExportError(root, f"is not a store root: it has no {COMMITLOG_DIR}/")
        return cls(root)

    def refresh(self) -> None:
        """List the segments again (a live store grows and retention deletes)."""
        try:
            names = [n for n in os.listdir(self.commitlog_dir) if not n.endswith(".tmp")]
            listed = sorted_segments(names, self.commitlog_dir)
        except SegmentNameError as exc:
            raise SparkExportError(self.commitlog_dir, str(exc)) from None
        self.segments = [
            Segment(start, path, os.path.getsize(path))
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

    def segment_at(self, offset: int) -> Segment | None:
        """The segment holding ``offset``, if it exists."""
        if not self.segments:
            return None
        return self._by_start.get(segment_start(offset, self.segment_size))

    def log_end(self, from_offset: int | None = None) -> LogEnd:
        """Walk the log from ``from_offset`` (a record boundary; default: the last
        segment's start) and return where the whole records end.

        The records are found and fully checked by the C walk
        (``record_index``); where it stops, ``scan_log`` says why (zero fill).
        When the C walk does not apply, the walk reads record lengths in
        Python, ``scan_log`` says why it stopped (zero fill, torn, bad), and
        the last records walked are then fully checked (lengths, magic, body
        CRC), newest first, until one passes:
        a bad tail ends at the last valid record. A bad record followed by
        valid ones is not a tail; the reader that meets it fails.
        """
        if not self.segments:
            return LogEnd(0, "end")
        offset = self.segments[-1].start if from_offset is None else from_offset
        while True:
            seg = self.segment_at(offset)
            if seg is None:
                return LogEnd(offset, "end")
            with _mapped(seg.path) as buf:
                checked_end = self._checked_end(buf, offset - seg.start, offset)
                if checked_end is not None:  # every record before it passed the full checks
                    if checked_end >= self.segment_size:
                        offset = seg.start + self.segment_size
                        continue
                    return self._classify(buf, seg, checked_end)
                end, starts, next_segment = self._walk(buf, offset - seg.start)
                if next_segment or end == self.segment_size:
                    offset = seg.start + self.segment_size
                    continue
                found = self._classify(buf, seg, end)
                # Newest first: a record that fails its full check is part of the tail.
                while starts:
                    try:
                        check(buf, starts[-1], base_offset=seg.start)
                        break
                    except RecordError as exc:
                        found = LogEnd(seg.start + starts.pop(), "bad", exc.reason)
                return found

    def _checked_end(self, buf: memoryview, pos: int, offset: int) -> int | None:
        """Where the C walk from ``pos`` ends (a position in ``buf``), or ``None``."""
        with buf[pos:] as rest:
            found = checked_records(rest, offset, self.segment_size)
        return None if found is None else pos + found.end - offset

    def _walk(self, buf: memoryview, pos: int) -> tuple[int, list[int], bool]:
        """Record lengths from ``pos``: (where the walk stopped, record starts,
        whether a blank sent it to the next segment)."""
        starts = []
        size = len(buf)
        while pos + 8 <= size:
            total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
            if magic == BLANK_MAGIC and pos + total == self.segment_size:
                return pos, starts, True
            if (total < MIN_RECORD_SIZE or pos + total > size
                    or magic not in (MAGIC_V1, MAGIC_V2)):
                break
            starts.append(pos)
            pos += total
        return pos, starts, False

    def _classify(self, buf: memoryview, seg: Segment, pos: int) -> LogEnd:
        """Why the data of ``seg`` ends at ``pos`` (the walk stopped there)."""
        if pos == len(buf):
            return LogEnd(seg.start + pos, "end")
        scan = scan_log(buf[pos:], seg.start + pos, self.segment_size)
        found = LogEnd(scan.end, scan.stop, None if scan.error is None else scan.error.reason)
        # The error's traceback holds views of the mapping: drop it before unmapping.
        del scan
        return found

    def pieces(self, seg: Segment, lo: int, hi: int, step: int, *, lo_is_boundary: bool
               ) -> list[tuple[int, int]]:
        """Cut ``[lo, hi)`` of ``seg`` into equal ranges of at most about ``step`` bytes
        starting at records.

        Each range ``(a, b)`` starts at a record boundary; the first is the
        first record at or after ``lo``. The records are found by the C walk
        (``record_index``), else by walking their lengths in Python (from
        ``lo`` when it is a known boundary, else from the segment start); the
        readers check every record.
        """
        if lo_is_boundary and hi - lo <= step:
            return [(lo, hi)]
        # Pieces of equal size: 1.4 steps make two of 0.7, not 1 and 0.4, so
        # that the tasks of a query keep every core busy until the end.
        count = -(-(hi - lo) // step)
        step = -(-(hi - lo) // count)
        starts: list[int] = []
        with _mapped(seg.path) as buf:
            pos = lo - seg.start if lo_is_boundary else 0
            end = min(len(buf), hi - seg.start)
            with buf[pos:end] as span:
                found = checked_records(span, seg.start + pos, self.segment_size)
            if found is not None:
                return _cut(found.offsets, lo, hi, step)
            next_cut = lo
            while pos < end and pos + 8 <= len(buf):
                total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
                if total <= 0 or magic == BLANK_MAGIC:
                    break
                at = seg.start + pos
                if at >= next_cut:
                    starts.append(at)
                    next_cut = at + step
                pos += total
        return [(a, b) for a, b in zip(starts, [*starts[1:], hi], strict=True)]

    def boundary_at_or_below(self, offset: int, hint: int | None = None) -> int:
        """The last record boundary at or below ``offset``.

        ``hint``, a known boundary at or below ``offset``, shortens the walk.
        """
        seg = self.segment_at(offset)
        if seg is None or offset <= seg.start:
            return offset
        lo = hint if hint is not None and seg.start <= hint <= offset else seg.start
        starts = [a for a, _ in self.pieces(seg, lo, offset + 1, 1, lo_is_boundary=True)]
        return max((a for a in starts if a <= offset), default=lo)

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
        except CheckpointError as exc:
            raise SparkExportError(path, f"holds no confirmPhyOffset: {exc}") from None

    @property
    def epoch_checkpoint_path(self) -> str:
        """The path of the store's epoch checkpoint."""
        return os.path.join(self.root, EPOCH_CHECKPOINT)


def _cut(offsets: pa.Array, lo: int, hi: int, step: int) -> list[tuple[int, int]]:
    """``pieces`` from the ascending record ``offsets``: a cut at the first record
    at or after ``lo``, then at the first record at least ``step`` past the last cut."""
    starts: list[int] = []
    at, cut = 0, lo
    while at < len(offsets):
        found = pc.index(pc.greater_equal(offsets.slice(at), cut), True).as_py()
        if found < 0:
            break
        at += found
        starts.append(offsets[at].as_py())
        cut, at = starts[-1] + step, at + 1
    return [(a, b) for a, b in zip(starts, [*starts[1:], hi], strict=True)]


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


def read_range(path: str, lo: int, hi: int) -> bytes:
    """The bytes ``[lo, hi)`` of a file (fewer if the file is shorter)."""
    with open(path, "rb") as f:
        f.seek(lo)
        return f.read(max(0, hi - lo))


def iter_segment_ranges(files: StoreFiles, start: int, end: int
                        ) -> Iterator[tuple[Segment, int, int]]:
    """``(segment, lo, hi)`` for each segment overlapping ``[start, end)``."""
    for seg in files.segments:
        lo = max(start, seg.start)
        hi = min(end, seg.start + files.segment_size)
        if lo < hi:
            yield seg, lo, hi
