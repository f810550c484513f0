"""The index files of a store root (``<root>/index/``), mapped: RocketMQ's ``IndexService`` files.

Files are named by their creation time (``yyyyMMddHHmmssSSS``, local time
as RocketMQ names them) and sorted by name. A new file is made sparse
(``ftruncate``), so its 420 MB of slots and entries cost disk blocks only
as keys land in them; its bytes are mapped and ``triomq.broker.index.core.index_file``
does the arithmetic on the mapping. Keys go to the newest file; a full one
is followed by a new one starting where it ended. A file whose size does
not match ``max_hash_slot_num`` / ``max_index_num`` (written with other
counts) is left alone and not read.

All methods block (file creation, ``msync``): the broker's index service
calls ``flush`` and ``close`` in a worker thread; puts touch only memory
except when a file is created. The index service puts in a worker thread
and queries only between its batches.
"""

from __future__ import annotations

import logging
import mmap
import os
import time

import attrs

from triomq.broker.index.core.index_dispatch import KEY_ENTRY
from triomq.broker.index.core.index_file import IndexFile, file_size

__all__ = ["INDEX_DIR", "IndexStore", "QueryResult"]

log = logging.getLogger("triomq.broker")

INDEX_DIR = "index"


@attrs.frozen
class QueryResult:
    """Offsets found for a key, newest first, and the newest file's last update."""

    offsets: list[int]
    last_update_timestamp: int
    last_update_phy_offset: int


@attrs.define
class _Mapped:
    path: str
    mapping: mmap.mmap
    index: IndexFile
    dirty: bool = False


def _name(now_ms: int) -> str:
    seconds, millis = divmod(now_ms, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.localtime(seconds)) + f"{millis:03d}"


class IndexStore:
    """The index files of one store root, the newest taking keys."""

    def __init__(self, root: str, slot_num: int, index_num: int) -> None:
        self.directory = os.path.join(root, INDEX_DIR)
        self.slot_num = slot_num
        self.index_num = index_num
        self.size = file_size(slot_num, index_num)
        self._files: list[_Mapped] = []
        os.makedirs(self.directory, exist_ok=True)
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if not (name.isdigit() and os.path.isfile(path)):
                continue
            if os.path.getsize(path) != self.size:
                log.warning("index file %s is %d bytes, not %d (max_hash_slot_num %d, "
                            "max_index_num %d): not used", path, os.path.getsize(path),
                            self.size, slot_num, index_num)
                continue
            self._files.append(self._map(path))

    def _map(self, path: str) -> _Mapped:
        with open(path, "r+b") as file:
            mapping = mmap.mmap(file.fileno(), self.size)
        return _Mapped(path, mapping, IndexFile(mapping, self.slot_num, self.index_num))

    @property
    def last(self) -> IndexFile | None:
        """The newest file, if any."""
        return self._files[-1].index if self._files else None

    def files(self) -> list[str]:
        return [f.path for f in self._files]

    def _new_file(self) -> _Mapped:
        previous = self._files[-1].index.header if self._files else None
        now_ms = time.time_ns() // 1_000_000
        while True:
            path = os.path.join(self.directory, _name(now_ms))
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                now_ms += 1  # two files in one millisecond
                continue
            break
        try:
            os.ftruncate(fd, self.size)  # sparse: no block is written
            mapping = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)
        index = IndexFile.create(
            mapping, self.slot_num, self.index_num,
            end_phy_offset=previous.end_phy_offset if previous else 0,
            end_timestamp=previous.end_timestamp if previous else 0)
        mapped = _Mapped(path, mapping, index, dirty=True)
        self._files.append(mapped)
        return mapped

    def put(self, key: str, phy_offset: int, store_timestamp: int) -> None:
        """Index ``key`` for the record at ``phy_offset`` in the newest file."""
        mapped = self._files[-1] if self._files else self._new_file()
        if not mapped.index.put_key(key, phy_offset, store_timestamp):
            mapped = self._new_file()
            mapped.index.put_key(key, phy_offset, store_timestamp)
        mapped.dirty = True

    def put_hashed(self, entries: bytes) -> None:
        """Index the hashed keys of ``entries`` (``index_dispatch.key_hashes``) in the
        newest file, and in new ones as files fill."""
        count = len(entries) // KEY_ENTRY.size
        mapped = self._files[-1] if self._files else self._new_file()
        done = mapped.index.put_hashed(entries)
        while done < count:
            mapped.dirty = True
            mapped = self._new_file()
            took = mapped.index.put_hashed(entries, done)
            if not took:
                break  # max_index_num leaves no room for a key
            done += took
        mapped.dirty = True

    def query(self, key: str, max_num: int, begin: int, end: int) -> QueryResult:
        """Offsets indexed under ``key`` within ``[begin, end]`` ms, newest files first."""
        found: list[int] = []
        last_timestamp = last_offset = 0
        for i, mapped in enumerate(reversed(self._files)):
            header = mapped.index.header
            if i == 0:
                last_timestamp, last_offset = header.end_timestamp, header.end_phy_offset
            if mapped.index.time_matched(begin, end):
                mapped.index.select(key, max_num, begin, end, found)
            if header.begin_timestamp < begin or len(found) >= max_num:
                break
        return QueryResult(found, last_timestamp, last_offset)

    def delete_before(self, min_offset: int) -> int:
        """Delete the files (never the newest) whose keys all point below
        ``min_offset``, where the commit log no longer reaches; how many."""
        gone = 0
        while len(self._files) > 1 and self._files[0].index.header.end_phy_offset < min_offset:
            mapped = self._files.pop(0)
            mapped.mapping.close()
            os.remove(mapped.path)
            gone += 1
        return gone

    def flush(self) -> None:
        """Write the files' changed pages to disk."""
        for mapped in self._files:
            if mapped.dirty:
                mapped.dirty = False
                mapped.mapping.flush()

    def close(self) -> None:
        self.flush()
        for mapped in self._files:
            mapped.mapping.close()
        self._files.clear()
