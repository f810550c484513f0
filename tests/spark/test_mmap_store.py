"""Reading a store written, and still being written, by the mmap store plugin."""

from __future__ import annotations

from tests.spark.storegen import normalize, record_row, sample_records
from triomq.plugins.spark_export.options import ReadOptions, parse_options
from triomq.plugins.spark_export.plan import plan_tasks, read_task, resolve
from triomq.plugins.spark_export.source import MessagesStreamReader
from triomq.plugins.spark_export.store_files import StoreFiles


def test_rows_equal_the_plugins_own_records(mmap_commitlog, tmp_path):
    root = str(tmp_path / "store")
    log = mmap_commitlog(root, segment_size=1 << 16)
    appended = log.append_batch(sample_records(1200))
    files = StoreFiles.open(root)
    opts = ReadOptions(path=root, max_bytes_per_partition=30_000)
    bounds = resolve(files, opts)
    rows = [row for task in plan_tasks(files, bounds.start, bounds.end, opts)
            for batch in read_task(task) for row in batch.to_pylist()]
    want = [record_row(record, result.size)
            for record, result in zip(log.iter_records(), appended, strict=True)]
    assert normalize(rows) == want


def test_stream_follows_a_live_log(mmap_commitlog, tmp_path):
    root = str(tmp_path / "store")
    log = mmap_commitlog(root, segment_size=1 << 15)
    log.append_batch(sample_records(100))
    reader = MessagesStreamReader(parse_options({"path": root}, streaming=True),
                                  StoreFiles.open(root))
    start, seen = reader.initialOffset(), []
    for i in range(4):
        end = reader.latestOffset(start, None)
        seen += [off for part in reader.partitions(start, end) for batch in reader.read(part)
                 for off in batch.column("physicalOffset").to_pylist()]
        start = end
        log.append_batch(sample_records(150, start=100 + 150 * i))
    end = reader.latestOffset(start, None)
    seen += [off for part in reader.partitions(start, end) for batch in reader.read(part)
             for off in batch.column("physicalOffset").to_pylist()]
    assert seen == [r.physical_offset for r in log.iter_records()]
    assert end == {reader.key: log.max_offset}
