"""A store without segment files (an LMDB store, any plugin's), read through its plugin.

``StoreFiles`` reads a store root's segment files directly; a store a
plugin keeps otherwise is read through that plugin's ``CommitLogReader``
(``triomq.store.READER_KIND``), found by ``triomq.log_check.open_reader``.
``PluginStoreFiles`` answers what the planner asks of ``StoreFiles``; its
segments are the log's virtual segments (records never cross one, so each
starts at a record boundary), and tasks are cut at their starts. A task
opens the reader again where it runs (``read_plugin_range``).

Readers are opened for each question and closed again, so one process
never holds two of them on one store (LMDB forbids that).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from triomq.errors import TriomqError
from triomq.log_check import LogWalk, open_reader
from triomq.plugins.spark_export.errors import SparkExportError
from triomq.plugins.spark_export.store_files import LogEnd, SegmentFile
from triomq.protocol.commitlog_layout import EPOCH_CHECKPOINT, scan_log, segment_start
from triomq.store import CommitLogReader, StoreNotFound


@contextlib.contextmanager
def _reader(root: str, scheme: str | None = None) -> Iterator[CommitLogReader]:
    try:
        reader = open_reader(root, scheme=scheme)
    except StoreNotFound as exc:
        raise SparkExportError(root, f"is not a store root: it has no commitlog/ and no "
                                     f"store plugin recognises it (expected {exc.expected})"
                               ) from None
    except TriomqError as exc:
        raise SparkExportError(root, str(exc)) from None
    try:
        yield reader
    finally:
        reader.close()


class PluginStoreFiles:
    """What ``StoreFiles`` tells of a store root, for a store read through its plugin."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        #: Named in messages and tasks (there is no ``commitlog/`` directory).
        self.commitlog_dir = self.root
        self.scheme = ""
        self.segment_size = 0
        self.segments: list[SegmentFile] = []
        self.refresh()

    def refresh(self) -> None:
        """Ask the store again where its bytes begin and end."""
        with _reader(self.root, self.scheme or None) as reader:
            self.scheme = reader.scheme
            self.segment_size = size = reader.segment_size
            lo, end = reader.min_offset, reader.end_offset
        self.segments = [SegmentFile(start, f"{self.root}@{start}", min(size, end - start))
                         for start in range(segment_start(lo, size), end, size)]
        self._first = lo

    @property
    def min_offset(self) -> int:
        return self._first

    def segment_at(self, offset: int) -> SegmentFile | None:
        for seg in self.segments:
            if seg.start <= offset < seg.start + self.segment_size:
                return seg
        return None

    def log_end(self, from_offset: int | None = None) -> LogEnd:
        """Where the good records end, walking from ``from_offset`` (a record
        boundary; default: the last segment's start) with the store tools' rule."""
        if not self.segments:
            return LogEnd(self._first, "end")
        start = max(self.segments[-1].start, self._first) if from_offset is None else from_offset
        with _reader(self.root, self.scheme) as reader:
            walk = LogWalk(reader, start).run()
        return LogEnd(walk.end, walk.stop or "end",
                      None if walk.error is None else walk.error.reason)

    def boundary_at_or_below(self, offset: int, hint: int | None = None) -> int:
        """The last record boundary at or below ``offset``."""
        seg = self.segment_at(offset)
        if seg is None or offset <= seg.start:
            return offset
        lo = hint if hint is not None and seg.start <= hint <= offset else max(seg.start,
                                                                               self._first)
        with _reader(self.root, self.scheme) as reader:
            data = reader.read(lo, offset - lo)
        return scan_log(data, lo, self.segment_size).end

    def confirm_offset(self) -> int | None:
        """None: such a store keeps no RocketMQ ``checkpoint`` file."""
        return None

    @property
    def epoch_checkpoint_path(self) -> str:
        return os.path.join(self.root, EPOCH_CHECKPOINT)


def read_plugin_range(scheme: str, root: str, lo: int, hi: int) -> bytes:
    """The bytes ``[lo, hi)`` of the store at ``root``, through its plugin."""
    with _reader(root, scheme) as reader:
        return reader.read(lo, hi - lo)
