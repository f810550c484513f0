"""Reading a store root's files: segments, log end, confirm offset, planning."""

from __future__ import annotations

import logging
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.spark.storegen import StoreWriter, decode_store, sample_records
from triomq.plugins.spark_export.errors import CorruptLogError, SparkExportError
from triomq.plugins.spark_export.options import ReadOptions, parse_options
from triomq.plugins.spark_export.plan import plan_tasks, read_task, resolve
from triomq.plugins.spark_export.store_files import StoreFiles


def read_all(files, opts):
    bounds = resolve(files, opts)
    rows = []
    for task in plan_tasks(files, bounds.start, bounds.end, opts):
        for batch in read_task(task):
            rows.extend(batch.column("physicalOffset").to_pylist())
    return rows


def test_segments_and_clean_end(store):
    files = StoreFiles.open(store.root)
    assert files.segment_size == 1 << 16
    assert len(files.segments) > 3
    end = files.log_end()
    assert end.clean and end.offset == store.end
    assert files.confirm_offset() is None


def test_tasks_split_segments_at_record_boundaries(store):
    files = StoreFiles.open(store.root)
    opts = ReadOptions(path=store.root, max_bytes_per_partition=10_000)
    bounds = resolve(files, opts)
    tasks = plan_tasks(files, bounds.start, bounds.end, opts)
    assert len(tasks) > 2 * len(files.segments)
    starts = {p for p, _, _ in store.placed}
    assert all(t.lo in starts for t in tasks)
    assert read_all(files, opts) == [p for p, _, _ in store.placed]


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # the store is only read
@given(parallelism=st.integers(1, 5), step=st.integers(2_000, 200_000),
       first=st.integers(0, 1499), last=st.integers(1500, 2999))
@example(parallelism=2, step=2000, first=29, last=2164)  # targets past two segments' last records
@example(parallelism=2, step=2000, first=1499, last=1500)  # no record in the read
@example(parallelism=5, step=2000, first=1498, last=1500)  # one record, five targets
def test_tasks_are_even_a_multiple_of_the_parallelism_and_read_every_record_once(
        store, parallelism, step, first, last):
    placed = [p for p, _, _ in store.placed]
    files = StoreFiles.open(store.root)
    opts = parse_options({"path": store.root, "maxBytesPerPartition": str(step),
                          "parallelism": str(parallelism),
                          "startingOffset": str(placed[first] + 1),  # inside a record
                          "endingOffset": str(placed[last])})
    bounds = resolve(files, opts)
    tasks = plan_tasks(files, bounds.start, bounds.end, opts)
    assert {t.lo for t in tasks} <= set(placed)
    # Cut every ``total / count`` bytes at the next record: where no record is longer
    # than that, only a target past the last record of the read is lost. A read that
    # holds no record (it starts inside the one before its end) has no task.
    total = bounds.end - bounds.start
    count = parallelism * -(-total // (parallelism * step))
    read = store.placed[first + 1:last]
    assert len(tasks) <= count and bool(tasks) == bool(read)
    if read and max(size for _, size, _ in store.placed[first:last + 1]) <= total // count:
        assert len(tasks) >= count - 1
    assert read_all(files, opts) == placed[first + 1:last]


def test_a_task_reads_across_segments(store):
    files = StoreFiles.open(store.root)
    opts = ReadOptions(path=store.root, max_bytes_per_partition=3 * files.segment_size // 2)
    bounds = resolve(files, opts)
    tasks = plan_tasks(files, bounds.start, bounds.end, opts)
    assert any(t.hi - t.lo > files.segment_size for t in tasks)
    assert read_all(files, opts) == [p for p, _, _ in store.placed]


def test_batches_outlive_their_task_and_its_segment_files(store):
    # Tasks decode straight from a mapping of the segment: the batches stay
    # valid after the task ends and retention deletes the files.
    expected = [(row["physicalOffset"], row["body"]) for row in decode_store(store.root)]
    files = StoreFiles.open(store.root)
    opts = ReadOptions(path=store.root)
    bounds = resolve(files, opts)
    batches = [batch for task in plan_tasks(files, bounds.start, bounds.end, opts)
               for batch in read_task(task)]
    for seg in files.segments:
        os.unlink(seg.path)
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert [(row["physicalOffset"], row["body"]) for row in rows] == expected


def test_offsets_inside_records_keep_only_whole_records(store):
    files = StoreFiles.open(store.root)
    placed = store.placed
    lo, hi = placed[100][0] + 1, placed[900][0] + 5
    opts = parse_options({"path": store.root, "startingOffset": str(lo),
                          "endingOffset": str(hi)})
    assert read_all(files, opts) == [p for p, _, _ in placed[101:900]]


def test_confirm_offset_caps_committed_reads(store):
    store.set_confirm_offset(store.placed[1234][0] + 3)  # inside record 1234
    files = StoreFiles.open(store.root)
    opts = parse_options({"path": store.root, "committedOnly": "true"})
    assert read_all(files, opts) == [p for p, _, _ in store.placed[:1234]]


def test_partly_written_tail_is_cut_and_reported(store, caplog):
    last, size, _ = store.placed[-1]
    store.write_raw(store.end, b"\x00\x00\x01\x00\xda\xa3\x20\xa7" + b"\x01" * 40)
    files = StoreFiles.open(store.root)
    with caplog.at_level(logging.WARNING, logger="triomq.spark"):
        rows = read_all(files, ReadOptions(path=store.root))
    assert rows[-1] == last
    # In a preallocated segment the missing bytes read as zeros: a bad record.
    assert files.log_end().stop == "bad"
    assert f"bad tail at offset {last + size}" in caplog.text


def test_corrupt_tail_is_cut_and_reported(store, caplog):
    for victim, _, _ in store.placed[-2:]:
        store.write_raw(victim + 100, b"\xff\xfe")  # body bytes: CRC mismatch
    files = StoreFiles.open(store.root)
    with caplog.at_level(logging.WARNING, logger="triomq.spark"):
        rows = read_all(files, ReadOptions(path=store.root))
    assert rows == [p for p, _, _ in store.placed[:-2]]
    assert "bad tail at offset" in caplog.text and "CRC" in caplog.text
    assert [r["physicalOffset"] for r in decode_store(store.root)][-1] == rows[-1]


def test_corruption_before_the_tail_fails_the_task(store):
    victim = store.placed[10][0]
    store.write_raw(victim + 100, b"\xff\xfe")
    files = StoreFiles.open(store.root)
    with pytest.raises(CorruptLogError, match=f"offset {victim}.*CRC"):
        read_all(files, ReadOptions(path=store.root))


@pytest.mark.parametrize(("options", "where"), [
    ({"startingOffset": "-1"}, "startingOffset"),
    ({"startingOffset": "soon"}, "startingOffset"),
    ({"endingOffset": "10"}, "endingOffset"),
    ({"startingOffset": "99999999999"}, "startingOffset"),
    ({"endingOffset": "99999999999"}, "endingOffset"),
    ({"committedOnly": "maybe"}, "committedOnly"),
    ({"committedOnly": "true"}, "committedOnly"),
    ({"maxBytesPerPartition": "0"}, "maxBytesPerPartition"),
    ({"parallelism": "0"}, "parallelism"),
    ({"parallelism": "two"}, "parallelism"),
    ({"topics": "a,,b"}, "topics"),
    ({"table": "brokers"}, "table"),
    ({"paths": '["/a", "/b"]'}, "path"),
    ({"paths": "/a,/b"}, "paths"),
    ({"colour": "blue"}, "colour"),
])
def test_bad_options_name_the_option(store, options, where):
    with pytest.raises(SparkExportError) as info:
        opts = parse_options({"path": store.root, "startingOffset": "100", **options})
        resolve(StoreFiles.open(opts.path), opts)
    assert info.value.where == where


def test_controller_tables_take_several_paths(store):
    opts = parse_options({"paths": '["/c1", "/c2"]', "table": "MASTERHISTORY"})
    assert (opts.table, opts.paths, opts.path) == ("masterHistory", ("/c1", "/c2"), "/c1")


def test_bad_paths_are_named(tmp_path):
    with pytest.raises(SparkExportError, match="is not a directory"):
        StoreFiles.open(str(tmp_path / "missing"))
    with pytest.raises(SparkExportError, match="no commitlog/"):
        StoreFiles.open(str(tmp_path))
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / "notes.txt").write_text("x")
    with pytest.raises(SparkExportError, match=r"notes\.txt"):
        StoreFiles.open(str(tmp_path))


def test_record_cut_by_the_file_end_is_a_torn_tail(tmp_path):
    writer = StoreWriter(str(tmp_path), 1 << 12)
    writer.append(sample_records(40))
    last = writer.placed[-1][0]
    segment = os.path.join(writer.root, "commitlog", f"{last - last % (1 << 12):020d}")
    os.truncate(segment, last % (1 << 12) + 50)
    end = StoreFiles.open(writer.root).log_end()
    assert (end.stop, end.offset) == ("torn", writer.placed[-1][0])


def test_empty_store_reads_nothing(tmp_path):
    os.makedirs(tmp_path / "commitlog")
    files = StoreFiles.open(str(tmp_path))
    assert read_all(files, ReadOptions(path=str(tmp_path))) == []


def test_growing_log_is_walked_from_the_last_end(tmp_path):
    writer = StoreWriter(str(tmp_path), 1 << 14)
    writer.append(sample_records(50))
    files = StoreFiles.open(writer.root)
    first = files.log_end()
    writer.append(sample_records(200, start=50))
    files.refresh()
    assert files.log_end(first.offset).offset == writer.end
    assert files.boundary_at_or_below(writer.placed[120][0] + 7) == writer.placed[120][0]


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64))
def test_confirm_offset_reader_on_any_checkpoint_bytes(tmp_path_factory, raw):
    root = tmp_path_factory.mktemp("store")
    (root / "commitlog").mkdir()
    (root / "checkpoint").write_bytes(raw)
    files = StoreFiles.open(str(root))
    if len(raw) < 40:
        with pytest.raises(SparkExportError, match="confirmPhyOffset"):
            files.confirm_offset()
    else:
        assert files.confirm_offset() == int.from_bytes(raw[32:40], "big", signed=True)


def test_an_empty_segment_file_is_an_empty_log(tmp_path):
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / ("0" * 20)).write_bytes(b"")
    files = StoreFiles.open(str(tmp_path))
    assert files.log_end().offset == 0
    assert read_all(files, ReadOptions(path=str(tmp_path))) == []


def test_verify_crc_false_reads_through_a_body_mismatch(store):
    victim = store.placed[10][0]
    store.write_raw(victim + 100, b"\xff\xfe")
    files = StoreFiles.open(store.root)
    opts = parse_options({"path": store.root, "verifyCrc": "false"})
    assert read_all(files, opts) == [p for p, _, _ in store.placed]
