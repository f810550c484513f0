"""Corrupt and foreign stores: flipped bits, torn tails, bad files, RocketMQ's own layout.

Recovery must stop at the first bad record and ``triomq store verify``
must name it; bad input gives a typed error naming the file and offset.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import struct
import zlib
from pathlib import Path

import pytest

from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.plugins.store_mmap.entrylog import MmapEntryLog
from triomq.protocol.commitlog_layout import segment_name, segment_start
from triomq.store import EntryRecord, StoreCorruption
from triomq.store_cli import dump_command, recover_command, verify_command
from triomq.testing.store_suite import make_record

SEG = 4096
OPTIONS = {"segment_size": SEG, "cq_entries_per_file": 16}


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, list[tuple[int, int]]]:
    """A cleanly closed store of 60 records; returns (root, [(offset, size)])."""
    root = tmp_path / "store"
    with MmapCommitLog(str(root), **OPTIONS) as log:
        results = log.append_batch([make_record(i, queue_id=i % 2, body_size=150)
                                    for i in range(60)])
    return root, [(r.physical_offset, r.size) for r in results]


def segment_path(root: Path, offset: int) -> Path:
    return root / "commitlog" / segment_name(segment_start(offset, SEG))


def patch(root: Path, offset: int, data: bytes) -> None:
    with open(segment_path(root, offset), "r+b") as f:
        f.seek(offset - segment_start(offset, SEG))
        f.write(data)


def read(root: Path, offset: int, n: int) -> bytes:
    with open(segment_path(root, offset), "rb") as f:
        f.seek(offset - segment_start(offset, SEG))
        return f.read(n)


def run(command, root: str, **options) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = command(root, out, err, **options)
    return code, out.getvalue(), err.getvalue()


def reopened_offsets(root: Path) -> list[int]:
    with MmapCommitLog(str(root), **OPTIONS) as log:
        offsets = [r.physical_offset for r in log.iter_records()]
        assert (log.queue_max_offset("t", 0) + log.queue_max_offset("t", 1)) == len(offsets)
        assert log.max_offset == log.last_whole_record_end()
    return offsets


def last_in_first_segment(records: list[tuple[int, int]]) -> int:
    return max(i for i, (off, _) in enumerate(records) if off < SEG)


@pytest.mark.parametrize("which", ["first", "middle", "end_of_segment", "later_segment", "last"])
def test_flipped_body_bit(store, which: str) -> None:
    root, records = store
    index = {"first": 0, "middle": 30, "end_of_segment": last_in_first_segment(records),
             "later_segment": next(i for i, (o, _) in enumerate(records) if o >= 2 * SEG),
             "last": len(records) - 1}[which]
    offset, size = records[index]
    body_at = offset + size - 150 - 1 - 1 - 2 - len(b"UNIQ_KEY\x01k00\x02TAGS\x01tagA\x02")
    byte = read(root, body_at + 7, 1)
    patch(root, body_at + 7, bytes([byte[0] ^ 0x10]))

    code, _, err = run(verify_command, str(root))
    assert code == 1
    assert f"offset {offset}" in err
    assert "CRC mismatch" in err
    assert segment_name(segment_start(offset, SEG)) in err

    dropped = len(records) - index - 1
    if dropped:
        # Good records follow the bad one: not cut without --force.
        code, _, err = run(recover_command, str(root))
        assert code == 1
        assert f"refusing to cut at offset {offset}" in err
        assert f"{dropped} good records after it" in err
        assert f"offsets {records[index + 1][0]} to {records[-1][0]}" in err
    code, out, _ = run(recover_command, str(root), force=True)
    assert code == 0
    assert f"cut at offset {offset}" in out
    assert reopened_offsets(root) == [o for o, _ in records[:index]]
    assert run(verify_command, str(root))[0] == 0


def test_abnormal_restart_cuts_at_the_bad_record(store) -> None:
    root, records = store
    offset, _ = records[44]
    patch(root, offset + 4, b"\x00\x00\x00\x07")  # bad magic
    os.remove(root / "triomq_checkpoint.json")  # no checkpoint: an abnormal restart
    with MmapCommitLog(str(root), **OPTIONS) as log:
        assert log.recovery["clean"] is False
        assert log.recovery["cut_at"] == offset
        assert "bad magic" in log.recovery["reason"]
        assert log.max_offset == offset
    assert reopened_offsets(root) == [o for o, _ in records[:44]]


@pytest.mark.parametrize(("field", "value", "reason"), [
    (0, 0x7FFFFFFF, "runs past the end"),
    (0, 50, "below the minimum"),
    (0, 300, "add up to"),
    (4, 0x12345678, "bad magic"),
    (32, 0x00001234, "physicalOffset field says"),
    (20, 0x00100000, "queue offset"),
])
def test_bad_headers_are_named(store, field: int, value: int, reason: str) -> None:
    root, records = store
    offset, _ = records[20]
    patch(root, offset + field, struct.pack(">I", value))
    code, _, err = run(verify_command, str(root))
    assert code == 1
    assert f"offset {offset}" in err
    assert reason in err
    code, out, _ = run(recover_command, str(root), force=True)
    assert f"cut at offset {offset}" in out
    assert reopened_offsets(root) == [o for o, _ in records[:20]]


@pytest.mark.parametrize("keep", [4, 30, 100])
def test_torn_tail(store, keep: int) -> None:
    root, records = store
    offset, size = records[-1]
    patch(root, offset + keep, bytes(size - keep))  # only the first bytes made it
    code, _, err = run(verify_command, str(root))
    assert code == 1
    assert f"offset {offset}" in err
    os.remove(root / "triomq_checkpoint.json")
    assert reopened_offsets(root) == [o for o, _ in records[:-1]]
    assert run(verify_command, str(root))[0] == 0


def test_garbage_after_cut_never_returns(store) -> None:
    """A cut zeroes what follows, so a later scan cannot walk into old records."""
    root, records = store
    offset, _ = records[10]
    patch(root, offset + 4, b"\xff\xff\xff\xff")
    assert run(recover_command, str(root), force=True)[0] == 0
    assert read(root, offset + 100, 200) == bytes(200)
    assert reopened_offsets(root) == [o for o, _ in records[:10]]
    assert len(list((root / "commitlog").iterdir())) == 1


def test_non_segment_file_is_named(store) -> None:
    root, _ = store
    (root / "commitlog" / "notes.txt").write_text("hello")
    with pytest.raises(StoreCorruption, match=r"notes\.txt") as info:
        MmapCommitLog(str(root), **OPTIONS)
    assert info.value.offset == 0
    code, _, err = run(verify_command, str(root))
    assert code == 1 and "notes.txt" in err


def test_segment_of_wrong_size_and_gap(store) -> None:
    root, _ = store
    names = sorted(os.listdir(root / "commitlog"))
    with open(root / "commitlog" / names[-1], "r+b") as f:
        f.truncate(100)
    with pytest.raises(StoreCorruption, match="100 bytes"):
        MmapCommitLog(str(root), **OPTIONS)
    os.remove(root / "commitlog" / names[1])
    os.remove(root / "commitlog" / names[-1])
    with pytest.raises(StoreCorruption, match="gap"):
        MmapCommitLog(str(root), **OPTIONS)


def test_leftover_tmp_segment_is_removed(store) -> None:
    root, records = store
    tmp = root / "commitlog" / (segment_name(10 * SEG) + ".tmp")
    tmp.write_bytes(b"partial")
    assert reopened_offsets(root) == [o for o, _ in records]
    assert not tmp.exists()


def test_bad_checkpoint_and_queue_dir(store) -> None:
    root, _ = store
    (root / "triomq_checkpoint.json").write_text("{not json")
    with pytest.raises(StoreCorruption, match=r"triomq_checkpoint\.json"):
        MmapCommitLog(str(root), **OPTIONS)
    (root / "triomq_checkpoint.json").unlink()
    (root / "consumequeue" / "t" / "zero").mkdir()
    with pytest.raises(StoreCorruption, match="zero"):
        MmapCommitLog(str(root), **OPTIONS)


def test_entrylog_corruption_cuts_the_tail(tmp_path: Path) -> None:
    with MmapEntryLog(str(tmp_path), segment_size=4096) as log:
        log.append([EntryRecord(i, 1, bytes([i]) * 100) for i in range(1, 61)])
    seg = sorted((tmp_path / "entrylog").iterdir())[1]
    with open(seg, "r+b") as f:
        f.seek(200)
        f.write(b"\xff")
    with MmapEntryLog(str(tmp_path), segment_size=4096) as log:
        cut = log.last_index
        assert 30 < cut < 60
        assert all(e.data == bytes([e.index]) * 100 for e in log.entries(1, cut + 1))
    assert len(list((tmp_path / "entrylog").iterdir())) == 2


def test_dump_json(store) -> None:
    root, records = store
    code, out, _ = run(dump_command, str(root), as_json=True)
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 60
    first = lines[7]
    rec = make_record(7, queue_id=1, body_size=150)
    assert first == {
        "physicalOffset": records[7][0], "size": records[7][1], "topic": "t", "queueId": 1,
        "queueOffset": 3, "bodyCRC": zlib.crc32(rec.body) & 0x7FFFFFFF, "sysFlag": 0,
        "bornTimestamp": rec.born_timestamp, "storeTimestamp": rec.store_timestamp,
        "properties": dict(rec.properties), "body": base64.b64encode(rec.body).decode(),
    }
    code, out, _ = run(dump_command, str(root), start=records[50][0], as_json=True)
    assert [json.loads(x)["physicalOffset"] for x in out.splitlines()] == [
        o for o, _ in records[50:]]
    code, out, _ = run(dump_command, str(root), start=records[50][0])
    assert code == 0 and f"{records[50][0]}" in out.splitlines()[0]
    code, _, err = run(dump_command, str(root), start=records[50][0] + 1, as_json=True)
    assert code == 1 and "bad" in err


def test_cli_rejects_a_directory_without_a_log(tmp_path: Path) -> None:
    assert run(verify_command, str(tmp_path))[0] == 2
    assert run(dump_command, str(tmp_path))[0] == 2
    assert run(recover_command, str(tmp_path))[0] == 2


def test_rocketmq_store_root(store, tmp_path: Path) -> None:
    """A store root as RocketMQ leaves it: its own checkpoint, abort marker, epoch file,
    config/ and index/ folders, a preallocated empty next segment, no triomq files,
    and consume queues that lag behind the log."""
    root, records = store
    rmq = tmp_path / "rocketmq"
    shutil.copytree(root / "commitlog", rmq / "commitlog")
    last = sorted(os.listdir(rmq / "commitlog"))[-1]
    (rmq / "commitlog" / segment_name(int(last) + SEG)).write_bytes(bytes(SEG))
    (rmq / "checkpoint").write_bytes(struct.pack(">qqqqq", 1700000000000, 1700000000000,
                                                 0, 0, 0).ljust(4096, b"\0"))
    (rmq / "abort").write_bytes(b"")
    (rmq / "epochFileCheckpoint").write_text("1\n0\n1-0\n")
    (rmq / "config").mkdir()
    (rmq / "config" / "consumerOffset.json").write_text("{}")
    (rmq / "index").mkdir()
    shutil.copytree(root / "consumequeue", rmq / "consumequeue")
    shutil.rmtree(rmq / "consumequeue" / "t" / "1")

    code, out, _ = run(verify_command, str(rmq))
    assert code == 0 and "60 records" in out
    code, out, _ = run(dump_command, str(rmq), as_json=True)
    assert len(out.splitlines()) == 60
    code, out, _ = run(recover_command, str(rmq))
    assert code == 0
    with MmapCommitLog(str(rmq), cq_entries_per_file=16) as log:
        assert log.segment_size == SEG
        assert [r.physical_offset for r in log.iter_records()] == [o for o, _ in records]
        assert log.queue_max_offset("t", 1) == 30
        assert [e.physical_offset for e in log.queue_entries("t", 1, 0, 100)] == [
            o for i, (o, _) in enumerate(records) if i % 2 == 1]
    assert (rmq / "checkpoint").read_bytes()[:8] == struct.pack(">q", 1700000000000)
    assert (rmq / "epochFileCheckpoint").exists()
