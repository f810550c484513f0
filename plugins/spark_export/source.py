"""The ``triomq`` PySpark data source: batch, streaming and metadata tables.

::

    from triomq.plugins.spark_export import register
    register(spark)
    df = spark.read.format("triomq").option("topics", "orders").load("/data/broker-a")

Options are checked (``options.parse_options``) and offsets resolved
against the store's files in ``schema()`` / ``reader()`` / ``streamReader()``,
that is while Spark analyses the query, so a bad path, option or offset
fails before any job starts with an error naming it.

Streaming offsets follow Kafka's next-offset convention: a JSON object
mapping the store root to the physical offset of the next record to read,
e.g. ``{"/data/broker-a": 1048576}``. ``latestOffset`` is the end of the
whole records on disk, or the confirm offset (rounded down to a record
boundary) with ``committedOnly``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from triomq.plugins.spark_export import FORMAT, metadata
from triomq.plugins.spark_export.arrow_decode import SCHEMA_DDL
from triomq.plugins.spark_export.errors import SparkExportError
from triomq.plugins.spark_export.options import CONTROLLER_TABLES, ReadOptions, parse_options
from triomq.plugins.spark_export.plan import (
    ReadTask,
    available_end,
    plan_tasks,
    read_task,
    resolve,
    warn_tail,
)
from triomq.plugins.spark_export.store_files import StoreFiles

try:  # Spark >= 4.2: pin the end of an availableNow query when it starts.
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older Spark wraps the source itself
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]


class TriomqDataSource(DataSource):
    """Messages of a triomq/RocketMQ store root as rows, its metadata tables, and the
    controller tables of controllers' data directories; see ``options`` for the options."""

    #: The ``parallelism`` option's default (``data_source_class`` sets it).
    default_parallelism = 1

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _options(self, *, streaming: bool = False) -> ReadOptions:
        return parse_options(self.options, streaming=streaming,
                             default_parallelism=self.default_parallelism)

    def schema(self) -> str:
        opts = self._options()
        if opts.table in CONTROLLER_TABLES:
            # Imported when used: message reads (every Spark worker) need none of
            # the Raft and controller modules it loads.
            from triomq.plugins.spark_export import controller_tables

            controller_tables.controller_dirs(opts.paths)
            return controller_tables.SCHEMAS[opts.table]
        StoreFiles.open(opts.path)
        return metadata.SCHEMAS.get(opts.table, SCHEMA_DDL)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = self._options()
        if opts.table in CONTROLLER_TABLES:
            from triomq.plugins.spark_export import controller_tables

            found = controller_tables.history(opts.paths)
            return metadata.TableReader(controller_tables.rows(opts.table, found))
        files = StoreFiles.open(opts.path)
        if opts.table != "messages":
            return metadata.TableReader(metadata.rows(opts, files))
        bounds = resolve(files, opts)
        return MessagesReader(plan_tasks(files, bounds.start, bounds.end, opts))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = self._options(streaming=True)
        files = StoreFiles.open(opts.path)
        return MessagesStreamReader(opts, files)


def data_source_class(parallelism: int) -> type[TriomqDataSource]:
    """``TriomqDataSource`` with ``parallelism`` as the option's default.

    A session registers a class, not an instance, and its Python workers
    cannot ask the session how many tasks it runs at once: the default
    travels in the class, which Spark pickles by value.
    """
    if parallelism == TriomqDataSource.default_parallelism:
        return TriomqDataSource
    return type("TriomqDataSource", (TriomqDataSource,), {
        "default_parallelism": parallelism,
        "__doc__": TriomqDataSource.__doc__,
        "__qualname__": f"data_source_class.<locals>.TriomqDataSource[{parallelism}]",
    })


class MessagesReader(DataSourceReader):
    """Reads planned tasks; each is one Spark partition returning Arrow batches."""

    def __init__(self, tasks: list[ReadTask]) -> None:
        self.tasks = tasks

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(task) for task in self.tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(partition.value)


class MessagesStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over a growing log, from the next physical offset onwards."""

    def __init__(self, opts: ReadOptions, files: StoreFiles) -> None:
        self.opts = opts
        self.files = files
        self.key = files.root
        # The last walk of the log: a record boundary and how the log ended there.
        self._walked = files.log_end()
        self._last_end = files.min_offset
        self._pinned: int | None = None
        first = files.min_offset
        start = opts.starting_offset
        if start == "earliest":
            start = first
        elif start == "latest":
            start = self._available()
        elif not first <= start <= self._walked.offset or not self._is_boundary(start):
            raise SparkExportError(
                "startingOffset",
                f"{start} is not a record boundary inside [{first}, {self._walked.offset}] "
                f"of {files.root}",
            )
        self._initial = start

    def _is_boundary(self, offset: int) -> bool:
        seg = self.files.segment_at(offset)
        if seg is None or offset == seg.start or offset == self._walked.offset:
            return True
        return self.files.boundary_at_or_below(offset) == offset

    def _available(self) -> int:
        self.files.refresh()
        previous = self._walked.offset
        self._walked = self.files.log_end(max(previous, self.files.min_offset))
        if self._walked.offset != previous:
            warn_tail(self.files, self._walked)
        end, _ = available_end(self.files, self._walked, self.opts.committed_only)
        if end < self._walked.offset:
            end = self.files.boundary_at_or_below(end, hint=self._last_end)
        self._last_end = end
        return end

    def _offset(self, offsets: dict[str, Any]) -> int:
        if set(offsets) != {self.key}:
            raise SparkExportError(
                "path", f"the query's checkpoint has offsets for {sorted(offsets)}, "
                f"this source reads {self.key}"
            )
        return int(offsets[self.key])

    def initialOffset(self) -> dict[str, int]:
        return {self.key: self._initial}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict[str, int]:
        end = self._available()
        if self._pinned is not None:
            end = min(end, self._pinned)
        if start is not None:
            end = max(end, self._offset(start))
        return {self.key: end}

    def prepareForTriggerAvailableNow(self) -> None:
        self._pinned = self._available()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo, hi = self._offset(start), self._offset(end)
        self.files.refresh()
        if lo < self.files.min_offset:
            raise SparkExportError(
                self.key, f"offsets [{lo}, {self.files.min_offset}) were deleted (retention) "
                "before this stream read them"
            )
        tasks = plan_tasks(self.files, lo, hi, self.opts, start_is_boundary=True)
        return [InputPartition(task) for task in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(partition.value)

    def commit(self, end: dict) -> None:
        """Nothing to release: the log is read in place."""
