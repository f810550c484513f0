"""Which Python runs the ``triomq`` data source in Spark's Python workers.

A session started from a script run by a virtual environment's Python
(not activated) gives its workers ``python3`` from ``PATH``, which may not
have triomq: every read would fail in a worker with ``ModuleNotFoundError``.
``register`` settles the interpreter first, as PySpark does, from
``PYSPARK_PYTHON``, then ``spark.pyspark.python``, else ``python3``:

- set, or any master but a local one (the executors' interpreters cannot be
  tried from here): used as it is, but on a local master one that cannot
  import triomq fails at once with ``SparkExportError`` saying what to set;
- unset, on a local master, with a ``python3`` that cannot import triomq:
  the source runs in this interpreter (``sys.executable``), which can.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from triomq.plugins.spark_export.errors import SparkExportError

#: What a worker imports to read a store (pyspark itself comes from Spark).
_PROBE = "import triomq.plugins.spark_export.arrow_decode"


def can_import_triomq(python: str) -> bool:
    """Whether ``python`` (a path or a command on ``PATH``) imports what a worker needs."""
    try:
        done = subprocess.run([python, "-c", _PROBE], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def worker_python(spark_context: Any, conf_python: str | None) -> str:
    """The interpreter the data source's workers must run (see the module's doc)."""
    chosen = os.environ.get("PYSPARK_PYTHON") or conf_python
    local = str(spark_context.master).startswith("local")
    if chosen is None:
        default = spark_context.pythonExec
        if not local or can_import_triomq(default):
            return default
        return sys.executable
    if local and not can_import_triomq(chosen):
        setting = "PYSPARK_PYTHON" if os.environ.get("PYSPARK_PYTHON") else \
            "spark.pyspark.python"
        raise SparkExportError(
            setting, f"Spark's Python workers would run {chosen!r}, which cannot import "
                     f"triomq: set {setting} to a Python that has triomq installed "
                     f"(this one is {sys.executable})")
    return chosen
