"""Read-only access to a store root's commit log, for tools (``CommitLogReader``).

Maps the segment files of ``commitlog/`` read-only, whichever program wrote
them (triomq or RocketMQ), and takes no lock: a broker may have the store
open. ``recovery_options`` names the consume queues' file size as found on
disk, so a recovery opens them as they were written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from triomq.plugins.store_mmap.segments import SegmentQueue
from triomq.protocol.commitlog_layout import (
    COMMITLOG_DIR,
    CONSUMEQUEUE_DIR,
    CQ_ENTRY_SIZE,
    DEFAULT_SEGMENT_SIZE,
)
from triomq.store import StoreNotFound


class MmapLogReader:
    """A ``triomq.store.CommitLogReader`` on the segment files under ``root``."""

    scheme = "mmap"

    def __init__(self, root: str) -> None:
        self.root = root
        directory = os.path.join(root, COMMITLOG_DIR)
        if not os.path.isdir(directory):
            raise StoreNotFound(root, f"a {COMMITLOG_DIR}/ directory of segment files")
        self._files = SegmentQueue(directory, None, writable=False)
        self.segment_size = self._files.segment_size or DEFAULT_SEGMENT_SIZE

    @classmethod
    def open(cls, directory: str, options: Mapping[str, Any]) -> MmapLogReader:
        """The ``triomq_log_store`` factory of ``READER_KIND`` (options are not used)."""
        return cls(directory)

    @property
    def min_offset(self) -> int:
        first = self._files.first_start
        return 0 if first is None else first

    @property
    def end_offset(self) -> int:
        end = self._files.end
        return 0 if end is None else end

    def read(self, offset: int, size: int) -> bytes:
        end = min(offset + max(size, 0), self.end_offset)
        return self._files.read(offset, end - offset) if end > offset else b""

    def where(self, offset: int) -> str:
        seg = self._files.find(offset)
        return self.root if seg is None else seg.path

    def recovery_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"full_recovery": True}
        entries = _cq_entries_per_file(os.path.join(self.root, CONSUMEQUEUE_DIR))
        if entries:
            options["cq_entries_per_file"] = entries
        return options

    def close(self) -> None:
        self._files.close()


def _cq_entries_per_file(cq_root: str) -> int | None:
    """Entries per consume-queue file, from the first file found (None if none)."""
    if not os.path.isdir(cq_root):
        return None
    for dirpath, _, names in os.walk(cq_root):
        for name in sorted(names):
            if name.isdigit():
                size = os.path.getsize(os.path.join(dirpath, name))
                if size and size % CQ_ENTRY_SIZE == 0:
                    return size // CQ_ENTRY_SIZE
    return None
