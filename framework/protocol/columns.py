"""Every field of a run of commit-log records as Arrow-layout column buffers, in C.

A reader that hands records to a columnar engine (the Spark data source,
the Parquet export) needs each field as one column: fixed-width integers
as little-endian value buffers, strings and binaries as int32 offsets plus
data, nullable columns with a validity bitmap. ``record_columns`` builds
all of them in one pass over a run of contiguous records
(``framework/protocol/_columns.c``); the buffers are read-only
``memoryview`` objects, so wrapping them (``pyarrow.Array.from_buffers``) is
up to the caller and the framework needs no Arrow. Their memory is reused
for later runs once no view of it is left (up to 64 MiB is kept), which
spares the page faults fresh memory costs.

``record_starts`` serves the planner that cuts a log into such runs: it
hops from record to record by ``totalSize``, reading only the headers, and
says where the walk stopped; the readers check every record later.

The C pass takes only records of the plain shape: lengths that add up,
``MAGIC_V1``/``MAGIC_V2``, a matching body CRC (when asked), UTF-8 topic and
properties, properties that are empty or ``key\\x01value\\x02`` pairs each
ending in ``\\x02`` (never an empty pair), hosts other than IPv4-mapped IPv6
and timestamps whose microseconds fit in an int64 or are null. For anything
else, and when the extension is not built or ``TRIOMQ_NO_SPEEDUPS=1`` is
set, ``record_columns`` answers ``None``: the caller decodes in Python, which
accepts the record or names what is wrong with it.
"""

from __future__ import annotations

import array
import struct
from collections.abc import Sequence
from typing import Any

import attrs

from triomq.protocol.extensions import optional_extension
from triomq.protocol.message import MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE

_columns = optional_extension("_columns")  # None: callers decode in Python

#: Whether ``record_columns`` runs the C pass (else it always answers ``None``).
SPEEDUPS = _columns is not None

#: Positions are int32 (Arrow's offsets): a run must end below 2 GiB into its buffer.
MAX_RUN_END = 0x7FFFFFFF

_TOTAL_MAGIC = struct.Struct(">iI")


@attrs.frozen
class VarColumn:
    """A string or binary column: int32 ``offsets`` (one more than values) and ``data``.

    ``validity`` is the bitmap of non-null values, or ``None`` when none is null.
    """

    offsets: memoryview
    data: memoryview
    validity: memoryview | None = None


@attrs.frozen
class RecordColumns:
    """The columns of ``count`` records, in the records' order.

    Integer columns are int32/int64 value buffers in native byte order. Timestamps
    are int64 microseconds since the epoch, with a validity bitmap (or
    ``None``) for the milliseconds that have no such value. ``tags`` and
    ``keys`` are the first ``TAGS`` / ``KEYS`` property value (null if none);
    the properties are ``property_offsets`` (int32, ``count + 1``) into the
    pairs ``property_keys`` / ``property_values``, in the record's order,
    repeated names kept. Hosts are ``a.b.c.d:port`` or ``[v6]:port``.
    """

    count: int
    physical_offset: memoryview
    size: memoryview
    topic: VarColumn
    queue_id: memoryview
    queue_offset: memoryview
    body: VarColumn
    body_crc: memoryview
    tags: VarColumn
    keys: VarColumn
    property_offsets: memoryview
    property_keys: VarColumn
    property_values: VarColumn
    sys_flag: memoryview
    flag: memoryview
    reconsume_times: memoryview
    born_timestamp: memoryview
    born_timestamp_validity: memoryview | None
    store_timestamp: memoryview
    store_timestamp_validity: memoryview | None
    born_host: VarColumn
    store_host: VarColumn
    prepared_transaction_offset: memoryview


def record_columns(buf: bytes | bytearray | memoryview, starts: Sequence[int] | memoryview,
                   end: int, *, verify_crc: bool = True) -> RecordColumns | None:
    """The columns of the contiguous records of ``buf`` starting at ``starts``, or ``None``.

    ``starts`` are the records' positions in ``buf``, ascending: ints, or a
    buffer of native int32 values; the last record ends at ``end``. With
    ``verify_crc`` each body CRC is checked. ``None`` means "decode these
    records in Python" (see the module's docstring).
    """
    if _columns is None or not len(starts) or end > MAX_RUN_END:
        return None
    if not isinstance(starts, memoryview | bytes | bytearray | array.array):
        starts = array.array("i", starts)
    found = _columns.record_columns(buf, starts, end, verify_crc)
    if found is None:
        return None
    raw: list[Any] = [None if b is None else memoryview(b) for b in found]
    (phys, size, queue_id, queue_offset, crc, sys_flag, flag, reconsume, born_ts, store_ts,
     prepared, property_offsets, topic, topic_data, body, body_data, tags, tags_data, keys,
     keys_data, pkeys, pkeys_data, pvalues, pvalues_data, born_host, born_host_data,
     store_host, store_host_data, tags_valid, keys_valid, born_valid, store_valid) = raw
    return RecordColumns(
        count=len(size) // 4,
        physical_offset=phys,
        size=size,
        topic=VarColumn(topic, topic_data),
        queue_id=queue_id,
        queue_offset=queue_offset,
        body=VarColumn(body, body_data),
        body_crc=crc,
        tags=VarColumn(tags, tags_data, tags_valid),
        keys=VarColumn(keys, keys_data, keys_valid),
        property_offsets=property_offsets,
        property_keys=VarColumn(pkeys, pkeys_data),
        property_values=VarColumn(pvalues, pvalues_data),
        sys_flag=sys_flag,
        flag=flag,
        reconsume_times=reconsume,
        born_timestamp=born_ts,
        born_timestamp_validity=born_valid,
        store_timestamp=store_ts,
        store_timestamp_validity=store_valid,
        born_host=VarColumn(born_host, born_host_data),
        store_host=VarColumn(store_host, store_host_data),
        prepared_transaction_offset=prepared,
    )


@attrs.frozen
class RecordStarts:
    """Where a walk over record headers went (positions in the walked buffer).

    ``stop`` is where it stopped: at or past the end asked for, or at a header
    it did not take (zero fill, a blank, a torn or insane header: the caller
    looks). ``last`` is the start of the last record walked (``None``: none),
    ``cuts`` the starts of the records that begin pieces (see ``record_starts``).
    """

    stop: int
    last: int | None
    cuts: tuple[int, ...]


def record_starts(buf: bytes | bytearray | memoryview, pos: int, end: int, *,
                  first_cut: int | None = None, step: int | None = None) -> RecordStarts:
    """Hop from the record at ``pos`` (a record boundary) by ``totalSize``.

    A record is walked while it starts below ``end`` and its header is sane:
    ``MAGIC_V1``/``MAGIC_V2``, a ``totalSize`` of at least ``MIN_RECORD_SIZE``
    and the record inside ``buf``. Nothing else (CRC, fields) is checked.
    ``cuts`` are the first record at or after each point of the grid
    ``first_cut + k * step`` (``first_cut`` defaults to ``pos``; only the first
    point when ``step`` is ``None``), each record once; points before ``pos``
    (``first_cut`` may be negative) name the record at ``pos``. Runs in C when the
    extension is built.
    """
    if pos < 0 or (step is not None and step <= 0):
        raise ValueError(f"record_starts: pos {pos} and step {step} must be positive")
    first = pos if first_cut is None else first_cut
    # A point before pos names the record at pos, as the last such point does:
    # moving first there keeps "no step" one point (the next lies past buf) and
    # keeps C's sums in range.
    if step is None:
        first, every = max(first, pos), len(buf) + 1
    else:
        every = step
        if first < pos:
            first = pos - (pos - first) % step
    if _columns is not None:
        stop, last, cuts = _columns.record_starts(buf, pos, end, first, every)
        return RecordStarts(stop, None if last < 0 else last,
                            tuple(memoryview(cuts).cast("q")))
    return record_starts_py(buf, pos, end, first, every)


def record_starts_py(buf: bytes | bytearray | memoryview, pos: int, end: int, first_cut: int,
                     step: int) -> RecordStarts:
    """``record_starts`` in pure Python: the reference for the C version."""
    size = len(buf)
    end = min(end, size)
    last, cuts, next_cut = None, [], first_cut
    while pos < end and pos + 8 <= size:
        total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
        if magic not in (MAGIC_V1, MAGIC_V2) or total < MIN_RECORD_SIZE or total > size - pos:
            break
        if pos >= next_cut:
            cuts.append(pos)
            next_cut += ((pos - next_cut) // step + 1) * step
        last = pos
        pos += total
    return RecordStarts(pos, last, tuple(cuts))
