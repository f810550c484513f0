"""Export a store's messages to Parquet, partitioned by topic, resumably.

Layout of ``OUT_DIR`` (Hive-style, what ``spark.read.parquet(OUT_DIR)`` reads)::

    topic=<percent-encoded topic>/part-<20-digit offset>.parquet
    _triomq_export.json          the export's state

Each Parquet file holds the data source's columns except ``topic`` (the
partition column): signed integers, microsecond UTC timestamps,
``map<string,string>`` properties. The log is exported chunk by chunk (the
data source's tasks, in log order); a chunk's files are renamed into place,
then the state records the next offset to export, so a second run resumes
there. A chunk redone after a crash gets the same file names (its first
offset) and replaces what the crashed run left.
"""

from __future__ import annotations

import json
import os
import urllib.parse

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from triomq.plugins.spark_export.arrow_decode import ARROW_SCHEMA
from triomq.plugins.spark_export.errors import SparkExportError
from triomq.plugins.spark_export.options import ReadOptions
from triomq.plugins.spark_export.plan import plan_tasks, read_task, resolve
from triomq.plugins.spark_export.progress import Progress
from triomq.plugins.spark_export.store_files import StoreFiles

STATE_FILE = "_triomq_export.json"
FILE_SCHEMA = pa.schema([f for f in ARROW_SCHEMA if f.name != "topic"])


@attrs.frozen
class ExportState:
    """What an export has done: ``store`` root, ``topics`` filter, ``next_offset``
    (the physical offset the next run starts at)."""

    store: str
    topics: tuple[str, ...] | None
    next_offset: int

    @classmethod
    def load(cls, out_dir: str) -> ExportState | None:
        """The state saved in ``out_dir``, ``None`` for a fresh export."""
        path = os.path.join(out_dir, STATE_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            topics = doc["topics"]
            return cls(doc["store"], None if topics is None else tuple(topics),
                       int(doc["next_offset"]))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise SparkExportError(path, f"is not an export state file: {exc!r}") from None

    def save(self, out_dir: str) -> None:
        """Replace the state file atomically."""
        path = os.path.join(out_dir, STATE_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(attrs.asdict(self), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


@attrs.frozen
class ExportResult:
    """What one run exported: ``[start, end)``, rows and files written (``None``:
    not counted, for a Spark job)."""

    start: int
    end: int
    rows: int | None
    files: int | None


def topic_dir(out_dir: str, topic: str) -> str:
    """The partition directory of ``topic`` (Spark decodes the percent-encoding)."""
    return os.path.join(out_dir, "topic=" + urllib.parse.quote(topic, safe=""))


def resume_options(opts: ReadOptions, out_dir: str) -> tuple[ReadOptions, ExportState | None]:
    """``opts`` with the starting offset of a previous export of ``out_dir``, if any.

    A previous export of another store or other topics, or an explicit
    starting offset that disagrees with it, is an error naming the option.
    """
    state = ExportState.load(out_dir)
    if state is None:
        return opts, None
    root = os.path.abspath(opts.path)
    topics = None if opts.topics is None else tuple(sorted(opts.topics))
    if state.store != root:
        raise SparkExportError(out_dir, f"holds an export of {state.store}, not of {root}")
    if state.topics != topics:
        raise SparkExportError("--topics", f"{out_dir} holds an export of topics {state.topics}")
    if opts.starting_offset not in ("earliest", state.next_offset):
        raise SparkExportError(
            "--from", f"{out_dir} is exported up to {state.next_offset}; omit --from to resume"
        )
    return attrs.evolve(opts, starting_offset=state.next_offset), state


def export_parquet(opts: ReadOptions, out_dir: str,
                   progress: Progress | None = None) -> ExportResult:
    """Export the records ``opts`` selects to ``out_dir`` with pyarrow.

    ``progress(done_bytes, total_bytes, messages)`` is called as batches are read.
    """
    opts, state = resume_options(opts, out_dir)
    files = StoreFiles.open(opts.path)
    bounds = resolve(files, opts)
    os.makedirs(out_dir, exist_ok=True)
    tasks = plan_tasks(files, bounds.start, bounds.end, opts,
                       start_is_boundary=state is not None)
    topics = None if opts.topics is None else tuple(sorted(opts.topics))
    rows = written = 0
    total = bounds.end - bounds.start
    for task in tasks:
        batches = []
        read = rows
        for batch in read_task(task):
            batches.append(batch)
            read += batch.num_rows
            if progress is not None and batch.num_rows:
                last = batch.column("physicalOffset")[-1].as_py()
                progress(min(max(last - bounds.start, 0), total), total, read)
        table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
        written += _write_chunk(table, out_dir, task.lo)
        rows += table.num_rows
        ExportState(files.root, topics, task.hi).save(out_dir)
        if progress is not None:
            progress(task.hi - bounds.start, total, rows)
    if not tasks:
        ExportState(files.root, topics, bounds.end).save(out_dir)
    return ExportResult(bounds.start, bounds.end, rows, written)


def _write_chunk(table: pa.Table, out_dir: str, first_offset: int) -> int:
    if not table.num_rows:
        return 0
    count = 0
    for topic in pc.unique(table["topic"]).to_pylist():
        part = table.filter(pc.equal(table["topic"], topic)).drop_columns(["topic"])
        directory = topic_dir(out_dir, topic)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"part-{first_offset:020d}.parquet")
        tmp = path + ".tmp"
        pq.write_table(part.cast(FILE_SCHEMA), tmp, coerce_timestamps="us")
        os.replace(tmp, path)
        count += 1
    return count
