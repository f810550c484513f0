"""Metadata tables of a store root, read as small DataFrames (option ``table``).

- ``epochs``: the epoch history from ``epochFileCheckpoint`` (RocketMQ's
  format, read by ``triomq.ha.checkpoint``): ``epoch``, ``startOffset``,
  ``endOffset``; the last, open epoch ends at the end of the log.
- ``status``: one row describing the log: ``minOffset``, ``maxOffset`` (end
  of the whole records), ``confirmOffset`` (null when none is recorded),
  ``segmentSize``, ``segments``, ``tail`` (``end``, ``zero``, ``torn`` or
  ``bad``) and ``tailReason``.

SyncStateSet and master history belong to the controller, whose state
lives in its Raft log, not in a broker's store root: ``controller_tables``
reads them from controllers' data directories.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pyspark.sql.datasource import DataSourceReader, InputPartition

from triomq.errors import TriomqError
from triomq.ha.checkpoint import load_epoch_checkpoint
from triomq.plugins.spark_export.errors import SparkExportError
from triomq.plugins.spark_export.options import ReadOptions
from triomq.plugins.spark_export.store_files import StoreFiles

SCHEMAS = {
    "epochs": "epoch int, startOffset long, endOffset long",
    "status": (
        "minOffset long, maxOffset long, confirmOffset long, segmentSize long, segments int, "
        "tail string, tailReason string"
    ),
}


def epochs(files: StoreFiles) -> list[tuple[int, int, int]]:
    """``(epoch, startOffset, endOffset)`` of every epoch, oldest first."""
    try:
        cache = load_epoch_checkpoint(files.root)
    except TriomqError as exc:
        raise SparkExportError(files.epoch_checkpoint_path, str(exc)) from None
    end = files.log_end().offset
    return [(e.epoch, e.start_offset, e.end_offset) for e in cache.entries(end_offset=end)]


def status(files: StoreFiles) -> tuple:
    """The ``status`` row of ``files``."""
    end = files.log_end()
    return (files.min_offset, end.offset, files.confirm_offset(), files.segment_size,
            len(files.segments), end.stop, end.reason)


def rows(opts: ReadOptions, files: StoreFiles) -> list[tuple]:
    """The rows of metadata table ``opts.table``."""
    if opts.table == "epochs":
        return epochs(files)
    return [status(files)]


class TableReader(DataSourceReader):
    """One partition holding rows computed while planning (store and controller tables)."""

    def __init__(self, table_rows: Sequence[tuple]) -> None:
        self.rows = list(table_rows)

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        return iter(self.rows)
