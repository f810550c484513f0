"""Planning a read: resolve the offset range, cut it into tasks, read a task.

The driver resolves ``[start, end)`` against the log (``resolve``) and cuts
it into ``ReadTask`` s (``plan_tasks``) of about equal size, each starting at
a record boundary. A task is a plain value: Spark pickles it to a worker,
which reads its byte range from the segment files (``read_task``).

A torn or corrupt tail is found while resolving: the read ends at the last
valid record and a warning on logger ``triomq.spark`` says where and why
(the ``status`` table shows it too). A bad record before the end of the log
makes the task fail with ``CorruptLogError``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import attrs
import pyarrow as pa

from triomq.plugins.spark_export.arrow_decode import Stop, decode_range
from triomq.plugins.spark_export.errors import CorruptLogError, SparkExportError
from triomq.plugins.spark_export.options import ReadOptions
from triomq.plugins.spark_export.plugin_store import read_plugin_range
from triomq.plugins.spark_export.store_files import (
    LogEnd,
    StoreFiles,
    iter_segment_ranges,
    map_range,
    walk_file,
)
from triomq.protocol.commitlog_layout import segment_name, segment_start

log = logging.getLogger("triomq.spark")


@attrs.frozen
class ReadTask:
    """Read the records in ``[lo, hi)`` that start at or after ``min_offset``.

    ``lo`` is a record boundary. The range may span segments: the files of
    ``commitlog_dir``, ``segment_size`` bytes of log each, or with ``scheme``
    the store at ``commitlog_dir`` that plugin reads (``plugin_store``).
    """

    commitlog_dir: str
    segment_size: int
    lo: int
    hi: int
    min_offset: int
    topics: frozenset[str] | None = None
    verify_crc: bool = True
    scheme: str | None = None


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
    """The tasks reading ``[start, end)``, in log order.

    The read is cut at record boundaries into ranges of about equal size, at
    most about ``maxBytesPerPartition`` each, as many as a multiple of
    ``parallelism``: with fewer or uneven tasks a slot would idle at the end
    of the query while another still reads. The records are found by their
    lengths alone (``walk_file``), from a known boundary, and only as far as
    the last cut; the tasks check every record.
    """
    ranges = list(iter_segment_ranges(files, start, end))
    total = sum(hi - lo for _, lo, hi in ranges)
    if not total:
        return []
    scheme = getattr(files, "scheme", None)
    if scheme is not None:
        # A plugin's store: one task per segment, read from its start (a record
        # boundary) unless ``start`` is known to be one.
        return [ReadTask(files.commitlog_dir, files.segment_size,
                         lo if start_is_boundary or lo == seg.start else seg.start, hi, start,
                         opts.topics, opts.verify_crc, scheme)
                for seg, lo, hi in ranges]
    slots = opts.parallelism
    count = slots * -(-total // (slots * opts.max_bytes_per_partition))
    step = -(-total // count)
    cuts: list[int] = []
    done = 0  # bytes of the ranges before this one
    missed = False
    for seg, lo, hi in ranges:
        # Cut targets are every ``step`` bytes of the read. The first task
        # starts at the first record; a target after a segment's last record
        # moves to the next segment's start, and the targets of that segment
        # stay where they are.
        if missed:  # ``lo`` is the segment's start: ranges after the first start there
            cuts.append(lo)
            missed = False
        first = done if not cuts else -(-done // step) * step
        if cuts and cuts[-1] == lo and first == done:
            first += step  # the segment's start answers that target already
        targets = len(range(first, done + hi - lo, step))
        at = lo + first - done
        done += hi - lo
        if not targets:
            continue
        if (start_is_boundary or lo == seg.start) and at == lo and targets == 1:
            cuts.append(lo)
            continue
        walk_from = lo if start_is_boundary or lo == seg.start else seg.start
        walked = walk_file(seg.path, walk_from - seg.start, hi - seg.start,
                           first_cut=at - seg.start, step=step, max_cuts=targets)
        cuts += [seg.start + cut for cut in walked.cuts]
        missed = len(walked.cuts) < targets
    if not cuts:  # no record starts in the read
        return []
    return [ReadTask(files.commitlog_dir, files.segment_size, a, b, start, opts.topics,
                     opts.verify_crc)
            for a, b in zip(cuts, [*cuts[1:], end], strict=True)]


def read_task(task: ReadTask) -> Iterator[pa.RecordBatch]:
    """The record batches of ``task``; ``CorruptLogError`` on a bad record inside it."""
    size = task.segment_size
    for seg_start in range(segment_start(task.lo, size), task.hi, size):
        lo, hi = max(task.lo, seg_start), min(task.hi, seg_start + size)
        if task.scheme is not None:
            path = task.commitlog_dir
            buf = memoryview(read_plugin_range(task.scheme, path, lo, hi))
        else:
            path = os.path.join(task.commitlog_dir, segment_name(seg_start))
            try:
                buf = map_range(path, lo - seg_start, hi - seg_start)
            except FileNotFoundError:
                raise SparkExportError(
                    path, "segment file is gone (deleted by retention since the read was "
                          "planned)"
                ) from None
        stop: list[Stop] = []
        yield from decode_range(buf, lo, min_offset=task.min_offset, max_end=hi,
                                topics=task.topics, verify_crc=task.verify_crc, stop=stop,
                                segment_size=size)
        if stop and stop[-1].kind == "bad":
            raise CorruptLogError(path, stop[-1].offset, stop[-1].reason or "bad record")
