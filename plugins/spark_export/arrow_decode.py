"""Commit-log bytes to Arrow record batches: the Spark reader's fast path.

``decode_range`` finds the records of a byte range (with the log's segment
size: checked in C by ``record_index``; else by walking the record lengths
in Python) and decodes them in runs of up to ``batch_rows``: first every
column at once in C (``arrow_columns``, over ``triomq.protocol.columns``),
and when that does not apply (odd property strings, no C extension), with
Arrow kernels over the whole run (``arrow_fast``), and when that does not
apply either (IPv6 hosts, long topics) or the run does not check out, record
by record, with
``triomq.protocol.message.check`` validating each (lengths, magic, body
CRC) and the fields read straight into column lists. Either way no
``MessageRecord`` is built per message. Properties are split into the
``map<string,string>`` column with Arrow kernels (``message``'s parser is the
fallback for odd property strings), and ``tags`` / ``keys`` are taken from
the same split pairs (the first ``TAGS`` / ``KEYS`` pair of each record).

The column names and types are the data source's schema (``SCHEMA_DDL``)
and the Parquet export's (``ARROW_SCHEMA``); timestamps are microseconds
in UTC, integers are signed, as Spark reads them.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
from collections.abc import Iterator

import attrs
import pyarrow as pa
import pyarrow.compute as pc

from triomq.plugins.spark_export.arrow_columns import PROPERTIES, TIMESTAMP, column_arrays
from triomq.plugins.spark_export.arrow_fast import fast_columns
from triomq.plugins.spark_export.record_index import CheckedRecords, checked_records
from triomq.protocol.inflate import DEFAULT_MAX_BODY_SIZE, producer_body
from triomq.protocol.message import (
    BLANK_MAGIC,
    BORNHOST_V6,
    COMPRESSED,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    STOREHOST_V6,
    RecordError,
    check,
    properties_from_bytes,
)

#: (name, Arrow type, Spark type) of every column, in order.
COLUMNS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("physicalOffset", pa.int64(), "long"),
    ("size", pa.int32(), "int"),
    ("topic", pa.string(), "string"),
    ("queueId", pa.int32(), "int"),
    ("queueOffset", pa.int64(), "long"),
    ("body", pa.binary(), "binary"),
    ("bodyCRC", pa.int32(), "int"),
    ("tags", pa.string(), "string"),
    ("keys", pa.string(), "string"),
    ("properties", PROPERTIES, "map<string,string>"),
    ("sysFlag", pa.int32(), "int"),
    ("flag", pa.int32(), "int"),
    ("reconsumeTimes", pa.int32(), "int"),
    ("bornTimestamp", TIMESTAMP, "timestamp"),
    ("storeTimestamp", TIMESTAMP, "timestamp"),
    ("bornHost", pa.string(), "string"),
    ("storeHost", pa.string(), "string"),
    ("preparedTransactionOffset", pa.int64(), "long"),
)

#: The columns that may hold nulls: the first TAGS / KEYS property (a record
#: may have none) and timestamps whose microseconds overflow. Every other
#: column is in every record; declaring it NOT NULL spares Spark a null
#: check per value when it turns the Arrow batches into rows (about a tenth
#: of a local[1] query's time, in interleaved runs).
NULLABLE = frozenset({"tags", "keys", "bornTimestamp", "storeTimestamp"})

ARROW_SCHEMA = pa.schema([pa.field(name, typ, nullable=name in NULLABLE)
                          for name, typ, _ in COLUMNS])
SCHEMA_DDL = ", ".join(f"{name} {spark}{'' if name in NULLABLE else ' NOT NULL'}"
                       for name, _, spark in COLUMNS)

#: A batch holds up to this many records, or records spanning this many bytes.
DEFAULT_BATCH_ROWS = 16384
DEFAULT_BATCH_BYTES = 32 << 20
#: Timestamps further from the epoch have no microsecond int64 value: they read as null.
_MAX_MILLIS = (2**63 - 1) // 1000

# The fixed part of a record, through bodyLength, for each (born v6, store v6).
_FIXED = {
    (b6, s6): struct.Struct(
        ">iIiiiqqiq" + ("16si" if b6 else "4si") + "q" + ("16si" if s6 else "4si") + "iqi"
    )
    for b6 in (False, True)
    for s6 in (False, True)
}
_I32 = struct.Struct(">i")
_TOTAL_MAGIC = struct.Struct(">iI")
_U16 = struct.Struct(">H")
_SYSFLAG_AT = 36


@functools.lru_cache(maxsize=4096)
def _host(packed: bytes, port: int) -> str:
    ip = ipaddress.ip_address(packed)
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


@attrs.frozen
class Stop:
    """Why a walk over a byte range ended: at ``offset``, ``kind`` and ``reason``.

    ``kind`` is ``"limit"`` (the range was used up), ``"zero"`` (zero fill),
    ``"blank"`` (the blank ending a segment) or ``"bad"`` (``reason`` says why).
    """

    offset: int
    kind: str
    reason: str | None = None


class _Columns:
    """Column lists of one batch under construction."""

    def __init__(self) -> None:
        self.lists: tuple[list, ...] = tuple([] for _ in range(15))
        self.props: list[bytes] = []

    def __len__(self) -> int:
        return len(self.props)


def decode_range(buf: bytes | memoryview, base_offset: int, *, min_offset: int = 0,
                 max_end: int | None = None, topics: frozenset[str] | None = None,
                 verify_crc: bool = True, batch_rows: int = DEFAULT_BATCH_ROWS,
                 stop: list[Stop] | None = None, segment_size: int | None = None
                 ) -> Iterator[pa.RecordBatch]:
    """Decode the records of ``buf`` (physical offset ``base_offset``, a record boundary).

    Yields record batches of the records that start at or after
    ``min_offset``, end at or before ``max_end`` and belong to one of
    ``topics`` (all topics when ``None``). The walk ends at the end of
    ``buf``, a zero ``totalSize``, a blank or the first bad record; when
    ``stop`` is given, the reason is appended to it. With the log's
    ``segment_size`` the records are first found and checked in C
    (``record_index``); the Python walk below is the fallback.
    """
    limit = len(buf) if max_end is None else min(len(buf), max_end - base_offset)
    if segment_size is not None:
        found = checked_records(memoryview(buf)[:limit], base_offset, segment_size)
        if found is not None:
            bad = yield from _decode_checked(buf, base_offset, found, min_offset, topics,
                                             batch_rows)
            if stop is not None:
                stop.append(bad or Stop(found.end, "limit" if found.stop == "end" else "zero"))
            return
    ended: Stop | None = None
    run: list[int] = []
    pos = 0
    while pos < limit:
        total = magic = 0
        if limit - pos >= 8:
            total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
            if total == 0:
                ended = Stop(base_offset + pos, "zero")
                break
            if magic == BLANK_MAGIC:
                ended = Stop(base_offset + pos, "blank")
                break
        if magic not in (MAGIC_V1, MAGIC_V2) or not MIN_RECORD_SIZE <= total <= limit - pos:
            ended = _bad_at(buf, pos, limit, base_offset)
            break
        if base_offset + pos >= min_offset:
            run.append(pos)
        pos += total
        if len(run) >= batch_rows or (run and pos - run[0] >= DEFAULT_BATCH_BYTES):
            bad = yield from _decode_run(buf, base_offset, run, pos, topics, verify_crc)
            run = []
            if bad is not None:
                ended = bad
                break
    else:
        ended = Stop(base_offset + limit, "limit")
    if run:
        bad = yield from _decode_run(buf, base_offset, run, pos, topics, verify_crc)
        ended = bad or ended
    if stop is not None and ended is not None:
        stop.append(ended)


def _decode_checked(buf: bytes, base_offset: int, found: CheckedRecords, min_offset: int,
                    topics: frozenset[str] | None, batch_rows: int):
    """Yield the batches of records the C walk found; return the ``Stop`` of a bad one."""
    starts = pc.subtract(found.offsets, pa.scalar(base_offset, pa.int64()))
    sizes = found.sizes
    if min_offset > base_offset:
        keep = pc.greater_equal(found.offsets, pa.scalar(min_offset, pa.int64()))
        starts, sizes = starts.filter(keep), sizes.filter(keep)
    starts = starts.cast(pa.int32())  # within one buffer, below 2 GiB
    first, size = starts.to_pylist(), sizes.to_pylist()
    n, i = len(first), 0
    while i < n:
        rows = batch_rows
        while True:
            j = min(n, i + rows)
            end = first[j - 1] + size[j - 1]
            if rows == 1 or end - first[i] <= DEFAULT_BATCH_BYTES:
                break
            rows //= 2
        # The C walk checked every body CRC already.
        bad = yield from _decode_run(buf, base_offset, starts.slice(i, j - i), end, topics,
                                     verify_crc=False)
        if bad is not None:
            return bad
        i = j
    return None


def _bad_at(buf: bytes, pos: int, limit: int, base_offset: int) -> Stop:
    """The stop at a record whose header the walk rejected, with ``check``'s reason."""
    try:
        check(buf, pos, limit, base_offset=base_offset)
    except RecordError as exc:
        return Stop(exc.offset, "bad", exc.reason)
    raise AssertionError(f"check accepted the record at {base_offset + pos} the walk rejected")


def _decode_run(buf: bytes, base_offset: int, starts: list[int] | pa.Array, end: int,
                topics: frozenset[str] | None, verify_crc: bool):
    """Yield the batch of a run of contiguous records; return the ``Stop`` of a bad one."""
    arrays = column_arrays(buf, starts, end, verify_crc)
    if arrays is not None:
        batch = pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
        if (batch := _keep(batch, topics)).num_rows:
            yield batch
        return None
    columns = fast_columns(buf, starts, end, verify_crc)
    if columns is not None:
        try:
            batch = _assemble(columns)
        except RecordError:
            columns = None  # decode record by record to name the bad one
    if columns is None:
        batch, bad = _decode_records(buf, base_offset, starts, end, verify_crc)
        if batch is not None and (batch := _keep(batch, topics)).num_rows:
            yield batch
        return bad
    if (batch := _keep(batch, topics)).num_rows:
        yield batch
    return None


def _keep(batch: pa.RecordBatch, topics: frozenset[str] | None) -> pa.RecordBatch:
    """The rows of ``topics`` (all when None), with their producers' bodies."""
    if topics is not None:
        batch = batch.filter(pc.is_in(batch.column("topic"),
                                      pa.array(sorted(topics), pa.string())))
    return _inflated(batch)


def _inflated(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with the bodies their producers compressed (RocketMQ's clients do past
    4 KiB) inflated; ``bodyCRC`` stays the CRC of the bytes stored."""
    flags = batch.column("sysFlag")
    compressed = pc.not_equal(pc.bit_wise_and(flags, pa.scalar(COMPRESSED, pa.int32())), 0)
    if not pc.any(compressed).as_py():
        return batch
    bodies = batch.column("body").to_pylist()
    offsets = batch.column("physicalOffset")
    for i in pc.indices_nonzero(compressed).to_pylist():
        bodies[i] = producer_body(bodies[i], flags[i].as_py(), DEFAULT_MAX_BODY_SIZE,
                                  f"record at offset {offsets[i].as_py()}")
    where = batch.schema.get_field_index("body")
    return batch.set_column(where, batch.schema.field(where), pa.array(bodies, pa.binary()))


def _decode_records(buf: bytes, base_offset: int, starts: list[int] | pa.Array, end: int,
                    verify_crc: bool) -> tuple[pa.RecordBatch | None, Stop | None]:
    cols = _Columns()
    bad = None
    positions = starts.to_pylist() if isinstance(starts, pa.Array) else starts
    for pos in positions:
        try:
            total = check(buf, pos, end, base_offset=base_offset, verify_crc=verify_crc)
        except RecordError as exc:
            bad = Stop(exc.offset, "bad", exc.reason)
            break
        _append(cols, buf, pos, total)
    if not len(cols):
        return None, bad
    try:
        return _to_batch(cols), bad
    except RecordError:
        # A field ``check`` leaves to the decoder (UTF-8 topic, properties) is bad:
        # keep the records before the first such record.
        index, reason = _undecodable(cols)
        batch, _ = _decode_records(buf, base_offset, positions[:index], positions[index],
                                   verify_crc)
        return batch, Stop(base_offset + positions[index], "bad", reason)


def _undecodable(cols: _Columns) -> tuple[int, str]:
    """The first record of ``cols`` whose topic or properties do not decode, and why."""
    for index, (topic, props) in enumerate(zip(cols.lists[2], cols.props, strict=True)):
        try:
            topic.decode()
        except UnicodeDecodeError:
            return index, "topic is not valid UTF-8"
        try:
            properties_from_bytes(props, 0)
        except RecordError as exc:
            return index, exc.reason
    raise AssertionError("a batch failed to decode but each record decodes")


def _append(cols: _Columns, buf: bytes, pos: int, total: int) -> None:
    sys_flag = _I32.unpack_from(buf, pos + _SYSFLAG_AT)[0]
    fixed = _FIXED[bool(sys_flag & BORNHOST_V6), bool(sys_flag & STOREHOST_V6)]
    (_, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_ip, born_port,
     store_ts, store_ip, store_port, reconsume, prepared, body_len) = fixed.unpack_from(buf, pos)
    at = pos + fixed.size
    body = buf[at:at + body_len]
    at += body_len
    if magic == MAGIC_V2:  # a 2-byte topic length
        topic_len = _U16.unpack_from(buf, at)[0]
        at += 2
    else:
        topic_len = buf[at]
        at += 1
    topic = bytes(buf[at:at + topic_len])
    at += topic_len
    props_len = _U16.unpack_from(buf, at)[0]
    (c_phys, c_size, c_topic, c_qid, c_qoff, c_body, c_crc, c_sys, c_flag, c_rec, c_born,
     c_store, c_bhost, c_shost, c_prep) = cols.lists
    c_phys.append(phys)
    c_size.append(total)
    c_topic.append(topic)
    c_qid.append(queue_id)
    c_qoff.append(queue_offset)
    c_body.append(bytes(body))
    c_crc.append(crc)
    c_sys.append(sys_flag)
    c_flag.append(flag)
    c_rec.append(reconsume)
    c_born.append(born_ts)
    c_store.append(store_ts)
    c_bhost.append(_host(born_ip, born_port))
    c_shost.append(_host(store_ip, store_port))
    c_prep.append(prepared)
    cols.props.append(bytes(buf[at + 2:at + 2 + props_len]))


def _to_batch(cols: _Columns) -> pa.RecordBatch:
    (c_phys, c_size, c_topic, c_qid, c_qoff, c_body, c_crc, c_sys, c_flag, c_rec, c_born,
     c_store, c_bhost, c_shost, c_prep) = cols.lists
    return _assemble({
        "physicalOffset": pa.array(c_phys, pa.int64()),
        "size": pa.array(c_size, pa.int32()),
        "topic": pa.array(c_topic, pa.binary()),
        "queueId": pa.array(c_qid, pa.int32()),
        "queueOffset": pa.array(c_qoff, pa.int64()),
        "body": pa.array(c_body, pa.binary()),
        "bodyCRC": pa.array(c_crc, pa.int32()),
        "properties": pa.array(cols.props, pa.binary()),
        "sysFlag": pa.array(c_sys, pa.int32()),
        "flag": pa.array(c_flag, pa.int32()),
        "reconsumeTimes": pa.array(c_rec, pa.int32()),
        "bornTimestamp": pa.array(c_born, pa.int64()),
        "storeTimestamp": pa.array(c_store, pa.int64()),
        "bornHost": pa.array(c_bhost, pa.string()),
        "storeHost": pa.array(c_shost, pa.string()),
        "preparedTransactionOffset": pa.array(c_prep, pa.int64()),
    })


def _assemble(raw: dict[str, pa.Array]) -> pa.RecordBatch:
    """The record batch of raw columns: binary topic and properties, int64 milliseconds."""
    offsets = raw["physicalOffset"]
    columns = dict(raw)
    columns["properties"], columns["tags"], columns["keys"] = properties_columns(
        raw["properties"], offsets)
    columns["topic"] = _utf8(raw["topic"], "topic", offsets)
    for name in ("bornTimestamp", "storeTimestamp"):
        columns[name] = _timestamps(raw[name])
    return pa.RecordBatch.from_arrays([columns[name] for name in ARROW_SCHEMA.names],
                                      schema=ARROW_SCHEMA)


def _timestamps(millis: pa.Array) -> pa.Array:
    """Milliseconds to microsecond timestamps; null where microseconds would overflow."""
    out_of_range = pc.greater(pc.abs(millis), _MAX_MILLIS)
    if pc.any(out_of_range).as_py():
        millis = pc.if_else(out_of_range, pa.scalar(None, pa.int64()), millis)
    return millis.view(pa.timestamp("ms", tz="UTC")).cast(TIMESTAMP)


def _utf8(raw: pa.Array, what: str, offsets: pa.Array) -> pa.Array:
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        for value, offset in zip(raw.to_pylist(), offsets.to_pylist(), strict=True):
            try:
                value.decode()
            except UnicodeDecodeError:
                raise RecordError(offset, f"{what} is not valid UTF-8") from None
        raise


def properties_array(raw: pa.Array, offsets: pa.Array) -> pa.MapArray:
    """The ``map<string,string>`` column of RocketMQ property strings ``key\\x01value\\x02...``.

    ``raw`` is a binary array, ``offsets`` the records' physical offsets (for
    errors); see ``properties_columns``.
    """
    return properties_columns(raw, offsets)[0]


@functools.lru_cache(maxsize=8)
def _record_numbers(n: int) -> pa.Array:
    return pa.array(range(n), pa.int32())


def _first_value(keys: pa.Array, values: pa.Array, parents: pa.Array, n: int, key: str
                 ) -> pa.Array:
    """Per record (of ``n``), the value of the first pair named ``key``, or null."""
    named = pc.equal(keys, key)
    # index_in finds each record's first pair among the named ones.
    at = pc.index_in(_record_numbers(n), value_set=parents.filter(named))
    return values.filter(named).take(at)


def properties_columns(raw: pa.Array, offsets: pa.Array
                       ) -> tuple[pa.MapArray, pa.Array, pa.Array]:
    """The ``properties`` map column and the ``tags`` and ``keys`` columns looked up in it.

    Arrow kernels split well-formed strings (every pair ends with ``\\x02``);
    any other shape goes through ``message.properties_from_bytes``, which
    names the record's offset when it is malformed.
    """
    n = len(raw)
    if not n:
        empty_map = pa.array([], PROPERTIES)
        return empty_map, pa.array([], pa.string()), pa.array([], pa.string())
    strings = _utf8(raw, "properties", offsets)
    parts = pc.split_pattern(strings, "\x02")
    items = pc.list_flatten(parts)
    empty = pc.equal(pc.utf8_length(items), 0)
    # Well formed: each string is empty or ends with the separator, so the
    # split leaves exactly one empty item per record, the last one.
    terminated = pc.or_(pc.ends_with(strings, "\x02"), pc.equal(pc.utf8_length(strings), 0))
    if pc.all(terminated).as_py() and pc.sum(empty).as_py() == n:
        named = pc.invert(empty)
        pairs = pc.split_pattern(items.filter(named), "\x01", max_splits=1)
        if not len(pairs) or pc.all(pc.equal(pc.list_value_length(pairs), 2)).as_py():
            counts = pc.subtract(pc.list_value_length(parts), 1).cast(pa.int32())
            offsets_arr = pa.concat_arrays(
                [pa.array([0], pa.int32()), pc.cumulative_sum(counts)]
            )
            keys, values = pc.list_element(pairs, 0), pc.list_element(pairs, 1)
            parents = pc.list_parent_indices(parts).filter(named)
            return (pa.MapArray.from_arrays(offsets_arr, keys, values),
                    _first_value(keys, values, parents, n, "TAGS"),
                    _first_value(keys, values, parents, n, "KEYS"))
    dicts = [properties_from_bytes(r, o)
             for r, o in zip(raw.to_pylist(), offsets.to_pylist(), strict=True)]
    return (pa.array([list(d.items()) for d in dicts], PROPERTIES),
            pa.array([d.get("TAGS") for d in dicts], pa.string()),
            pa.array([d.get("KEYS") for d in dicts], pa.string()))
