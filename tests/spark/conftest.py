"""One SparkSession for the whole Spark test session, and store fixtures."""

from __future__ import annotations

import importlib
import os
import sys

import pytest

from tests.spark.storegen import StoreWriter, sample_records

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def spark():
    """A local[2] session with the triomq source registered (UI off, bound to 127.0.0.1)."""
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
        yield session
        session.stop()


@pytest.fixture
def store(tmp_path):
    """A store root of 3,000 records over several 64 KiB segments."""
    writer = StoreWriter(str(tmp_path / "store"), 1 << 16)
    writer.append(sample_records(3000))
    return writer


@pytest.fixture
def mmap_commitlog(tmp_path):
    """A factory opening commit logs of the mmap store plugin, registered explicitly.

    The Spark plugin never imports a store plugin; the test asks a plugin
    manager for the store, as a host would.
    """
    from triomq.plugin_manager import PluginManager

    pm = PluginManager()
    pm.register(importlib.import_module("triomq.plugins.store_mmap"), name="store_mmap")
    factory = pm.log_store("commitlog", "mmap")
    opened = []

    def open_log(root: str, **options):
        log = factory(root, options)
        opened.append(log)
        return log

    yield open_log
    for log in opened:
        log.close()
