"""The ``triomq`` data source in a real local Spark: batch, streaming, export, errors."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from tests.spark.storegen import decode_store, normalize, sample_records
from triomq.plugins.spark_export.cli import main
from triomq.plugins.spark_export.options import parse_options
from triomq.plugins.spark_export.spark_job import export_with_spark

pytestmark = pytest.mark.spark


def rows_of(df):
    return normalize(df.toArrow().to_pylist())


def offsets_of(df):
    return sorted(df.select("physicalOffset").toArrow().column(0).to_pylist())


def test_rows_equal_a_direct_decode_of_the_store(spark, store):
    df = spark.read.format("triomq").option("maxBytesPerPartition", "40000").load(store.root)
    assert df.rdd.getNumPartitions() > len(os.listdir(os.path.join(store.root, "commitlog")))
    assert rows_of(df) == decode_store(store.root)


def test_reads_default_to_the_sessions_parallelism(spark, store):
    def partitions(**options):
        reader = spark.read.format("triomq").option("maxBytesPerPartition", str(10 << 20))
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load(store.root).rdd.getNumPartitions()

    # The whole store fits one task; register(spark) made it one per slot (local[2]).
    assert spark.sparkContext.defaultParallelism == 2
    assert (partitions(), partitions(parallelism="1"), partitions(parallelism="3")) == (2, 1, 3)


def test_topic_filter_and_offset_range(spark, store):
    placed = store.placed
    df = (spark.read.format("triomq").option("topics", "orders, audit")
          .option("startingOffset", placed[200][0]).option("endingOffset", placed[2500][0])
          .load(store.root))
    want = [r for r in decode_store(store.root)[200:2500] if r["topic"] in ("orders", "audit")]
    assert rows_of(df) == want


def test_committed_only_cuts_at_the_confirm_offset(spark, store):
    store.set_confirm_offset(store.placed[1700][0])
    df = spark.read.format("triomq").option("committedOnly", "true").load(store.root)
    assert offsets_of(df) == [p for p, _, _ in store.placed[:1700]]
    status = spark.read.format("triomq").option("table", "status").load(store.root).collect()[0]
    assert status.confirmOffset == store.placed[1700][0] and status.tail == "zero"


def test_corrupt_tail_stops_at_the_last_valid_record_and_says_so(spark, store):
    store.write_raw(store.placed[-1][0] + 120, b"\x00\xff")
    df = spark.read.format("triomq").load(store.root)
    assert offsets_of(df) == [p for p, _, _ in store.placed[:-1]]
    status = spark.read.format("triomq").option("table", "status").load(store.root).collect()[0]
    assert (status.tail, status.maxOffset) == ("bad", store.placed[-1][0])
    assert "CRC" in status.tailReason


def test_epoch_history_table(spark, store):
    store.set_epochs([(1, 0), (2, store.placed[1000][0]), (5, store.placed[2000][0])])
    rows = spark.read.format("triomq").option("table", "epochs").load(store.root).collect()
    assert [tuple(r) for r in rows] == [
        (1, 0, store.placed[1000][0]),
        (2, store.placed[1000][0], store.placed[2000][0]),
        (5, store.placed[2000][0], store.end),
    ]


def test_stream_over_a_growing_log_sees_every_record_once(spark, store, tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start(**trigger):
        return (spark.readStream.format("triomq").load(store.root)
                .select("physicalOffset", "topic").writeStream.format("parquet")
                .option("path", out).option("checkpointLocation", checkpoint)
                .trigger(**trigger).start())

    query = start(processingTime="200 milliseconds")
    query.processAllAvailable()
    store.append(sample_records(500, start=3000))
    query.processAllAvailable()
    query.stop()
    assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {store.root: store.end}
    store.append(sample_records(300, start=3500))  # while no query runs
    query = start(availableNow=True)
    query.awaitTermination()
    assert offsets_of(spark.read.parquet(out)) == [p for p, _, _ in store.placed]


def test_parquet_export_read_by_spark_equals_the_source(spark, store, tmp_path):
    out = str(tmp_path / "out")
    assert main(["export", "parquet", store.root, out, "--to", str(store.placed[2000][0])]) == 0
    assert main(["export", "parquet", store.root, out]) == 0
    source = spark.read.format("triomq").load(store.root)
    exported = spark.read.parquet(out).select(*source.columns)
    # Spark reads every Parquet column as nullable, whatever the file says.
    assert [(f.name, f.dataType) for f in exported.schema] == [
        (f.name, f.dataType) for f in source.schema]
    assert [f.name for f in source.schema if f.nullable] == [
        "tags", "keys", "bornTimestamp", "storeTimestamp"]
    assert rows_of(exported) == rows_of(source)

    by_spark = str(tmp_path / "by_spark")
    export_with_spark(parse_options({"path": store.root}), by_spark, "local[2]")
    assert rows_of(spark.read.parquet(by_spark).select(*source.columns)) == rows_of(source)
    written = ds.dataset(by_spark, format="parquet", partitioning="hive").schema
    assert written.field("storeTimestamp").type.unit == "us"


@pytest.mark.parametrize(("path", "options", "named"), [
    ("{root}/missing", {}, "missing: is not a directory"),
    ("{tmp}", {}, "has no commitlog/"),
    ("{root}", {"startingOffset": "123456789"}, "startingOffset"),
    ("{root}", {"endingOffset": "-4"}, "endingOffset"),
    ("{root}", {"topic": "orders"}, "topic: unknown option"),
    ("{root}", {"committedOnly": "true"}, "committedOnly"),
])
def test_bad_input_fails_before_any_job(spark, store, tmp_path, path, options, named):
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("bad-input", "bad input must not start a job")
    with pytest.raises(Exception, match=named):
        spark.read.format("triomq").options(**options).load(
            path.format(root=store.root, tmp=tmp_path)).collect()
    assert tracker.getJobIdsForGroup("bad-input") == []
    spark.sparkContext.setJobGroup("other", "")


def test_streaming_rejects_an_ending_offset(spark, store):
    query = (spark.readStream.format("triomq").option("endingOffset", "10").load(store.root)
             .writeStream.format("noop").start())
    with pytest.raises(Exception, match="endingOffset: a stream has no end"):
        query.processAllAvailable()
    query.stop()


def test_arrow_schema_matches_the_spark_schema(spark, store):
    from triomq.plugins.spark_export.arrow_decode import ARROW_SCHEMA

    table = spark.read.format("triomq").option("endingOffset", store.placed[5][0]).load(
        store.root).toArrow()
    assert table.num_rows == 5
    assert [f.name for f in table.schema] == ARROW_SCHEMA.names
    assert table.schema.field("bornTimestamp").type == pa.timestamp("us", tz="UTC")
