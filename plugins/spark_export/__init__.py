"""The Spark export plugin: a PySpark data source and a Parquet exporter for commit logs.

Register the data source with a session, then read a store root::

    from plugins.spark_export import register
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

from framework.hookspecs import hookimpl

__all__ = ["FORMAT", "register"]

FORMAT = "triomq"


def register(spark: Any) -> None:
    """Register the ``triomq`` data source with ``spark`` (a ``SparkSession``).

    Reads default their ``parallelism`` option to the session's
    ``defaultParallelism`` as found now (1 where a session has no
    ``sparkContext``, as with Spark Connect).
    """
    from pyspark.errors import PySparkException

    from plugins.spark_export.source import data_source_class

    try:
        parallelism = max(1, int(spark.sparkContext.defaultParallelism))
    except (AttributeError, PySparkException):  # Spark Connect: no sparkContext
        parallelism = 1
    spark.dataSource.register(data_source_class(parallelism))


@hookimpl
def triomq_add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    from plugins.spark_export.cli import add_commands

    add_commands(subparsers)
