"""Lazily durable segment creation (``SegmentQueue(sync_creation_lazily=True)``).

A new segment's file is sized and named at once, but made durable (file
and directory synced) by the next ``sync_range``, before the data: never
later than the bytes it holds, and never on the writer's path.
"""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest

from triomq.plugins.store_mmap import mapping_pool, segments
from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.plugins.store_mmap.segments import SegmentQueue
from triomq.testing.store_suite import make_record


def count_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the store's fsync and fdatasync calls, in order, by kind."""
    calls: list[str] = []
    proxy = types.SimpleNamespace(**{name: getattr(os, name) for name in dir(os)
                                     if not name.startswith("__")})

    def fsync(fd: int) -> None:
        calls.append("fsync")
        os.fsync(fd)

    def fdatasync(fd: int) -> None:
        calls.append("fdatasync")
        os.fdatasync(fd)

    proxy.fsync, proxy.fdatasync = fsync, fdatasync
    monkeypatch.setattr(segments, "os", proxy)
    monkeypatch.setattr(mapping_pool, "os", proxy)  # consume queues' files
    monkeypatch.setattr(segments, "fsync_directory", lambda d: calls.append("directory"))
    return calls


@pytest.mark.parametrize("lazily", [False, True])
def test_creation_is_made_durable_by_the_next_sync(tmp_path: Path, lazily: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_syncs(monkeypatch)
    queue = SegmentQueue(str(tmp_path), 4096, sync_creation_lazily=lazily)
    queue.write(0, b"a" * 6000)  # two segments
    assert calls == ([] if lazily else ["fsync", "directory"] * 2)
    calls.clear()
    queue.sync_range(0, 6000)
    # Lazily: both files and the directory, before the data of either.
    assert calls == (["fsync", "fsync", "directory", "fdatasync", "fdatasync"] if lazily
                     else ["fdatasync", "fdatasync"])
    calls.clear()
    queue.write(6000, b"b" * 100)
    queue.sync_range(6000, 6100)
    assert calls == ["fdatasync"]
    queue.close()
    assert sorted(os.listdir(tmp_path)) == [segments.segment_name(0), segments.segment_name(4096)]
    assert all(os.path.getsize(tmp_path / name) == 4096 for name in os.listdir(tmp_path))


def test_a_segment_removed_before_the_sync_is_not_synced(tmp_path: Path) -> None:
    queue = SegmentQueue(str(tmp_path), 4096, sync_creation_lazily=True)
    queue.write(0, b"a" * 6000)
    queue.delete_from(4096)
    queue.sync_range(0, 4096)  # would fail on the removed segment's closed file
    queue.close()
    assert os.listdir(tmp_path) == [segments.segment_name(0)]


def test_flush_makes_the_commit_logs_new_files_durable_and_a_checkpoint_the_queues(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = MmapCommitLog(str(tmp_path), segment_size=1 << 20, cq_entries_per_file=8)
    calls = count_syncs(monkeypatch)
    log.append_batch([make_record(i, queue_id=0, body_size=100) for i in range(20)])
    assert calls == []  # one commit-log segment and three queue files, none synced yet
    log.flush()
    # The commit log's new file, then its data. The queue files wait for the next
    # checkpoint: a recovery rebuilds their entries from the commit log.
    assert calls[:2] == ["fsync", "directory"]
    assert calls.count("directory") == 1 and calls.count("fsync") == 1
    del calls[:]
    log.close()  # the clean checkpoint: every queue file durable first
    assert calls.count("directory") == 1 and calls.count("fsync") == 3


def random_access_paths() -> set[str]:
    """Paths of this process's file mappings advised ``MADV_RANDOM`` (VmFlags ``rr``)."""
    found, path = set(), None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 6:
                path = fields[5]
            elif fields[0] == "VmFlags:" and "rr" in fields[1:] and path:
                found.add(path)
    return found


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps")
def test_only_the_segment_being_filled_is_mapped_for_random_access(tmp_path: Path) -> None:
    # Read-ahead over a new file's holes would zero pages far ahead of the
    # writer, in its thread; full segments keep read-ahead for their readers.
    queue = SegmentQueue(str(tmp_path / "q"), 4096, read_ahead_new=False)
    queue.write(0, b"x" * 5000)
    first, second = (seg.path for seg in queue.segments)
    assert first not in random_access_paths()
    assert second in random_access_paths()
    queue.delete_from(4096)
    queue.write(4096, b"y")  # a new segment after a removed one
    assert queue.segments[1].path in random_access_paths()
    queue.close()
    plain = SegmentQueue(str(tmp_path / "p"), 4096)
    plain.write(0, b"z")
    assert plain.segments[0].path not in random_access_paths()
    plain.close()
