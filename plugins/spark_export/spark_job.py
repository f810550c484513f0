"""The Parquet export as a Spark job (``triomq export parquet --spark-master URL``).

The driver resolves the offset range exactly as the local export does,
then Spark reads it through the ``triomq`` data source and writes Parquet
partitioned by topic (microsecond timestamps), appending to ``OUT_DIR``.
Spark commits the job's files only when it succeeds, and the state file is
written after that, so a failed job is redone whole by the next run (a
process killed between the commit and the state write exports that range
again: the local export, chunk by chunk, does not have this window).
"""

from __future__ import annotations

import os
import sys

from triomq.plugins.spark_export.options import ReadOptions
from triomq.plugins.spark_export.parquet import ExportResult, ExportState, resume_options
from triomq.plugins.spark_export.plan import resolve
from triomq.plugins.spark_export.store_files import StoreFiles


def spark_session(master: str, app_name: str = "triomq-export"):
    """A session on ``master`` with the ``triomq`` source registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from triomq.plugins.spark_export import register

    spark = (SparkSession.builder.master(master).appName(app_name)
             .config("spark.ui.enabled", "false")
             .getOrCreate())
    # Also on a session that existed already: Parquet timestamps in microseconds.
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    register(spark)
    return spark


def export_with_spark(opts: ReadOptions, out_dir: str, master: str) -> ExportResult:
    """Export with a Spark job on ``master``; resumable like ``export_parquet``."""
    opts, _ = resume_options(opts, out_dir)
    files = StoreFiles.open(opts.path)
    bounds = resolve(files, opts)
    os.makedirs(out_dir, exist_ok=True)
    spark = spark_session(master)
    reader = (spark.read.format("triomq")
              .option("startingOffset", str(bounds.start))
              .option("endingOffset", str(bounds.end)))
    if opts.topics is not None:
        reader = reader.option("topics", ",".join(sorted(opts.topics)))
    reader.load(files.root).write.mode("append").partitionBy("topic").parquet(out_dir)
    topics = None if opts.topics is None else tuple(sorted(opts.topics))
    ExportState(files.root, topics, bounds.end).save(out_dir)
    return ExportResult(bounds.start, bounds.end, None, None)
