"""The local Spark session of the tests, with the triomq source registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@contextmanager
def local_spark() -> Iterator[Any]:
    """A local[2] session (UI off, bound to 127.0.0.1), stopped at the end; skips the test
    where pyspark is not installed."""
    pyspark_sql = pytest.importorskip("pyspark.sql")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYSPARK_PYTHON", sys.executable)
        env.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
        # Python workers import triomq.plugins.spark_export from the repository.
        env.setenv("PYTHONPATH", REPO_ROOT, prepend=os.pathsep)
        session = (
            pyspark_sql.SparkSession.builder.master("local[2]")
            .appName("triomq-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        from triomq.plugins.spark_export import register

        register(session)
        try:
            yield session
        finally:
            session.stop()
