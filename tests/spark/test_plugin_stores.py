"""Stores without segment files (LMDB), read through their store plugin: the
Spark source, ``triomq export parquet`` and the metadata tables."""

from __future__ import annotations

import pyarrow.dataset as ds
import pytest

from tests.spark.storegen import normalize, record_row, sample_records
from triomq.plugin_manager import PluginManager
from triomq.plugins.spark_export.cli import main
from triomq.plugins.spark_export.errors import SparkExportError
from triomq.plugins.spark_export.options import parse_options
from triomq.plugins.spark_export.parquet import export_parquet
from triomq.plugins.spark_export.store_files import StoreFiles

SEGMENT = 1 << 16


@pytest.fixture
def lmdb_store(tmp_path):
    """An LMDB commit log of 1,500 records over several virtual segments; its
    root and the rows its records make."""
    root = str(tmp_path / "lmdb")
    pm = PluginManager.discover()
    with pm.log_store("commitlog", "lmdb")(root, {"segment_size": SEGMENT}) as log:
        log.append_batch(sample_records(1500))
        rows = [record_row(r, int.from_bytes(log.read(r.physical_offset, 4), "big"))
                for r in log.iter_records()]
        end = log.max_offset
    return root, rows, end


def test_the_planner_reads_an_lmdb_store_through_its_plugin(lmdb_store):
    root, rows, end = lmdb_store
    files = StoreFiles.open(root)
    assert files.scheme == "lmdb" and files.segment_size == SEGMENT
    assert files.log_end().offset == end and files.log_end().clean
    assert len(files.segments) == -(-end // SEGMENT)
    inside = rows[700]["physicalOffset"] + 10
    assert files.boundary_at_or_below(inside) == rows[700]["physicalOffset"]


def test_export_parquet_of_an_lmdb_store(lmdb_store, tmp_path, capsys):
    root, rows, _ = lmdb_store
    out = tmp_path / "out"
    assert main(["export", "parquet", root, str(out)]) == 0
    assert "exported 1500 messages" in capsys.readouterr().out
    table = ds.dataset(str(out), format="parquet", partitioning="hive",
                       exclude_invalid_files=True).to_table()
    exported = normalize([{**r, "topic": str(r["topic"])} for r in table.to_pylist()])
    assert exported == sorted(rows, key=lambda r: r["physicalOffset"])


def test_a_read_from_inside_a_record_starts_at_the_next(lmdb_store, tmp_path):
    root, rows, _ = lmdb_store
    start = rows[700]["physicalOffset"] + 10
    result = export_parquet(parse_options({"path": root, "startingOffset": str(start)}),
                            str(tmp_path / "out"))
    assert result.rows == len(rows) - 701


def test_a_directory_no_plugin_recognises_is_named(tmp_path):
    with pytest.raises(SparkExportError, match="no store plugin recognises it"):
        StoreFiles.open(str(tmp_path))


@pytest.mark.spark
def test_the_spark_source_reads_an_lmdb_store(spark, lmdb_store):
    root, rows, end = lmdb_store
    df = spark.read.format("triomq").load(root)
    assert df.rdd.getNumPartitions() == -(-end // SEGMENT)
    assert normalize(df.toArrow().to_pylist()) == rows
    status = spark.read.format("triomq").option("table", "status").load(root).collect()[0]
    assert (status.maxOffset, status.tail, status.confirmOffset) == (end, "end", None)
