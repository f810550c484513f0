"""Planning a read: resolve the offset range, cut it into tasks, read a task.

The driver resolves ``[start, end)`` against the log (``resolve``) and cuts
it into ``ReadTask`` s (``plan_tasks``): one per segment, or several when a
segment's range is larger than ``maxBytesPerPartition``, each starting at a
record boundary. A task is a plain value: Spark pickles it to a worker,
which reads its byte range from the segment file (``read_task``).

A torn or corrupt tail is found while resolving: the read ends at the last
valid record and a warning on logger ``triomq.spark`` says where and why
(the ``status`` table shows it too). A bad record before the end of the log
makes the task fail with ``CorruptLogError``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import attrs
import pyarrow as pa

from plugins.spark_export.arrow_decode import Stop, decode_range
from plugins.spark_export.errors import CorruptLogError, SparkExportError
from plugins.spark_export.options import ReadOptions
from plugins.spark_export.store_files import LogEnd, StoreFiles, iter_segment_ranges, read_range

log = logging.getLogger("triomq.spark")


@attrs.frozen
class ReadTask:
    """Read the records of ``path`` in ``[lo, hi)`` that start at or after ``min_offset``.

    ``lo`` is a record boundary; ``segment_start`` is the segment's first offset
    and ``segment_size`` the log's segment size (``None``: unknown, which
    skips the C walk of ``record_index``).
    """

    path: str
    segment_start: int
    lo: int
    hi: int
    min_offset: int
    topics: frozenset[str] | None = None
    verify_crc: bool = True
    segment_size: int | None = None


@attrs.frozen
class Bounds:
    """A resolved read: records wholly inside ``[start, end)`` (``end`` is a record
    boundary); ``log_end`` and ``confirm_offset`` as found on disk."""

    start: int
    end: int
    log_end: LogEnd
    confirm_offset: int | None


def warn_tail(files: StoreFiles, end: LogEnd) -> None:
    """Log where a torn or corrupt tail cuts the readable log."""
    if not end.clean:
        log.warning(
            "%s: %s tail at offset %d%s; reading stops at the last valid record before it",
            files.commitlog_dir, end.stop, end.offset, f" ({end.reason})" if end.reason else "",
        )


def available_end(files: StoreFiles, end: LogEnd, committed_only: bool) -> tuple[int, int | None]:
    """The end a reader may reach and the confirm offset on disk.

    With ``committed_only`` the end is capped at the confirm offset; a store
    with no confirm offset recorded is an error naming ``committedOnly``.
    """
    confirm = files.confirm_offset()
    if not committed_only:
        return end.offset, confirm
    if confirm is None:
        raise SparkExportError(
            "committedOnly",
            f"{files.root} has no confirm offset (no 'checkpoint' file with confirmPhyOffset)",
        )
    return min(end.offset, max(confirm, files.min_offset)), confirm


def resolve(files: StoreFiles, opts: ReadOptions) -> Bounds:
    """Resolve ``opts``' offsets against the log; errors name the option at fault."""
    end = files.log_end()
    warn_tail(files, end)
    available, confirm = available_end(files, end, opts.committed_only)
    first = files.min_offset
    start = opts.starting_offset
    if start == "earliest":
        start = first
    elif start == "latest":
        start = available
    elif not first <= start <= end.offset:
        raise SparkExportError(
            "startingOffset", f"{start} is outside the log [{first}, {end.offset}] of {files.root}"
        )
    stop = opts.ending_offset
    if stop == "latest":
        stop = available
    elif not start <= stop <= end.offset:
        raise SparkExportError(
            "endingOffset",
            f"{stop} is outside [{start}, {end.offset}] (startingOffset to the log end "
            f"of {files.root})",
        )
    stop = min(stop, available)
    if stop < end.offset:
        stop = files.boundary_at_or_below(stop)
    return Bounds(start, max(start, stop), end, confirm)


def plan_tasks(files: StoreFiles, start: int, end: int, opts: ReadOptions, *,
               start_is_boundary: bool = False) -> list[ReadTask]:
    """The tasks reading ``[start, end)``, in log order."""
    tasks = []
    for seg, lo, hi in iter_segment_ranges(files, start, end):
        known = start_is_boundary or lo == seg.start
        for a, b in files.pieces(seg, lo, hi, opts.max_bytes_per_partition, lo_is_boundary=known):
            tasks.append(ReadTask(seg.path, seg.start, a, b, start, opts.topics, opts.verify_crc,
                                  files.segment_size))
    return tasks


def read_task(task: ReadTask) -> Iterator[pa.RecordBatch]:
    """The record batches of ``task``; ``CorruptLogError`` on a bad record inside it."""
    try:
        buf = read_range(task.path, task.lo - task.segment_start, task.hi - task.segment_start)
    except FileNotFoundError:
        raise SparkExportError(
            task.path, "segment file is gone (deleted by retention since the read was planned)"
        ) from None
    stop: list[Stop] = []
    yield from decode_range(buf, task.lo, min_offset=task.min_offset, max_end=task.hi,
                            topics=task.topics, verify_crc=task.verify_crc, stop=stop,
                            segment_size=task.segment_size)
    if stop and stop[-1].kind == "bad":
        raise CorruptLogError(task.path, stop[-1].offset, stop[-1].reason or "bad record")
