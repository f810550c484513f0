"""Checkpointed recovery of the mmap commit log and LMDB map growth."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from triomq.plugins.store_lmdb import LmdbCommitLog, LmdbEntryLog
from triomq.plugins.store_mmap import MmapCommitLog, MmapEntryLog
from triomq.plugins.store_mmap.checkpoint import Checkpoint
from triomq.store import EntryRecord, StoreClosed, StoreError
from triomq.testing.store_suite import make_record

OPTIONS = {"segment_size": 1 << 16, "cq_entries_per_file": 1024}


@pytest.mark.parametrize("n", [10, 2000])
def test_clean_restart_scans_nothing(tmp_path: Path, n: int) -> None:
    with MmapCommitLog(str(tmp_path), **OPTIONS) as log:
        log.append_batch([make_record(i, queue_id=i % 4, body_size=300) for i in range(n)])
        end = log.max_offset
    with MmapCommitLog(str(tmp_path), **OPTIONS) as log:
        assert log.recovery == {"clean": True, "scanned": 0, "cut_at": None}
        assert log.max_offset == end
        assert log.queue_max_offset("t", 3) == n // 4


def test_abnormal_restart_scans_from_the_checkpoint(tmp_path: Path) -> None:
    log = MmapCommitLog(str(tmp_path), **OPTIONS, checkpoint_interval=50_000)
    for i in range(40):
        log.append_batch([make_record(100 * i + j, body_size=400) for j in range(20)])
        log.flush()
    log.append_batch([make_record(9000 + j, body_size=400) for j in range(20)])
    end = log.max_offset
    # No close: the process "dies" here.
    with MmapCommitLog(str(tmp_path), **OPTIONS) as again:
        assert again.recovery["clean"] is False
        assert 0 < again.recovery["scanned"] < 50_000 + 2 * 20 * 600 < end // 4
        assert again.max_offset == end
        assert again.queue_max_offset("t", 0) == 820
    del log


def test_full_recovery_option_rescans(tmp_path: Path) -> None:
    with MmapCommitLog(str(tmp_path), **OPTIONS) as log:
        log.append_batch([make_record(i) for i in range(100)])
        end = log.max_offset
    with MmapCommitLog(str(tmp_path), **OPTIONS, full_recovery=True) as log:
        assert log.recovery["scanned"] == end


def test_closed_store_refuses_work(tmp_path: Path) -> None:
    log = MmapCommitLog(str(tmp_path), **OPTIONS)
    log.close()
    log.close()
    with pytest.raises(StoreClosed):
        log.append(make_record(1))


def test_record_larger_than_a_segment_is_refused(tmp_path: Path) -> None:
    with MmapCommitLog(str(tmp_path), segment_size=4096) as log:
        with pytest.raises(StoreError, match="does not fit"):
            log.append(make_record(1, body_size=5000))
        assert log.max_offset == 0
    with LmdbCommitLog(str(tmp_path / "l"), segment_size=4096) as log, \
            pytest.raises(StoreError, match="does not fit"):
        log.append(make_record(1, body_size=5000))


def test_lmdb_map_grows(tmp_path: Path) -> None:
    with LmdbCommitLog(str(tmp_path / "c"), map_size=64 << 10) as log:
        for i in range(20):
            log.append_batch([make_record(100 * i + j, body_size=2000) for j in range(50)])
        assert log.max_offset > 2_000_000
        assert sum(1 for _ in log.iter_records()) == 1000
    with LmdbEntryLog(str(tmp_path / "e"), map_size=64 << 10) as elog:
        elog.append([EntryRecord(i, 1, bytes(5000)) for i in range(1, 300)])
        assert elog.get(299).data == bytes(5000)


def test_lmdb_segment_size_is_fixed_at_creation(tmp_path: Path) -> None:
    LmdbCommitLog(str(tmp_path), segment_size=4096).close()
    with pytest.raises(StoreError, match="segment_size"):
        LmdbCommitLog(str(tmp_path), segment_size=8192)


def test_mmap_and_lmdb_logs_are_byte_identical(tmp_path: Path) -> None:
    records = [make_record(i, queue_id=i % 3, body_size=(i * 37) % 900) for i in range(200)]
    with MmapCommitLog(str(tmp_path / "m"), segment_size=8192) as m, \
            LmdbCommitLog(str(tmp_path / "l"), segment_size=8192) as lm:
        m.append_batch(records)
        lm.append_batch(records)
        assert m.read(0, m.max_offset) == lm.read(0, lm.max_offset)


def test_lost_consume_queue_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    with MmapCommitLog(str(tmp_path), segment_size=1 << 16, cq_entries_per_file=16) as log:
        results = log.append_batch([make_record(i, queue_id=i % 2) for i in range(100)])
    # Queue 1 lost its files and the log restarts abnormally from the middle.
    shutil.rmtree(tmp_path / "consumequeue" / "t" / "1")
    middle = results[60].physical_offset
    Checkpoint(clean=False, max_offset=0, dispatched=0, recover_from=middle).save(str(tmp_path))
    with MmapCommitLog(str(tmp_path), segment_size=1 << 16, cq_entries_per_file=16) as log:
        assert log.queue_min_offset("t", 1) == 30  # record 61 is queue 1's 31st
        assert log.queue_max_offset("t", 1) == 50
        entries = log.queue_entries("t", 1, 0, 100)
        assert [e.physical_offset for e in entries] == [
            r.physical_offset for r in results[61::2]]
    with MmapCommitLog(str(tmp_path), segment_size=1 << 16, cq_entries_per_file=16) as log:
        assert (log.queue_min_offset("t", 1), log.queue_max_offset("t", 1)) == (30, 50)
        assert log.append(make_record(7, queue_id=1)).queue_offset == 50


@pytest.mark.parametrize("kind", ["commitlog", "entrylog"])
def test_a_second_process_cannot_open_a_store_in_use(tmp_path: Path, kind: str) -> None:
    opener = {"commitlog": "MmapCommitLog", "entrylog": "MmapEntryLog"}[kind]
    script = (f"from triomq.plugins.store_mmap import {opener}\n"
              "from triomq.store import StoreError\n"
              "import sys\n"
              f"try:\n    {opener}(sys.argv[1]).close()\n"
              "except StoreError as exc:\n    print(exc)\n    sys.exit(3)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    store = (MmapCommitLog if kind == "commitlog" else MmapEntryLog)(str(tmp_path))
    child = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env,
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == 3, child.stderr
    assert "in use by another process" in child.stdout
    store.close()
    child = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env,
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr
