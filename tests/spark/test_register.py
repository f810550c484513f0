"""``register(spark)`` settles which Python runs the source's workers, up front.

A script run by the virtual environment's Python, not activated, starts
Spark workers with ``python3`` from ``PATH``; here that is a Python that
cannot import triomq (this interpreter without its site-packages).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from triomq.plugins.spark_export import register
from triomq.plugins.spark_export.errors import SparkExportError

pytestmark = pytest.mark.spark

SCRIPT = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    from triomq.plugin_manager import PluginManager
    from triomq.plugins.spark_export import register
    from triomq.testing.store_suite import make_record

    root = sys.argv[1]
    with PluginManager.discover().log_store("commitlog", "mmap")(root, {}) as log:
        log.append_batch([make_record(i) for i in range(10)])
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    try:
        register(spark)
        print("messages:", spark.read.format("triomq").load(root).count())
    finally:
        spark.stop()
""")


@pytest.fixture
def path_without_triomq(tmp_path) -> str:
    """A ``bin`` directory whose ``python3`` cannot import triomq."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python3"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    assert subprocess.run([str(python), "-c", "import triomq"],
                          capture_output=True, check=False).returncode != 0
    return str(bin_dir)


def run_script(tmp_path, path_dir: str, **env: str) -> subprocess.CompletedProcess:
    script = tmp_path / "read_store.py"
    script.write_text(SCRIPT)
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV",
                          "PYTHONPATH")}
    clean["PATH"] = path_dir + os.pathsep + clean.get("PATH", "")
    return subprocess.run([sys.executable, str(script), str(tmp_path / "store")],
                          env={**clean, **env}, capture_output=True, text=True, timeout=600,
                          check=False)


def test_a_script_of_the_venv_reads_without_it_activated(tmp_path, path_without_triomq):
    done = run_script(tmp_path, path_without_triomq)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "messages: 10" in done.stdout


def test_a_worker_python_without_triomq_fails_at_register(tmp_path, path_without_triomq):
    python = os.path.join(path_without_triomq, "python3")
    done = run_script(tmp_path, path_without_triomq, PYSPARK_PYTHON=python)
    assert done.returncode != 0
    assert (f"PYSPARK_PYTHON: Spark's Python workers would run {python!r}, which cannot "
            f"import triomq: set PYSPARK_PYTHON to a Python that has triomq installed"
            in done.stderr)
    assert "messages:" not in done.stdout and "ModuleNotFoundError" not in done.stderr


def test_register_in_a_session_names_what_to_set(spark, path_without_triomq, monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", os.path.join(path_without_triomq, "python3"))
    before = spark.sparkContext.pythonExec
    with pytest.raises(SparkExportError, match="set PYSPARK_PYTHON to a Python that has "
                                               "triomq installed"):
        register(spark)
    assert spark.sparkContext.pythonExec == before
