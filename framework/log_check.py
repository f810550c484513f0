"""Which bytes of a commit log are good records: the one rule of every reader.

A record is good when ``message.check`` accepts it (lengths, magic, body
CRC, a UTF-8 topic, properties that decode), ``check_placement`` accepts
where it lies (its physicalOffset field, a possible queue offset) and its
queue offset does not skip ahead of its queue's end as found so far
(``queue_offset_error``). A broker's recovery applies the same rule (the
mmap store's scan, through ``index_records`` and the same checks), so what
``triomq store verify`` calls the end of the good data is where a recovery
cuts.

``LogWalk`` walks a ``CommitLogReader`` window by window; ``following``
looks past a stop for good records a cut there would drop. Both read
through the reader only, whichever plugin stores the log; ``open_reader``
finds the plugin whose reader recognises a directory.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

import attrs

from triomq.plugin_manager import PluginManager
from triomq.protocol.commitlog_layout import (
    CQ_ENTRY_SIZE,
    QueueRun,
    Span,
    check_placement,
    index_records,
    queue_offset_error,
    scan_log,
    segment_start,
    unpack_cq_entry,
)
from triomq.protocol.message import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    MessageRecord,
    RecordError,
    check,
    decode,
)
from triomq.store import READER_KIND, CommitLogReader, StoreNotFound

#: Bytes read at a time (a window never crosses a segment).
WINDOW = 16 << 20

_TOTAL_MAGIC = struct.Struct(">iI")
_MAGICS = (struct.pack(">I", MAGIC_V1), struct.pack(">I", MAGIC_V2))

#: ``(topic, queueId) -> (min, max)`` queue offsets found so far.
QueueEnds = dict[tuple[str, int], tuple[int, int]]


class LogWalk:
    """Walk the records of ``reader`` from ``start`` (a record boundary; default
    its first offset) with the one rule.

    ``run`` counts them, ``records`` yields each one decoded. Afterwards
    ``end`` is where the good data ends, ``stop`` why the walk stopped there
    (``"end"``: the stored bytes, ``"zero"``: zero fill, ``"torn"``: a record
    running past the stored bytes, ``"bad"``: ``error`` says why), ``count``
    how many good records it found and ``last`` the offset of the last one.
    """

    def __init__(self, reader: CommitLogReader, start: int | None = None, *,
                 window: int = WINDOW) -> None:
        self.reader = reader
        self.start = reader.min_offset if start is None else start
        self.window = window
        self.end = self.start
        self.stop: str | None = None
        self.error: RecordError | None = None
        self.count = 0
        self.last: int | None = None
        self._ends: QueueEnds = {}

    @property
    def clean(self) -> bool:
        """Whether the walk ended without a torn or bad record."""
        return self.stop in ("end", "zero")

    def run(self) -> LogWalk:
        """Walk to the stop, counting records (in C where the speedups are built)."""
        for _ in self._walk(each=False):
            pass
        return self

    def records(self) -> Iterator[tuple[Span, MessageRecord]]:
        """Every good record with its span, in order, to the stop."""
        return self._walk(each=True)

    def _walk(self, each: bool) -> Iterator[tuple[Span, MessageRecord]]:
        reader = self.reader
        size = reader.segment_size
        stored = reader.end_offset
        pos = self.start
        window = self.window
        if not reader.min_offset <= pos <= stored:
            self._stop_bad(RecordError(pos, f"outside the stored bytes [{reader.min_offset}, "
                                            f"{stored})"))
            return
        while pos < stored:
            seg_end = segment_start(pos, size) + size
            hi = min(pos + window, seg_end, stored)
            buf = reader.read(pos, hi - pos)
            index = None if each else index_records(buf, pos, size)
            if index is not None and self._take_runs(index[2]):
                end, stop, error = index[0], index[1], None
            else:
                end, stop, error, found = self._checked(buf, pos)
                yield from found
            self.end = end
            if stop == "end":
                pos, window = end, self.window
            elif stop == "torn" and hi < min(seg_end, stored):
                # A record or blank straddles the window: read on from it.
                blank_end = self._blank_end(end, seg_end)
                if blank_end is not None:
                    pos = self.end = blank_end
                elif end > pos:
                    pos, window = end, self.window
                else:
                    window *= 2
            elif stop == "torn" and not any(self.reader.read(end, min(8, seg_end - end))):
                self.stop = "zero"  # fewer zero bytes than a header: the zero fill
                return
            elif stop == "torn" and hi == stored:
                self._stop_bad(RecordError(end, "torn: the record runs past the stored bytes"),
                               "torn")
                return
            elif stop == "torn":  # no record continues past its segment's end
                self._stop_bad(error or RecordError(end, f"{seg_end - end} bytes at the end of "
                                                         f"the segment are not a record"))
                return
            elif stop == "zero":
                self.stop = "zero"
                return
            else:
                self._stop_bad(error)
                return
        self.stop = "end"

    def _stop_bad(self, error: RecordError | None, stop: str = "bad") -> None:
        self.stop, self.error = stop, error
        if error is not None:
            self.end = error.offset

    def _blank_end(self, at: int, seg_end: int) -> int | None:
        """The segment's end if a blank reaching it starts at ``at``."""
        head = self.reader.read(at, 8)
        if len(head) == 8:
            total, magic = _TOTAL_MAGIC.unpack(head)
            if magic == BLANK_MAGIC and at + total == seg_end:
                return seg_end
        return None

    def _take_runs(self, runs: list[QueueRun]) -> bool:
        """Count the records of ``index_records``' runs if none skips ahead of its
        queue; False (nothing counted) leaves the window to ``_checked``."""
        ends = dict(self._ends)
        count = 0
        last = self.last
        for topic, queue_id, first, entries in runs:
            lo, hi = ends.get((topic, queue_id), (0, 0))
            if first > hi > lo:
                return False
            n = len(entries) // CQ_ENTRY_SIZE
            ends[topic, queue_id] = (lo, max(hi, first + n))
            count += n
            phys = unpack_cq_entry(entries, len(entries) - CQ_ENTRY_SIZE)[0]
            last = phys if last is None else max(last, phys)
        self._ends, self.count, self.last = ends, self.count + count, last
        return True

    def _checked(self, buf: bytes, base: int
                 ) -> tuple[int, str, RecordError | None, list[tuple[Span, MessageRecord]]]:
        """Check the window ``buf`` at ``base`` record by record: (end, stop, error,
        records) as ``scan_log``, stopping at the first record the rule refuses."""
        scan = scan_log(buf, base, self.reader.segment_size)
        found = []
        for span in scan.spans:
            if span.blank:
                continue
            pos = span.offset - base
            try:
                check_placement(buf, pos, span.offset)
                record = decode(buf, pos, base_offset=base, verify_crc=False)[0]
                key = (record.topic, record.queue_id)
                lo, hi = self._ends.get(key, (0, 0))
                error = queue_offset_error(*key, record.queue_offset, span.offset, lo, hi)
                if error is not None:
                    raise error
            except RecordError as exc:
                return span.offset, "bad", exc, found
            self._ends[key] = (lo, max(hi, record.queue_offset + 1))
            self.count += 1
            self.last = span.offset
            found.append((span, record))
        return scan.end, scan.stop, scan.error, found


@attrs.frozen
class Following:
    """Good records found past a stop: how many, the first and last offsets,
    and their bytes (from the first one's start to the last one's end)."""

    count: int = 0
    first: int | None = None
    last: int | None = None
    size: int = 0


def good_record_at(reader: CommitLogReader, offset: int) -> bool:
    """Whether a record ``check`` and ``check_placement`` accept starts at ``offset``."""
    head = reader.read(offset, 8)
    if len(head) < 8:
        return False
    total, magic = _TOTAL_MAGIC.unpack(head)
    seg_end = segment_start(offset, reader.segment_size) + reader.segment_size
    if magic not in (MAGIC_V1, MAGIC_V2) or not MIN_RECORD_SIZE <= total <= seg_end - offset:
        return False
    data = reader.read(offset, total)
    try:
        check(data)
        check_placement(data, 0, offset)
    except RecordError:
        return False
    return True


def following(reader: CommitLogReader, stop: int, *, window: int = WINDOW) -> Following:
    """The good records stored past ``stop``: what cutting the log there drops.

    Looks for a record start (a magic code with a record that the rule
    accepts at its own physical offset) past ``stop``, walks on from each
    one found, and goes on looking past where that walk stops.
    """
    count = size = 0
    first = last = None
    pos = stop + 1
    stored = reader.end_offset
    while pos < stored:
        buf = reader.read(pos, min(window, stored - pos))
        start = _next_start(reader, buf, pos)
        if start is None:
            if pos + len(buf) >= stored:
                break
            pos += max(len(buf) - 7, 1)  # a magic code may straddle the window
            continue
        walk = LogWalk(reader, start, window=window).run()
        if walk.count:
            count += walk.count
            first = start if first is None else first
            last = walk.last
            size = walk.end - first
        pos = max(walk.end, start) + 1
    return Following(count, first, last, size)


def _next_start(reader: CommitLogReader, buf: bytes, base: int) -> int | None:
    """The offset of the first good record starting in ``buf`` (at ``base``)."""
    at = 4
    while True:
        hits = [i for i in (buf.find(m, at) for m in _MAGICS) if i >= 0]
        if not hits:
            return None
        i = min(hits)
        if good_record_at(reader, base + i - 4):
            return base + i - 4
        at = i + 1


def open_reader(root: str, plugins: PluginManager | None = None, scheme: str | None = None
                ) -> CommitLogReader:
    """The reader of the store at ``root``: of ``scheme``'s plugin, or of the
    first plugin that recognises it. ``StoreNotFound`` says what was looked for."""
    pm = PluginManager.discover() if plugins is None else plugins
    if not os.path.isdir(root):
        raise StoreNotFound(root, "a directory")
    if scheme is not None:
        return pm.log_store(READER_KIND, scheme)(root, {})
    looked = []
    for kind, name in pm.store_kinds():
        if kind == READER_KIND:
            try:
                return pm.log_store(kind, name)(root, {})
            except StoreNotFound as exc:
                looked.append(f"{name}: {exc.expected}")
    raise StoreNotFound(root, "; or ".join(looked) or "a store plugin providing a reader")
