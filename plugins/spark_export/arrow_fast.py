"""Columns of a run of contiguous records computed with Arrow kernels, not per record.

The run's records are consecutive in the buffer, so the buffer itself is an
Arrow binary array whose values are the records (zero copy: the offsets
are the record starts). Fixed-position fields are cut out of every record
at once (``binary_slice``), turned little-endian (``binary_reverse``) and
reinterpreted as integers; the variable part (body, topic, properties) is
cut by building binary arrays over the same bytes whose offsets alternate
between field starts and ends, then taking every k-th value.

This covers the common shape: ``MAGIC_V1`` records with IPv4 hosts. For
anything else, or when any length in the run does not add up, or a body
CRC does not match, ``fast_batch`` returns ``None`` and the caller decodes
the run record by record, which finds and names the bad record.
"""

from __future__ import annotations

import functools
import ipaddress
import zlib

import pyarrow as pa
import pyarrow.compute as pc

from triomq.protocol.message import BORNHOST_V6, MAGIC_V1, STOREHOST_V6

# Field positions of a MAGIC_V1 record with IPv4 hosts.
_CRC, _QUEUE_ID, _FLAG, _QUEUE_OFFSET, _PHYS, _SYSFLAG = 8, 12, 16, 20, 28, 36
_BORN_TS, _BORN_HOST, _STORE_TS, _STORE_HOST = 40, 48, 56, 64
_RECONSUME, _PREPARED, _BODY_LEN, _BODY = 72, 76, 84, 88
_MAGIC = 4
_CRC_MASK = 0x7FFFFFFF
_MAX_BUFFER = 0x7FFFFFFF  # int32 Arrow offsets


@functools.lru_cache(maxsize=16)
def _interleave(n: int, k: int) -> pa.Array:
    """Take-indices turning k arrays of n values, concatenated, into i-major order."""
    return pa.array([i + j * n for i in range(n) for j in range(k)], pa.int32())


@functools.lru_cache(maxsize=32)
def _every(n: int, k: int, j: int) -> pa.Array:
    """Indices j, j + k, j + 2k, ... (n of them)."""
    return pa.array(range(j, n * k, k), pa.int32())


def _int_field(recs: pa.Array, at: int, typ: pa.DataType) -> pa.Array:
    width = typ.bit_width // 8
    little = pc.binary_reverse(pc.binary_slice(recs, at, at + width))
    return pa.Array.from_buffers(typ, len(recs), [None, little.buffers()[2]])


def _binary(offsets: pa.Array, data: pa.Buffer) -> pa.Array:
    return pa.Array.from_buffers(pa.binary(), len(offsets) - 1, [None, offsets.buffers()[1], data])


def _interleaved(parts: list[pa.Array], end: int) -> pa.Array:
    n = len(parts[0])
    merged = pa.concat_arrays([p.cast(pa.int32()) for p in parts])
    return pa.concat_arrays([merged.take(_interleave(n, len(parts))), pa.array([end], pa.int32())])


def _host(packed: bytes) -> str:
    ip = ipaddress.IPv4Address(packed[:4])
    return f"{ip}:{int.from_bytes(packed[4:], 'big', signed=True)}"


def _hosts(recs: pa.Array, at: int) -> pa.Array:
    encoded = pc.binary_slice(recs, at, at + 8).dictionary_encode()
    names = pa.array([_host(v) for v in encoded.dictionary.to_pylist()], pa.string())
    return names.take(encoded.indices)


def fast_columns(buf: bytes, starts: list[int] | pa.Array, end: int, verify_crc: bool
                 ) -> dict[str, pa.Array] | None:
    """The raw columns of the records starting at ``starts`` (contiguous, ending at ``end``).

    ``starts`` are positions in ``buf``: a list, or an int32 Arrow array.

    Returns ``None`` when the run is not all V1/IPv4 records or does not check
    out; ``properties`` is the raw property bytes (a binary array).
    """
    n = len(starts)
    if not n or end > _MAX_BUFFER:
        return None
    data = pa.py_buffer(buf)
    starts_arr = starts if isinstance(starts, pa.Array) else pa.array(starts, pa.int32())
    recs = _binary(pa.concat_arrays([starts_arr, pa.array([end], pa.int32())]), data)
    magic = _int_field(recs, _MAGIC, pa.uint32())
    sys_flag = _int_field(recs, _SYSFLAG, pa.int32())
    v6 = pc.bit_wise_and(sys_flag, pa.scalar(BORNHOST_V6 | STOREHOST_V6, pa.int32()))
    if not (pc.all(pc.equal(magic, pa.scalar(MAGIC_V1, pa.uint32()))).as_py()
            and pc.all(pc.equal(v6, 0)).as_py()):
        return None
    size = pc.binary_length(recs)
    body_len = _int_field(recs, _BODY_LEN, pa.int32())
    # body, then the rest (topic length, topic, properties length, properties)
    if not pc.all(pc.and_(pc.greater_equal(body_len, 0),
                          pc.less_equal(body_len, pc.subtract(size, _BODY + 3)))).as_py():
        return None
    body_at = pc.add(starts_arr, _BODY)
    body_end = pc.add(body_at, body_len)
    pieces = _binary(_interleaved([starts_arr, body_at, body_end], end), data)
    body = pieces.take(_every(n, 3, 1))
    rest = pieces.take(_every(n, 3, 2))
    rest_len = pc.binary_length(rest)
    topic_len = pc.binary_slice(rest, 0, 1)
    topic_len = pa.Array.from_buffers(pa.uint8(), n, [None, topic_len.buffers()[2]]).cast(
        pa.int32())
    if not pc.all(pc.less_equal(pc.add(topic_len, 3), rest_len)).as_py():
        return None
    rest_bounds = pa.Array.from_buffers(pa.int32(), n + 1, [None, rest.buffers()[1]])
    rest_at, rest_end = rest_bounds.slice(0, n), rest_bounds[n].as_py()
    topic_at = pc.add(rest_at, 1)
    topic_end = pc.add(topic_at, topic_len)
    parts = _binary(
        _interleaved([rest_at, topic_at, topic_end, pc.add(topic_end, 2)], rest_end),
        rest.buffers()[2],
    )
    props = parts.take(_every(n, 4, 3))
    props_len_raw = pc.binary_reverse(parts.take(_every(n, 4, 2)))
    props_len = pa.Array.from_buffers(pa.uint16(), n, [None, props_len_raw.buffers()[2]])
    if not pc.all(pc.equal(props_len.cast(pa.int32()), pc.binary_length(props))).as_py():
        return None
    crc = _int_field(recs, _CRC, pa.int32())
    if verify_crc and not _crcs_match(body, crc):
        return None
    return {
        "physicalOffset": _int_field(recs, _PHYS, pa.int64()),
        "size": size,
        "topic": parts.take(_every(n, 4, 1)),
        "queueId": _int_field(recs, _QUEUE_ID, pa.int32()),
        "queueOffset": _int_field(recs, _QUEUE_OFFSET, pa.int64()),
        "body": body,
        "bodyCRC": crc,
        "properties": props,
        "sysFlag": sys_flag,
        "flag": _int_field(recs, _FLAG, pa.int32()),
        "reconsumeTimes": _int_field(recs, _RECONSUME, pa.int32()),
        "bornTimestamp": _int_field(recs, _BORN_TS, pa.int64()),
        "storeTimestamp": _int_field(recs, _STORE_TS, pa.int64()),
        "bornHost": _hosts(recs, _BORN_HOST),
        "storeHost": _hosts(recs, _STORE_HOST),
        "preparedTransactionOffset": _int_field(recs, _PREPARED, pa.int64()),
    }


def _crcs_match(body: pa.Array, stored: pa.Array) -> bool:
    offsets = memoryview(body.buffers()[1]).cast("i")
    data = memoryview(body.buffers()[2] or b"")
    crc32 = zlib.crc32
    computed = [crc32(data[offsets[i]:offsets[i + 1]]) & _CRC_MASK for i in range(len(body))]
    return pc.all(pc.equal(pa.array(computed, pa.int32()), stored)).as_py()
