"""One SparkSession for the whole Spark test session, and store fixtures."""

from __future__ import annotations

import importlib

import pytest

from tests.spark.session import local_spark
from tests.spark.storegen import StoreWriter, sample_records


@pytest.fixture(scope="session")
def spark():
    """A local[2] session with the triomq source registered (UI off, bound to 127.0.0.1)."""
    with local_spark() as session:
        yield session


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
