"""The Raft entry log on mmap segment files.

Entries are records ``size:4 | magic:4 | crc:4 | index:8 | term:8 | data``
(``crc`` is CRC-32 of everything after it) in 20-digit-named segments under
``entrylog/``, with RocketMQ-style blank padding at a segment's end. The
compaction point and the hard state live in two small JSON files replaced
atomically. Opening scans the segments to rebuild the in-memory index
(index -> position and term) and cuts a torn tail.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from triomq.durable_files import replace_atomically
from triomq.plugins.store_mmap.segments import (
    OPTION_KEYS,
    DirectoryLock,
    SegmentQueue,
    read_json,
)
from triomq.protocol.commitlog_layout import END_FILE_MIN_BLANK_LENGTH, blank_header
from triomq.protocol.message import BLANK_MAGIC
from triomq.store import (
    EntryRecord,
    HardState,
    IndexOutOfRange,
    StoreClosed,
    StoreCorruption,
    StoreError,
    store_options,
)

ENTRY_MAGIC = 0xE17E0001
_HEAD = struct.Struct(">iIIqq")
HEADER_SIZE = _HEAD.size  # 28
DEFAULT_ENTRY_SEGMENT_SIZE = 64 << 20
_TOTAL_MAGIC = struct.Struct(">iI")
_SIZE_MAGIC_CRC = struct.Struct(">iII")  # _HEAD in two parts: the CRC covers the second
_INDEX_TERM = struct.Struct(">qq")
_CRC_END = _SIZE_MAGIC_CRC.size


def _crc(buf: bytes | bytearray | memoryview, pos: int, end: int) -> int:
    return zlib.crc32(memoryview(buf)[pos + 12:end])


class MmapEntryLog:
    """A ``triomq.store.EntryLog`` on segment files; option ``segment_size``."""

    def __init__(self, directory: str, *, segment_size: int = DEFAULT_ENTRY_SEGMENT_SIZE) -> None:
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self._meta_path = os.path.join(directory, "entrylog.json")
        self._hs_path = os.path.join(directory, "hardstate.json")
        self._lock = DirectoryLock(directory)
        try:
            self._files = SegmentQueue(os.path.join(directory, "entrylog"), segment_size)
        except BaseException:
            self._lock.release()
            raise
        if not self._files.segment_size:
            self._files.segment_size = segment_size
        self._closed = False
        meta = read_json(self._meta_path) or {"first_index": 1, "compacted_term": 0}
        hs = read_json(self._hs_path) or {"term": 0, "vote": 0}
        try:
            self._first = int(meta["first_index"])
            self._compacted_term = int(meta["compacted_term"])
            self._hard_state = HardState(int(hs["term"]), int(hs["vote"]))
        except (KeyError, TypeError, ValueError) as exc:
            self._close_files()
            raise StoreCorruption(self.directory, 0, f"bad entry-log metadata: {exc!r}") from None
        self._pos: list[int] = []
        self._terms: list[int] = []
        self._write_pos = self._files.first_start or 0
        self._synced = 0
        try:
            self._load()
        except BaseException:
            self._close_files()
            raise
        self._synced = self._write_pos

    @classmethod
    def open(cls, directory: str, options: Mapping[str, Any]) -> MmapEntryLog:
        """The ``triomq_log_store`` factory."""
        return cls(directory, **store_options(options, OPTION_KEYS, ("segment_size",), "mmap"))

    def _load(self) -> None:
        expected = None
        for seg in list(self._files.segments):
            pos = 0
            mm = seg.mm
            while pos + 8 <= seg.size:
                size, magic = _TOTAL_MAGIC.unpack_from(mm, pos)
                if size == 0:
                    return self._cut_tail(seg.start + pos, seg.end)
                if magic == BLANK_MAGIC and pos + size == seg.size:
                    pos = seg.size
                    break
                if (magic != ENTRY_MAGIC or size < HEADER_SIZE or pos + size > seg.size
                        or _HEAD.unpack_from(mm, pos)[2] != _crc(mm, pos, pos + size)):
                    return self._cut_tail(seg.start + pos, seg.end)
                _, _, _, index, term = _HEAD.unpack_from(mm, pos)
                if index >= self._first:
                    if expected is None and index != self._first:
                        raise StoreCorruption(seg.path, pos, f"first entry is {index}, expected "
                                              f"{self._first}")
                    if expected is not None and index != expected:
                        raise StoreCorruption(seg.path, pos, f"entry {index} follows "
                                              f"{expected - 1}")
                    self._pos.append(seg.start + pos)
                    self._terms.append(term)
                    expected = index + 1
                pos += size
                self._write_pos = seg.start + pos
            if pos < seg.size:
                return self._cut_tail(seg.start + pos, seg.end)
            self._write_pos = seg.end
        return None

    # ---------------------------------------------------------------- indexes

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"entry log {self.directory} is closed")

    @property
    def first_index(self) -> int:
        return self._first

    @property
    def last_index(self) -> int:
        return self._first + len(self._pos) - 1

    def _slot(self, index: int) -> int:
        if not self._first <= index <= self.last_index:
            raise IndexOutOfRange(index, self._first, self.last_index)
        return index - self._first

    # ---------------------------------------------------------------- writing

    def append(self, entries: Sequence[EntryRecord]) -> None:
        self._check_open()
        if not entries:
            return
        first = entries[0].index
        for offset, e in enumerate(entries):
            if e.index != first + offset:
                raise StoreError(f"entry {e.index} appended after {first + offset - 1}")
        self.append_records(first, [e.term for e in entries], [e.data for e in entries])

    def append_records(self, first_index: int, terms: Sequence[int],
                       datas: Sequence[bytes]) -> None:
        self._check_open()
        if len(terms) != len(datas):
            raise StoreError(f"{len(terms)} terms for {len(datas)} entries")
        if not datas:
            return
        if first_index != self.last_index + 1:
            raise StoreError(f"entry {first_index} appended after {self.last_index}")
        if not self._append_in_segment(first_index, terms, datas):
            self._append_across([EntryRecord(first_index + i, term, data)
                                 for i, (term, data) in enumerate(zip(terms, datas,
                                                                      strict=True))])

    def _append_in_segment(self, first_index: int, terms: Sequence[int],
                           datas: Sequence[bytes]) -> bool:
        """Append entries that all fit the current segment in one write; False
        (nothing done) when they do not fit. The common case, kept lean: one
        pass packing records, no padding to place."""
        crc32, pack_head, pack_key = zlib.crc32, _SIZE_MAGIC_CRC.pack, _INDEX_TERM.pack
        parts: list[bytes] = []
        put = parts.append
        positions: list[int] = []
        base = at = self._write_pos
        for index, term, data in zip(range(first_index, first_index + len(datas)), terms,
                                     datas, strict=True):
            covered = pack_key(index, term) + data  # what the CRC covers: one call
            size = _CRC_END + len(covered)
            put(pack_head(size, ENTRY_MAGIC, crc32(covered)))
            put(covered)
            positions.append(at)
            at += size
        seg_size = self._files.segment_size
        if base % seg_size + (at - base) + END_FILE_MIN_BLANK_LENGTH > seg_size:
            return False
        self._files.write(base, b"".join(parts))
        self._pos += positions
        self._terms += terms
        self._write_pos = at
        return True

    def _append_across(self, entries: Sequence[EntryRecord]) -> None:
        # Entries that reach the end of a segment: blank padding goes there.
        seg_size = self._files.segment_size
        buf = bytearray()
        base = self._write_pos
        expected = self.last_index + 1
        positions, terms = [], []
        for e in entries:
            if e.index != expected:
                raise StoreError(f"entry {e.index} appended after {expected - 1}")
            size = HEADER_SIZE + len(e.data)
            at = len(buf)
            room = seg_size - (base + at) % seg_size
            if size + END_FILE_MIN_BLANK_LENGTH > room:
                if size + END_FILE_MIN_BLANK_LENGTH > seg_size:
                    raise StoreError(f"entry of {size} bytes does not fit a segment of "
                                     f"{seg_size} bytes")
                buf += blank_header(room)
                buf += bytes(room - 8)
                at += room
            buf += _HEAD.pack(size, ENTRY_MAGIC, 0, e.index, e.term)
            buf += e.data
            struct.pack_into(">I", buf, at + 8, _crc(buf, at, at + size))
            positions.append(base + at)
            terms.append(e.term)
            expected += 1
        self._files.write(base, buf)
        self._pos += positions
        self._terms += terms
        self._write_pos = base + len(buf)

    def sync(self) -> None:
        with self._files.lock:
            if self._closed:
                return
            hi = self._write_pos
            if hi > self._synced:
                self._files.sync_range(self._synced, hi)
            self._synced = hi

    def truncate_suffix(self, index: int) -> None:
        self._check_open()
        if index > self.last_index:
            return
        slot = self._slot(max(index, self._first))
        self._cut_tail(self._pos[slot])
        del self._pos[slot:]
        del self._terms[slot:]

    def _cut_tail(self, offset: int, data_end: int | None = None) -> None:
        """Durably drop the bytes at or after ``offset`` (data ends by ``data_end``)."""
        with self._files.lock:
            seg = self._files.find(offset)
            if seg is None:
                self._files.delete_from(offset)
            else:
                # The header at ``offset`` is zeroed and synced first: whatever
                # happens next, a reopen stops there.
                self._files.zero(offset, min(offset + HEADER_SIZE, seg.end))
                seg.sync()
                end = self._write_pos if data_end is None else data_end
                self._files.zero(offset, min(seg.end, max(end, offset)))
                seg.sync()
                self._files.delete_from(seg.end)
            self._write_pos = offset
            self._synced = min(self._synced, offset)

    def compact_prefix(self, index: int, term: int | None = None) -> None:
        """Drop entries ``< index``; past ``last_index + 1`` a ``term`` (of ``index - 1``,
        from a snapshot) is required and the whole log is dropped."""
        self._check_open()
        if index <= self._first:
            return
        if index > self.last_index + 1:
            if term is None:
                raise IndexOutOfRange(index, self._first, self.last_index)
            compacted_term = term
        else:
            compacted_term = self.term_at(index - 1)
        drop = min(index - self._first, len(self._pos))
        keep_from = self._pos[drop] if drop < len(self._pos) else self._write_pos
        replace_atomically(self._meta_path, _json({"first_index": index,
                                             "compacted_term": compacted_term}))
        self._first = index
        self._compacted_term = compacted_term
        del self._pos[:drop]
        del self._terms[:drop]
        seg = self._files.find(keep_from)
        self._files.delete_before(seg.start if seg is not None else keep_from)

    @property
    def hard_state(self) -> HardState:
        return self._hard_state

    def set_hard_state(self, state: HardState) -> None:
        self._check_open()
        replace_atomically(self._hs_path, _json({"term": state.term, "vote": state.vote}))
        self._hard_state = state

    # ---------------------------------------------------------------- reading

    def get(self, index: int) -> EntryRecord:
        self._check_open()
        offset = self._pos[self._slot(index)]
        seg = self._files.find(offset)
        pos = offset - seg.start
        size, _, _, idx, term = _HEAD.unpack_from(seg.mm, pos)
        return EntryRecord(idx, term, seg.mm[pos + HEADER_SIZE:pos + size])

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[EntryRecord]:
        self._check_open()
        if lo >= hi:
            return []
        self._slot(lo)
        self._slot(hi - 1)
        out: list[EntryRecord] = []
        total = 0
        for index in range(lo, hi):
            entry = self.get(index)
            total += len(entry.data)
            if out and max_bytes is not None and total > max_bytes:
                break
            out.append(entry)
        return out

    def term_at(self, index: int) -> int:
        if index == self._first - 1:
            return self._compacted_term
        return self._terms[self._slot(index)]

    def close(self) -> None:
        if self._closed:
            return
        self.sync()
        self._closed = True
        self._close_files()

    def _close_files(self) -> None:
        self._files.close()
        self._lock.release()

    def __enter__(self) -> MmapEntryLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()
