"""RocketMQ's index file (``store/index/<yyyyMMddHHmmssSSS>``), sans-I/O.

A file is a 40-byte header, ``slot_num`` hash slots of 4 bytes and
``index_num`` entries of 20 bytes (all big-endian)::

    header:  beginTimestamp:8 | endTimestamp:8 | beginPhyOffset:8 | endPhyOffset:8
             | hashSlotCount:4 | indexCount:4
    slot:    the number of the newest entry whose key hashes there (0: none)
    entry:   keyHash:4 | phyOffset:8 | timeDiff:4 | prevIndex:4

A key (``topic#key``) hashes to ``abs(String.hashCode)`` (0 for Java's
``Integer.MIN_VALUE``), its slot is that modulo ``slot_num``, and entries
of one slot chain newest to oldest through ``prevIndex``. Entry numbers
start at 1 (``indexCount`` starts at 1: 0 is "no entry"); ``timeDiff`` is
seconds since ``beginTimestamp``. ``hashSlotCount`` counts the slots in use,
the ``end*`` fields the last key put. A file is full at ``index_num``
entries; the next starts with the full one's end as its begin.

``IndexFile`` does the arithmetic over any writable buffer (the broker's is
a mapped file, a test's a ``bytearray``); it never does I/O itself.
``put_hashed`` puts keys already hashed (``index_dispatch.key_hashes``), in C
where it is built.
"""

from __future__ import annotations

import functools
import operator
import struct
from typing import Any

import attrs

from triomq.protocol.extensions import optional_extension

__all__ = [
    "ENTRY_SIZE",
    "HEADER_SIZE",
    "SLOT_SIZE",
    "IndexFile",
    "IndexHeader",
    "file_size",
    "java_hash",
    "key_hash",
]

HEADER_SIZE = 40
SLOT_SIZE = 4
ENTRY_SIZE = 20
#: Slot and prevIndex value meaning "no entry".
INVALID_INDEX = 0
_INT_MAX = 2**31 - 1

_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_SLOT = struct.Struct(">i")
#: A hashed key as ``index_dispatch.key_hashes`` gives it: keyHash, phyOffset, storeTimestamp.
_KEY_ENTRY = struct.Struct(">iqq")

_put_entries = getattr(optional_extension("_speedups"), "put_index_entries", None)

#: A writable buffer: a ``bytearray``, a ``memoryview`` or a mapped file.
Buffer = Any


def file_size(slot_num: int, index_num: int) -> int:
    """The size of an index file with these counts."""
    return HEADER_SIZE + slot_num * SLOT_SIZE + index_num * ENTRY_SIZE


def java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    if text.isascii():
        units: bytes | tuple[int, ...] = text.encode("ascii")
    else:
        data = text.encode("utf-16-be", "surrogatepass")
        units = struct.unpack(f">{len(data) // 2}H", data)
    # sum(unit * 31**(n-1-i)) mod 2**32, with the multiplications done in C: every
    # index key is hashed once per record, on the trio thread.
    h = sum(map(operator.mul, units, _powers(len(units)))) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=512)
def _powers(length: int) -> tuple[int, ...]:
    """``31**(length-1-i) mod 2**32`` for every position ``i``."""
    powers = [1] * length
    for i in range(length - 2, -1, -1):
        powers[i] = (powers[i + 1] * 31) & 0xFFFFFFFF
    return tuple(powers)


def key_hash(key: str) -> int:
    """RocketMQ's ``indexKeyHashMethod``: ``abs(hashCode)``, 0 where Java's abs overflows."""
    h = java_hash(key)
    return 0 if h == -(2**31) else abs(h)


@attrs.define
class IndexHeader:
    """The 40-byte header of an index file."""

    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1

    @classmethod
    def unpack(cls, buf: Buffer) -> IndexHeader:
        header = cls(*_HEADER.unpack_from(buf, 0))
        if header.index_count <= 0:  # a new file: entry numbers start at 1
            header.index_count = 1
        return header

    def pack_into(self, buf: Buffer) -> None:
        _HEADER.pack_into(buf, 0, self.begin_timestamp, self.end_timestamp,
                          self.begin_phy_offset, self.end_phy_offset, self.hash_slot_count,
                          self.index_count)


class IndexFile:
    """One index file over ``buf`` (``file_size(slot_num, index_num)`` bytes)."""

    def __init__(self, buf: Buffer, slot_num: int, index_num: int) -> None:
        if len(buf) < file_size(slot_num, index_num):
            raise ValueError(f"index file of {len(buf)} bytes, expected "
                             f"{file_size(slot_num, index_num)}")
        self.buf = buf
        self.slot_num = slot_num
        self.index_num = index_num
        self.header = IndexHeader.unpack(buf)

    @classmethod
    def create(cls, buf: Buffer, slot_num: int, index_num: int, *, end_phy_offset: int = 0,
               end_timestamp: int = 0) -> IndexFile:
        """A new file in zeroed ``buf``, starting where the previous one ended."""
        index = cls(buf, slot_num, index_num)
        if end_phy_offset > 0:
            index.header.begin_phy_offset = index.header.end_phy_offset = end_phy_offset
        if end_timestamp > 0:
            index.header.begin_timestamp = index.header.end_timestamp = end_timestamp
        index.header.pack_into(buf)
        return index

    @property
    def is_full(self) -> bool:
        return self.header.index_count >= self.index_num

    def slot_position(self, key_hash_value: int) -> int:
        """Where the slot of a key hash is in the file."""
        return HEADER_SIZE + (key_hash_value % self.slot_num) * SLOT_SIZE

    def entry_position(self, number: int) -> int:
        """Where entry ``number`` (1-based) is in the file."""
        return HEADER_SIZE + self.slot_num * SLOT_SIZE + number * ENTRY_SIZE

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Index ``key`` for the record at ``phy_offset``; False when the file is full."""
        if self.is_full:
            return False
        self._put(key_hash(key), phy_offset, store_timestamp)
        return True

    def put_hashed(self, entries: bytes, start: int = 0) -> int:
        """Put the hashed keys of ``entries`` from entry ``start`` on, until the file is
        full; how many it took."""
        if _put_entries is None:
            return self.put_hashed_py(entries, start)
        h = self.header
        count, fields = _put_entries(
            self.buf, self.slot_num, self.index_num,
            (h.begin_timestamp, h.end_timestamp, h.begin_phy_offset, h.end_phy_offset,
             h.hash_slot_count, h.index_count), entries, start)
        self.header = IndexHeader(*fields)
        return int(count)

    def put_hashed_py(self, entries: bytes, start: int = 0) -> int:
        """``put_hashed`` in Python (the reference)."""
        count = 0
        for h, phy_offset, store_timestamp in _KEY_ENTRY.iter_unpack(
                memoryview(entries)[start * _KEY_ENTRY.size:]):
            if self.is_full:
                break
            self._put(h, phy_offset, store_timestamp)
            count += 1
        return count

    def _put(self, h: int, phy_offset: int, store_timestamp: int) -> None:
        header = self.header
        slot_at = self.slot_position(h)
        previous = _SLOT.unpack_from(self.buf, slot_at)[0]
        if previous <= INVALID_INDEX or previous > header.index_count:
            previous = INVALID_INDEX
        if header.begin_timestamp <= 0:
            time_diff = 0
        else:
            time_diff = min(_INT_MAX, max(0, store_timestamp - header.begin_timestamp) // 1000)
        number = header.index_count
        _ENTRY.pack_into(self.buf, self.entry_position(number), h, phy_offset, time_diff,
                         previous)
        _SLOT.pack_into(self.buf, slot_at, number)
        if number <= 1:
            header.begin_phy_offset = phy_offset
            header.begin_timestamp = store_timestamp
        if previous == INVALID_INDEX:
            header.hash_slot_count += 1
        header.index_count += 1
        header.end_phy_offset = phy_offset
        header.end_timestamp = store_timestamp
        header.pack_into(self.buf)

    def time_matched(self, begin: int, end: int) -> bool:
        """Whether ``[begin, end]`` (ms) overlaps the file's time span."""
        header = self.header
        return ((begin < header.begin_timestamp and end > header.end_timestamp)
                or header.begin_timestamp <= begin <= header.end_timestamp
                or header.begin_timestamp <= end <= header.end_timestamp)

    def select(self, key: str, max_num: int, begin: int, end: int,
               found: list[int] | None = None) -> list[int]:
        """The physical offsets indexed under ``key`` and stored within ``[begin, end]``,
        newest first, appended to ``found`` until it holds ``max_num``."""
        found = [] if found is None else found
        header = self.header
        h = key_hash(key)
        number = _SLOT.unpack_from(self.buf, self.slot_position(h))[0]
        if number <= INVALID_INDEX or number > header.index_count or header.index_count <= 1:
            return found
        seen = 0
        while len(found) < max_num and seen < header.index_count:
            seen += 1  # a damaged chain cannot loop
            hash_read, phy_offset, time_diff, previous = _ENTRY.unpack_from(
                self.buf, self.entry_position(number))
            if time_diff < 0:
                break
            stored = header.begin_timestamp + time_diff * 1000
            if hash_read == h and begin <= stored <= end:
                found.append(phy_offset)
            if (previous <= INVALID_INDEX or previous > header.index_count
                    or previous == number or stored < begin):
                break
            number = previous
        return found
