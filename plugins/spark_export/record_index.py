"""Where the records of a byte range start, found and checked in C, as Arrow arrays.

Walking record lengths one by one in Python costs more than decoding the
records with Arrow kernels. ``triomq.protocol.commitlog_layout.index_records``
walks a range in C and checks every record on the way (lengths, magic, body
CRC, the physical offset each record carries, UTF-8 topic and properties);
its answer, consume-queue entries ``(physicalOffset, size, tagsCode)`` in runs
per queue, gives every record's offset and size. ``checked_records`` turns
them into ascending Arrow arrays.

It answers ``None`` whenever the C walk does not apply (no C extension, a
record it rejects, a torn end): the caller then walks in Python, which
names the bad record and keeps its own rules about where a walk ends.
"""

from __future__ import annotations

import array

import attrs
import pyarrow as pa
import pyarrow.compute as pc

from triomq.protocol.commitlog_layout import SPEEDUPS, index_records

_ENTRY = 20  # a consume-queue entry: physicalOffset int64, size int32, tagsCode int64


@attrs.frozen
class CheckedRecords:
    """Records found in a range: ascending ``offsets`` (int64) and their ``sizes`` (int32).

    ``end`` is where the walk stopped: the end of the range (``stop`` ``"end"``,
    past a segment's blank if there is one) or zero fill (``"zero"``).
    """

    offsets: pa.Array
    sizes: pa.Array
    end: int
    stop: str


def _field(entries: pa.Array, at: int, code: str, typ: pa.DataType) -> pa.Array:
    """One big-endian integer field of every packed entry."""
    raw = pc.binary_slice(entries, at, at + typ.bit_width // 8)
    values = array.array(code)
    values.frombytes(raw.buffers()[1])
    values.byteswap()
    return pa.Array.from_buffers(typ, len(entries), [None, pa.py_buffer(values)])


def checked_records(buf: bytes | memoryview, base_offset: int, segment_size: int
                    ) -> CheckedRecords | None:
    """The records of ``buf`` (physical offset ``base_offset``, a record boundary), or ``None``.

    ``None`` means "walk in Python": no C extension, a record the C walk
    rejects, or a walk that ends torn.
    """
    if not SPEEDUPS:
        return None
    found = index_records(buf, base_offset, segment_size)
    if found is None:
        return None
    end, stop, runs = found
    if stop not in ("end", "zero"):
        return None
    packed = b"".join(run[3] for run in runs)
    entries = pa.Array.from_buffers(pa.binary(_ENTRY), len(packed) // _ENTRY,
                                    [None, pa.py_buffer(packed)])
    offsets = _field(entries, 0, "q", pa.int64())
    sizes = _field(entries, 8, "i", pa.int32())
    if len(runs) > 1:  # runs are per queue: restore log order
        order = pc.sort_indices(offsets)
        offsets, sizes = offsets.take(order), sizes.take(order)
    return CheckedRecords(offsets, sizes, end, stop)
