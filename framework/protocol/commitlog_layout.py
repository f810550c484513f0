"""RocketMQ's on-disk layout of a store root, as pure helpers (no file I/O).

A store root (RocketMQ's ``storePathRootDir``) holds::

    commitlog/<20-digit start offset>          segment files of records
    consumequeue/<topic>/<queueId>/<20-digit>  20-byte entries, 300,000 per file
    checkpoint, epochFileCheckpoint, abort     bookkeeping files

Segments are named by the physical offset of their first byte. A record
never crosses a segment: when a record does not fit with
``END_FILE_MIN_BLANK_LENGTH`` bytes to spare, the rest of the segment is a
blank (``totalSize = remaining``, ``magic = BLANK_MAGIC``) and the record
starts the next segment. Bytes after the last record of a segment are
zero, so a zero ``totalSize`` marks the end of the data.

A consume-queue entry's tags code is its record's ``TAGS`` hash, but for a
``SCHEDULE_TOPIC_XXXX`` record its delivery time
(``triomq.protocol.delay_levels``): ``pack_records`` and ``index_records``
take the delay levels and set it, whichever packer (C or Python) ran.

Everything a read-only reader needs (naming, placement, walking records
over a buffer such as an ``mmap`` of a segment, consume-queue entries) is
here so that readers outside the store plugins share one definition.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import attrs

from triomq.errors import TriomqError
from triomq.protocol.delay_levels import (
    DEFAULT_MESSAGE_DELAY_LEVEL,
    SCHEDULE_TOPIC,
    cq_tags_code,
    parse_delay_levels,
)
from triomq.protocol.extensions import optional_extension
from triomq.protocol.message import (
    BLANK_MAGIC,
    BORNHOST_V6,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    STOREHOST_V6,
    MessageRecord,
    RecordError,
    check,
    decode,
    encode_placed,
    pack_ip,
    properties_from_bytes,
)

_speedups = optional_extension("_speedups")  # None: the pure-Python versions below

#: Whether ``pack_records`` and ``index_records`` run the optional C versions
#: (``framework/protocol/_speedups.c``); set ``TRIOMQ_NO_SPEEDUPS=1`` to disable.
SPEEDUPS = _speedups is not None

COMMITLOG_DIR = "commitlog"
CONSUMEQUEUE_DIR = "consumequeue"
ROCKETMQ_CHECKPOINT = "checkpoint"
EPOCH_CHECKPOINT = "epochFileCheckpoint"
ABORT_FILE = "abort"

SEGMENT_NAME_DIGITS = 20
DEFAULT_SEGMENT_SIZE = 1 << 30
END_FILE_MIN_BLANK_LENGTH = 8

CQ_ENTRY_SIZE = 20
DEFAULT_CQ_ENTRIES_PER_FILE = 300_000

_TOTAL_MAGIC = struct.Struct(">iI")
_I32 = struct.Struct(">i")
_CQ_ENTRY = struct.Struct(">qiq")
_PHYS = struct.Struct(">q")
_PHYS_AT = 28  # physicalOffset's position in a record
#: RocketMQ's default ``messageDelayLevel``, in ms per level.
DEFAULT_DELAY_LEVELS = parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)


class SegmentNameError(TriomqError, ValueError):
    """A file in a segment directory is not named by a 20-digit offset."""

    def __init__(self, name: str, directory: str = "") -> None:
        self.name = name
        self.directory = directory
        where = f"{directory}/{name}" if directory else name
        super().__init__(f"{where}: not a segment file (expected a 20-digit start offset)")


def segment_name(offset: int) -> str:
    """The file name of the segment starting at ``offset``."""
    return f"{offset:0{SEGMENT_NAME_DIGITS}d}"


def parse_segment_name(name: str, directory: str = "") -> int:
    """The start offset named by ``name``; ``SegmentNameError`` if it is not one."""
    if len(name) != SEGMENT_NAME_DIGITS or not name.isascii() or not name.isdigit():
        raise SegmentNameError(name, directory)
    return int(name)


def sorted_segments(names: Iterable[str], directory: str = "") -> list[tuple[int, str]]:
    """``(start offset, name)`` of every segment name, by offset; rejects other names."""
    return sorted((parse_segment_name(n, directory), n) for n in names)


def segment_start(offset: int, segment_size: int) -> int:
    """The start offset of the segment holding ``offset``."""
    return offset - offset % segment_size


def blank_needed(offset: int, size: int, segment_size: int) -> int:
    """Bytes of blank to write at ``offset`` before a record of ``size`` bytes.

    0 when the record fits in the current segment with 8 bytes to spare,
    otherwise the rest of the segment. Raises ``ValueError`` when the record
    cannot fit in any segment.
    """
    if size + END_FILE_MIN_BLANK_LENGTH > segment_size:
        raise ValueError(f"record of {size} bytes does not fit in segments of {segment_size}")
    remaining = segment_size - offset % segment_size
    return 0 if size + END_FILE_MIN_BLANK_LENGTH <= remaining else remaining


def blank_header(remaining: int) -> bytes:
    """The 8 bytes that start a blank of ``remaining`` bytes."""
    return _TOTAL_MAGIC.pack(remaining, BLANK_MAGIC)


@attrs.frozen
class Span:
    """A record (or a blank, ``blank=True``) at ``offset`` spanning ``size`` bytes."""

    offset: int
    size: int
    blank: bool


def iter_spans(buf: bytes | bytearray | memoryview, pos: int = 0, limit: int | None = None, *,
               base_offset: int = 0, segment_end: int | None = None,
               verify_crc: bool = True) -> Iterator[Span]:
    """Walk the records of ``buf[pos:limit]`` and yield their spans.

    ``base_offset`` is the physical offset of ``buf[0]``; spans carry
    physical offsets. The walk ends cleanly at ``limit`` or at a zero
    ``totalSize`` (the zero fill after the last record). A blank must reach
    ``segment_end`` (a position in ``buf``, default ``limit``) and ends the
    walk. The first record that is bad (what ``check`` refuses, or a torn
    one) raises ``RecordError`` with its physical offset; the walk never
    reads outside ``buf[pos:limit]``. Where the records lie is
    ``check_placement``'s to judge.
    """
    limit = len(buf) if limit is None else limit
    segment_end = limit if segment_end is None else segment_end
    while pos < limit:
        if limit - pos < 4:
            raise RecordError(base_offset + pos, f"{limit - pos} stray bytes at the end")
        if limit - pos >= 8:
            total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
        else:
            total, magic = struct.unpack_from(">i", buf, pos)[0], None
        if total == 0:
            return
        if magic == BLANK_MAGIC:
            if pos + total != segment_end:
                raise RecordError(
                    base_offset + pos,
                    f"blank of {total} bytes does not end the segment "
                    f"({segment_end - pos} bytes left)",
                )
            yield Span(base_offset + pos, total, True)
            return
        size = check(buf, pos, limit, base_offset=base_offset, verify_crc=verify_crc)
        yield Span(base_offset + pos, size, False)
        pos += size


_Q64 = struct.Struct(">q")


def check_placement(buf: bytes | bytearray | memoryview, pos: int, physical_offset: int
                    ) -> None:
    """Check the offsets a (valid) record at ``buf[pos:]`` carries against where it lies.

    Its physicalOffset field must be ``physical_offset`` and its queue
    offset possible there (every earlier record of its queue takes at least
    ``MIN_RECORD_SIZE`` bytes before it). The CRC covers only the body, so
    this is what catches a damaged header. Raises ``RecordError``.
    """
    stored = _Q64.unpack_from(buf, pos + _PHYS_AT)[0]
    if stored != physical_offset:
        raise RecordError(physical_offset, f"physicalOffset field says {stored}")
    queue_offset = _Q64.unpack_from(buf, pos + 20)[0]
    if queue_offset < 0 or queue_offset * MIN_RECORD_SIZE > physical_offset:
        raise RecordError(physical_offset, f"queue offset {queue_offset} is impossible at "
                                           f"physical offset {physical_offset}")


#: A queue's current ``(min_offset, max_offset)`` in a log: ``(0, 0)`` for a
#: queue the log does not have yet.
QueueBounds = Callable[[str, int], tuple[int, int]]


def queue_offset_error(topic: str, queue_id: int, queue_offset: int, physical_offset: int,
                       lo: int, hi: int) -> RecordError | None:
    """Why a record may not take ``queue_offset`` in a queue now ``(lo, hi)``, or None.

    A record may rewrite its queue's entries or add the next one, never skip
    ahead of the queue's end (a replica or a recovery would index a gap).
    """
    if queue_offset > hi > lo:
        return RecordError(physical_offset, f"queue offset {queue_offset} skips ahead of "
                                            f"{topic}:{queue_id}'s end {hi}")
    return None


def runs_fit(runs: list[QueueRun], bounds: QueueBounds) -> bool:
    """Whether no run of ``index_records`` skips ahead of its queue's end."""
    ends: dict[tuple[str, int], tuple[int, int]] = {}
    for topic, queue_id, first, entries in runs:
        key = (topic, queue_id)
        lo, hi = ends.get(key) or bounds(topic, queue_id)
        if first > hi > lo:
            return False
        ends[key] = (lo, max(hi, first + len(entries) // CQ_ENTRY_SIZE))
    return True


def pack_cq_entry(physical_offset: int, size: int, tags_code: int) -> bytes:
    """One consume-queue entry: ``commitLogOffset:8 | size:4 | tagsCode:8``."""
    return _CQ_ENTRY.pack(physical_offset, size, tags_code)


def pack_cq_entry_into(buf: bytearray | memoryview, pos: int, physical_offset: int, size: int,
                       tags_code: int) -> None:
    """Write one consume-queue entry at ``buf[pos:pos + 20]``."""
    _CQ_ENTRY.pack_into(buf, pos, physical_offset, size, tags_code)


def unpack_cq_entry(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int, int]:
    """``(physical_offset, size, tags_code)`` of the entry at ``buf[pos:]``."""
    return _CQ_ENTRY.unpack_from(buf, pos)


def tags_code(tags: str | None) -> int:
    """RocketMQ's tagsCode: Java ``String.hashCode`` of the TAGS property (0 if none)."""
    if not tags:
        return 0
    h = 0
    for unit in _utf16_units(tags):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _utf16_units(text: str) -> Iterator[int]:
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        yield (data[i] << 8) | data[i + 1]


@attrs.frozen
class LogScan:
    """The outcome of ``scan_log``.

    ``end`` is the physical offset after the last whole record or blank.
    ``stop`` says why the walk stopped there: ``"end"`` (all bytes used),
    ``"torn"`` (the rest is the beginning of a record that needs more
    bytes), ``"zero"`` (a zero ``totalSize``: zero fill) or ``"bad"`` (then
    ``error`` is the ``RecordError`` of the bad record).
    """

    spans: list[Span]
    end: int
    stop: str
    error: RecordError | None = None


def scan_log(buf: bytes | bytearray | memoryview, base_offset: int, segment_size: int, *,
             verify_crc: bool = True) -> LogScan:
    """Walk contiguous log bytes ``buf`` starting at physical ``base_offset`` (a record
    boundary), across segment boundaries, and classify where the walk stops."""
    spans: list[Span] = []
    pos = 0
    n = len(buf)
    while pos < n:
        seg_end = segment_start(base_offset + pos, segment_size) + segment_size - base_offset
        limit = min(n, seg_end)
        try:
            for span in iter_spans(buf, pos, limit, base_offset=base_offset,
                                   segment_end=seg_end, verify_crc=verify_crc):
                spans.append(span)
                pos = span.offset - base_offset + span.size
        except RecordError as exc:
            start = exc.offset - base_offset
            if limit == n and _is_torn(buf, start, n, seg_end):
                return LogScan(spans, base_offset + start, "torn")
            return LogScan(spans, base_offset + start, "bad", exc)
        if pos > n:  # a blank whose padding has not all arrived yet
            blank = spans.pop()
            return LogScan(spans, blank.offset, "torn")
        if pos < limit:
            return LogScan(spans, base_offset + pos, "zero")
    return LogScan(spans, base_offset + pos, "end")


def _is_torn(buf: bytes | bytearray | memoryview, pos: int, n: int, seg_end: int) -> bool:
    """Whether the bytes from ``pos`` can be the start of a record still arriving."""
    if n - pos < 8:
        return True
    total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return total == seg_end - pos
    return magic in (MAGIC_V1, MAGIC_V2) and n - pos < total <= seg_end - pos


@attrs.frozen
class PackedBatch:
    """Records encoded for one append by ``pack_records``.

    ``placed`` holds ``(physical_offset, size, queue_offset)`` per record;
    ``queue_runs`` maps each (topic, queueId) to its first queue offset and
    the consume-queue entries of the batch's records in that queue;
    ``results`` holds one ``result_type(physical_offset, size, queue_offset,
    store_timestamp)`` per record when ``pack_records`` was given a type.
    """

    data: bytearray
    placed: list[tuple[int, int, int]]
    queue_runs: dict[tuple[str, int], tuple[int, bytearray]]
    results: list[Any] | None = None


_tags_code_cached = functools.lru_cache(maxsize=4096)(tags_code)


def pack_records(records: Sequence[MessageRecord], base_offset: int, segment_size: int,
                 next_queue_offset: Callable[[str, int], int], *,
                 result_type: type[tuple] | None = None,
                 delay_levels: Sequence[int] = DEFAULT_DELAY_LEVELS) -> PackedBatch:
    """Encode ``records`` for appending at ``base_offset``, with blanks where needed.

    Each record gets its physical offset and the next queue offset of its
    (topic, queueId) (``next_queue_offset`` is asked once per queue).
    ``result_type`` (a tuple subclass such as a ``NamedTuple`` of four
    fields) also builds ``PackedBatch.results``. A schedule-topic record's
    entry carries its delivery time by ``delay_levels`` (the delays in ms,
    ``triomq.protocol.delay_levels``). Raises ``ValueError`` for a record
    larger than a segment, ``RecordError`` for one that cannot be encoded.
    """
    packed = None
    if _speedups is not None:
        raw = _speedups.pack_records(records, base_offset, segment_size, next_queue_offset,
                                     pack_ip, MessageRecord, result_type)
        if raw is not None:
            packed = PackedBatch(*raw)
    if packed is None:
        packed = pack_records_py(records, base_offset, segment_size, next_queue_offset,
                                 result_type=result_type)
    for key, (_, entries) in packed.queue_runs.items():
        if key[0] == SCHEDULE_TOPIC:
            _set_deliver_times(entries, [r for r in records if (r.topic, r.queue_id) == key],
                               delay_levels)
    return packed


def _set_deliver_times(entries: bytearray, records: Sequence[MessageRecord],
                       delay_levels: Sequence[int]) -> None:
    """Put the schedule-topic ``records``' delivery times in their packed ``entries``
    (in the same order) as their tags codes; both packers leave the tags hash there."""
    for i, r in enumerate(records):
        pos = i * CQ_ENTRY_SIZE
        phys, size, code = _CQ_ENTRY.unpack_from(entries, pos)
        _CQ_ENTRY.pack_into(entries, pos, phys, size, cq_tags_code(
            r.topic, r.properties, r.store_timestamp, delay_levels, code))


def pack_records_py(records: Sequence[MessageRecord], base_offset: int, segment_size: int,
                    next_queue_offset: Callable[[str, int], int], *,
                    result_type: type[tuple] | None = None) -> PackedBatch:
    """``pack_records`` in pure Python: the reference for the C version."""
    buf = bytearray()
    runs: dict[tuple[str, int], list] = {}  # key -> [first, next, entries]
    placed = []
    pack_cq = _CQ_ENTRY.pack
    tags = _tags_code_cached
    for r in records:
        key = (r.topic, r.queue_id)
        run = runs.get(key)
        if run is None:
            first = next_queue_offset(r.topic, r.queue_id)
            run = runs[key] = [first, first, bytearray()]
        qoff = run[1]
        run[1] = qoff + 1
        at = len(buf)
        phys = base_offset + at
        size = encode_placed(buf, r, qoff, phys)
        if size + END_FILE_MIN_BLANK_LENGTH > segment_size - phys % segment_size:
            phys = _move_to_next_segment(buf, at, phys, size, segment_size)
        run[2] += pack_cq(phys, size, tags(r.properties.get("TAGS")))
        placed.append((phys, size, qoff))
    results = None
    if result_type is not None:
        # A NamedTuple's constructor takes its fields, not one iterable.
        make: Callable[..., Any] = result_type
        results = [make(phys, size, qoff, r.store_timestamp)
                   for r, (phys, size, qoff) in zip(records, placed, strict=True)]
    return PackedBatch(buf, placed, {k: (v[0], v[2]) for k, v in runs.items()}, results)


def _move_to_next_segment(buf: bytearray, at: int, phys: int, size: int, segment_size: int
                          ) -> int:
    """Put a blank before the record just encoded at ``buf[at:]``; return its new offset."""
    if size + END_FILE_MIN_BLANK_LENGTH > segment_size:
        del buf[at:]
        raise ValueError(f"record of {size} bytes does not fit in a segment of "
                         f"{segment_size} bytes")
    room = segment_size - phys % segment_size
    encoded = bytes(buf[at:])
    del buf[at:]
    buf += blank_header(room)
    buf += bytes(room - END_FILE_MIN_BLANK_LENGTH)
    buf += encoded
    _PHYS.pack_into(buf, at + room + _PHYS_AT, phys + room)
    return phys + room


#: A run of consecutive consume-queue entries found by ``index_records``:
#: ``(topic, queue_id, first queue offset, packed entries)``.
QueueRun = tuple[str, int, int, bytes]


def index_records(buf: bytes | bytearray | memoryview, base_offset: int, segment_size: int,
                  *, delay_levels: Sequence[int] = DEFAULT_DELAY_LEVELS
                  ) -> tuple[int, str, list[QueueRun]] | None:
    """Check replicated log bytes and collect the consume-queue entries they need.

    ``buf`` starts at physical ``base_offset`` (a record boundary). Every
    record is checked as ``scan_log``, ``check_placement`` and ``decode``
    would (lengths, magic, body CRC, offsets, UTF-8 topic and properties),
    but only the fields the index needs are read. Returns ``(end, stop,
    runs)``: the end of the last whole record or blank, why the walk
    stopped there (``"end"``, ``"torn"`` or ``"zero"`` as in ``LogScan``)
    and the entries as runs of consecutive queue offsets per queue, in
    order (a schedule-topic entry's tags code by ``delay_levels``, as
    ``pack_records``'). Returns ``None`` for a bad record: the caller then
    runs the full checks, which name the problem.
    """
    if _speedups is not None:
        index = _speedups.index_records(buf, base_offset, segment_size)
    else:
        index = index_records_py(buf, base_offset, segment_size)
    if index is None or not any(run[0] == SCHEDULE_TOPIC for run in index[2]):
        return index
    return index[0], index[1], [
        run if run[0] != SCHEDULE_TOPIC else _with_deliver_times(run, buf, base_offset,
                                                                 delay_levels)
        for run in index[2]]


def _with_deliver_times(run: QueueRun, buf: bytes | bytearray | memoryview, base_offset: int,
                        delay_levels: Sequence[int]) -> QueueRun:
    """A schedule-topic run with its records' delivery times as tags codes."""
    entries = bytearray(run[3])
    for pos in range(0, len(entries), CQ_ENTRY_SIZE):
        phys, size, code = _CQ_ENTRY.unpack_from(entries, pos)
        record = decode(buf, phys - base_offset, base_offset=base_offset,
                        verify_crc=False)[0]
        _CQ_ENTRY.pack_into(entries, pos, phys, size, cq_tags_code(
            record.topic, record.properties, record.store_timestamp, delay_levels, code))
    return run[0], run[1], run[2], bytes(entries)


def index_records_py(buf: bytes | bytearray | memoryview, base_offset: int,
                     segment_size: int) -> tuple[int, str, list[QueueRun]] | None:
    """``index_records`` in pure Python: the reference for the C version."""
    if base_offset < 0 or segment_size <= 0:
        return None
    scan = scan_log(buf, base_offset, segment_size)
    if scan.stop == "bad":
        return None
    runs: list[list] = []  # [topic, queue_id, first, next, entries]
    newest: dict[tuple[str, int], list] = {}
    pack_cq = _CQ_ENTRY.pack
    for span in scan.spans:
        if span.blank:
            continue
        pos = span.offset - base_offset
        try:
            check_placement(buf, pos, span.offset)
            topic, queue_id, queue_offset, code = _index_fields(buf, pos, span.size)
        except RecordError:
            return None
        run = newest.get((topic, queue_id))
        if run is None or run[3] != queue_offset:
            run = newest[topic, queue_id] = [topic, queue_id, queue_offset, queue_offset,
                                             bytearray()]
            runs.append(run)
        run[3] = queue_offset + 1
        run[4] += pack_cq(span.offset, span.size, code)
    return scan.end, scan.stop, [(r[0], r[1], r[2], bytes(r[4])) for r in runs]


_QID_QOFF = struct.Struct(">i4xq")
_U16 = struct.Struct(">H")


def _index_fields(buf: bytes | bytearray | memoryview, pos: int, size: int
                  ) -> tuple[str, int, int, int]:
    """(topic, queueId, queueOffset, tagsCode) of the checked record at ``buf[pos:]``.

    Decodes the topic and the properties as ``decode`` does (so the same
    records are refused) and nothing else.
    """
    queue_id, queue_offset = _QID_QOFF.unpack_from(buf, pos + 12)
    magic = _TOTAL_MAGIC.unpack_from(buf, pos)[1]
    sys_flag = _I32.unpack_from(buf, pos + 36)[0]
    body_len_at = pos + 84 + (12 if sys_flag & BORNHOST_V6 else 0) + (
        12 if sys_flag & STOREHOST_V6 else 0)
    at = body_len_at + 4 + _I32.unpack_from(buf, body_len_at)[0]
    if magic == MAGIC_V2:
        topic_len = _U16.unpack_from(buf, at)[0]
        at += 2
    else:
        topic_len = buf[at]
        at += 1
    try:
        topic = bytes(buf[at:at + topic_len]).decode()
    except UnicodeDecodeError:
        raise RecordError(pos, "topic is not valid UTF-8") from None
    at += topic_len + 2
    props = properties_from_bytes(bytes(buf[at:pos + size]), pos)
    return topic, queue_id, queue_offset, _tags_code_cached(props.get("TAGS"))


Buffer = bytes | bytearray | memoryview | Any


def iter_log(segments: Iterable[tuple[int, Buffer]], start: int | None = None,
             end: int | None = None, *, verify_crc: bool = True
             ) -> Iterator[tuple[Span, Buffer, int]]:
    """Walk the records of a log given as ``(start offset, buffer)`` per segment, in order.

    Yields ``(span, buffer, segment start)`` for every record (blanks are
    skipped) from ``start`` (a record boundary; default the first segment's
    start) up to ``end`` (e.g. a committed offset; records that do not end
    by it are not yielded). The walk stops at the zero fill after the last
    record or at the end of a segment that has no blank (the log's end).
    A bad record raises ``RecordError`` with its physical offset. Buffers
    may be ``mmap`` objects: nothing is copied.
    """
    for seg_start, buf in segments:
        size = len(buf)
        if start is not None and start >= seg_start + size:
            continue
        if end is not None and seg_start >= end:
            return
        pos = 0 if start is None else max(start - seg_start, 0)
        limit = size if end is None else min(size, end - seg_start)
        blank = False
        try:
            for span in iter_spans(buf, pos, limit, base_offset=seg_start, segment_end=size,
                                   verify_crc=verify_crc):
                if span.blank:
                    blank = True
                else:
                    yield span, buf, seg_start
        except RecordError as exc:
            if limit < size and _is_torn(buf, exc.offset - seg_start, limit, size):
                return  # the record straddles ``end``
            raise
        if not blank:
            return
