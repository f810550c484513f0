"""Arrow arrays over the column buffers ``triomq.protocol.columns`` builds in C.

``record_columns`` reads every field of a run of records in one pass; this
module only wraps its buffers (no copy) as arrays of the data source's
types, in the schema's column order. It answers ``None`` whenever the C
pass does (no extension, or records it leaves to the Python decoder).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from triomq.protocol.columns import RecordColumns, VarColumn, record_columns

TIMESTAMP = pa.timestamp("us", tz="UTC")
PROPERTIES = pa.map_(pa.string(), pa.string())


def _var(column: VarColumn, typ: pa.DataType, count: int) -> pa.Array:
    validity = None if column.validity is None else pa.py_buffer(column.validity)
    return pa.Array.from_buffers(typ, count, [validity, pa.py_buffer(column.offsets),
                                              pa.py_buffer(column.data)])


def _fixed(values: memoryview, typ: pa.DataType, count: int,
           validity: memoryview | None = None) -> pa.Array:
    bitmap = None if validity is None else pa.py_buffer(validity)
    return pa.Array.from_buffers(typ, count, [bitmap, pa.py_buffer(values)])


def _arrays(c: RecordColumns) -> list[pa.Array]:
    n = c.count
    pairs = len(c.property_keys.offsets) // 4 - 1
    properties = pa.MapArray.from_arrays(
        _fixed(c.property_offsets, pa.int32(), n + 1),
        _var(c.property_keys, pa.string(), pairs),
        _var(c.property_values, pa.string(), pairs),
    )
    return [
        _fixed(c.physical_offset, pa.int64(), n),
        _fixed(c.size, pa.int32(), n),
        _var(c.topic, pa.string(), n),
        _fixed(c.queue_id, pa.int32(), n),
        _fixed(c.queue_offset, pa.int64(), n),
        _var(c.body, pa.binary(), n),
        _fixed(c.body_crc, pa.int32(), n),
        _var(c.tags, pa.string(), n),
        _var(c.keys, pa.string(), n),
        properties,
        _fixed(c.sys_flag, pa.int32(), n),
        _fixed(c.flag, pa.int32(), n),
        _fixed(c.reconsume_times, pa.int32(), n),
        _fixed(c.born_timestamp, TIMESTAMP, n, c.born_timestamp_validity),
        _fixed(c.store_timestamp, TIMESTAMP, n, c.store_timestamp_validity),
        _var(c.born_host, pa.string(), n),
        _var(c.store_host, pa.string(), n),
        _fixed(c.prepared_transaction_offset, pa.int64(), n),
    ]


def column_arrays(buf: bytes | memoryview, starts: Sequence[int] | pa.Array, end: int,
                  verify_crc: bool) -> list[pa.Array] | None:
    """Every column of the contiguous records at ``starts`` (ending at ``end``), or ``None``.

    ``starts`` are positions in ``buf``: ints, or an int32 Arrow array. The
    arrays follow ``arrow_decode.COLUMNS``' order and types.
    """
    if isinstance(starts, pa.Array):
        values = starts.buffers()[1]
        if values is None:
            return None
        starts = memoryview(values)[4 * starts.offset:4 * (starts.offset + len(starts))]
    columns = record_columns(buf, starts, end, verify_crc=verify_crc)
    return None if columns is None else _arrays(columns)
