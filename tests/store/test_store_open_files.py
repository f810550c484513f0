"""Consume queues keep a bounded number of files open, however many queues there are.

A store with many distinct queues under a low open-file limit writes, closes
and recovers (clean and abnormal restarts) without running out of
descriptors; when the process has none left, a new queue is refused with
``StoreOutOfResources`` while the queues it holds keep being served.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from triomq.plugins.store_mmap.checkpoint import CHECKPOINT_FILE
from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.store import StoreError
from triomq.testing.store_suite import make_record

CHILD = Path(__file__).with_name("many_queues_child.py")

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"),
                                reason="counts descriptors in /proc/self/fd")


def child(mode: str, directory: Path, nofile: int, *args: str) -> dict:
    done = subprocess.run([sys.executable, str(CHILD), mode, str(directory), str(nofile), *args],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def memory_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder in memory if the system has one: the test is about descriptors, and
    syncing tens of thousands of new files would make it wait on the disk."""
    if not os.path.isdir("/dev/shm"):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def test_twenty_thousand_queues_under_1024_descriptors_write_and_recover(memory_folder: Path
                                                                         ) -> None:
    store = memory_folder / "store"
    wrote = child("write", store, 1024, "20000")
    assert wrote["written"] == 20000 and wrote["refused"] == 0
    assert wrote["most_fds"] < 1024
    reopened = child("reopen", store, 1024)
    assert reopened["recovery"]["clean"]
    assert reopened["queues"] == reopened["bodies"] == 20000
    # An abnormal restart re-indexes every record into its queue.
    os.remove(store / CHECKPOINT_FILE)
    recovered = child("reopen", store, 1024)
    assert not recovered["recovery"]["clean"] and recovered["recovery"]["cut_at"] is None
    assert recovered["queues"] == recovered["bodies"] == 20000
    assert recovered["most_fds"] < 1024


def test_a_limit_above_what_the_process_may_open_gives_back_mappings(memory_folder: Path
                                                                     ) -> None:
    wrote = child("write", memory_folder / "store", 256, "3000",
                  json.dumps({"max_open_consume_queue_files": 5000}))
    assert wrote["written"] == 3000 and wrote["refused"] == 0
    assert wrote["mapped"] < 256


def test_no_descriptor_left_refuses_a_new_queue_and_serves_the_others(tmp_path: Path) -> None:
    store = tmp_path / "store"
    seen = child("exhaust", store, 256)
    assert seen["new_queue"].startswith("refused: ")
    assert "Too many open files" in seen["new_queue"]
    assert seen["held_queue"] == 1 and seen["read"] == "00000000"
    assert seen["new_queue_after"] == 0
    assert seen["queues"] == [["fanout", 0, 2], ["fanout", 1, 1]]
    # Nothing of the refused append reached the log.
    assert child("reopen", store, 256)["bodies"] == 3


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_queue_files_beyond_the_limit_are_unmapped_and_mapped_again(tmp_path: Path) -> None:
    before = open_fds()
    log = MmapCommitLog.open(str(tmp_path), {"segment_size": 1 << 20, "cq_entries_per_file": 4,
                                             "max_open_consume_queue_files": 3})
    for i in range(40):  # 10 queues of 4 entries: 10 files, three mapped
        log.append(make_record(i, queue_id=i % 10))
    assert log.cq_files.mapped == 3
    # The log's segment (its file and the mapping's duplicate) and lock, and one
    # descriptor per mapped queue file: nothing for the other seven.
    assert open_fds() - before == 3 + 3
    log.flush()  # syncs files that are no longer mapped, by their path
    for q in range(10):
        entries = log.queue_entries("t", q, 0, 10)
        assert [log.read_record(e.physical_offset).body for e in entries] == \
            [make_record(i).body for i in range(q, 40, 10)]
    assert log.cq_files.remaps >= 10 and log.cq_files.mapped == 3
    log.close()
    assert open_fds() == before
    with MmapCommitLog(str(tmp_path), segment_size=1 << 20, cq_entries_per_file=4,
                       max_open_consume_queue_files=3) as again:
        assert [again.queue_max_offset("t", q) for q in range(10)] == [4] * 10


def test_a_batch_keeps_its_queue_files_mapped_until_written(tmp_path: Path) -> None:
    with MmapCommitLog(str(tmp_path), segment_size=1 << 20, cq_entries_per_file=4,
                       max_open_consume_queue_files=2) as log:
        remaps = log.cq_files.remaps
        log.append_batch([make_record(i, queue_id=i) for i in range(8)])
        # Reserved first, written after: none of the eight was unmapped in between.
        assert log.cq_files.remaps == remaps
        assert log.cq_files.mapped == 2
        assert [log.queue_max_offset("t", q) for q in range(8)] == [1] * 8


def test_the_limit_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="max_open_consume_queue_files 0"):
        MmapCommitLog(str(tmp_path), max_open_consume_queue_files=0)
