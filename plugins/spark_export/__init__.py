"""The Spark export plugin: a PySpark data source and a Parquet exporter for commit logs.

Register the data source with a session, then read a store root::

    from triomq.plugins.spark_export import register
    register(spark)
    spark.read.format("triomq").load("/data/broker-a")                 # messages
    spark.read.format("triomq").option("table", "epochs").load(...)    # epoch history
    spark.readStream.format("triomq").load("/data/broker-a")           # streaming
    spark.read.format("triomq").option("table", "masterHistory").load(
        ["/data/c1/raft", "/data/c2/raft", "/data/c3/raft"])            # controller tables

The command line gets ``triomq export parquet STORE_DIR OUT_DIR`` and
``triomq export controller OUT_DIR CONTROLLER_DIR...`` through
``triomq_add_cli_commands``. The plugin needs ``pip install triomq[spark]``.
"""

from __future__ import annotations

import argparse
from typing import Any

from triomq.hookspecs import hookimpl

__all__ = ["FORMAT", "register"]

FORMAT = "triomq"


def register(spark: Any) -> None:
    """Register the ``triomq`` data source with ``spark`` (a ``SparkSession``).

    Reads default their ``parallelism`` option to the session's
    ``defaultParallelism`` as found now (1 where a session has no
    ``sparkContext``, as with Spark Connect). The source's Python workers
    run an interpreter that can import triomq: ``PYSPARK_PYTHON`` or
    ``spark.pyspark.python`` if set, else on a local master this one when
    ``python3`` cannot; on a local master an interpreter set that cannot
    raises ``SparkExportError`` here, saying what to set (see ``workers``).
    """
    from pyspark.errors import PySparkException

    from triomq.plugins.spark_export.source import data_source_class
    from triomq.plugins.spark_export.workers import worker_python

    try:
        context = spark.sparkContext
        parallelism = max(1, int(context.defaultParallelism))
    except (AttributeError, PySparkException):  # Spark Connect: no sparkContext
        spark.dataSource.register(data_source_class(1))
        return
    python = worker_python(context, spark.conf.get("spark.pyspark.python", None))
    # The source's functions take the interpreter PySpark names when they are
    # wrapped, here: only this source's workers run ``python``.
    previous, context.pythonExec = context.pythonExec, python
    try:
        spark.dataSource.register(data_source_class(parallelism))
    finally:
        context.pythonExec = previous


@hookimpl
def triomq_add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    from triomq.plugins.spark_export.cli import add_commands

    add_commands(subparsers)
