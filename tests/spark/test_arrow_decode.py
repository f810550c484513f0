"""The Arrow fast path decodes exactly what ``message.decode`` decodes."""

from __future__ import annotations

import re

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.spark.storegen import normalize, record_row, sample_records
from triomq.plugins.spark_export.arrow_decode import (
    ARROW_SCHEMA,
    Stop,
    decode_range,
    properties_array,
)
from triomq.plugins.spark_export.arrow_fast import fast_columns
from triomq.protocol.commitlog_layout import pack_records
from triomq.protocol.inflate import InflateError
from triomq.protocol.message import COMPRESSED, MessageRecord, RecordError, decode, encode

SEGMENT = 1 << 20


def packed(records):
    packed_batch = pack_records(records, 0, SEGMENT, lambda topic, qid: 0)
    return bytes(packed_batch.data), packed_batch.placed


def decoded(buf, **kwargs):
    stop: list[Stop] = []
    batches = list(decode_range(buf, 0, stop=stop, **kwargs))
    table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
    for field in ARROW_SCHEMA:  # Spark reads a NOT NULL column without null checks
        assert field.nullable or table[field.name].null_count == 0, field.name
    for name in ("bornTimestamp", "storeTimestamp"):
        # compare milliseconds: years past 9999 have no Python datetime
        millis = pc.divide(table[name].cast(pa.int64()), 1000)
        table = table.set_column(table.schema.get_field_index(name), name, millis)
    return normalize(table.to_pylist()), stop[0]


def expected(buf, placed):
    """Rows of the records at ``placed``, each decoded with ``message.decode``."""
    rows = [record_row(*decode(buf, phys)) for phys, _, _ in placed]
    for row in rows:
        for name in ("bornTimestamp", "storeTimestamp"):
            if abs(row[name]) > (2**63 - 1) // 1000:
                row[name] = None  # no microsecond value: the column is null
    return sorted(rows, key=lambda r: r["physicalOffset"])


def test_sample_records_match_direct_decode():
    records = sample_records(500)
    buf, placed = packed(records)
    rows, stop = decoded(buf, batch_rows=64)
    assert rows == expected(buf, placed)
    assert stop == Stop(len(buf), "limit")


text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
               max_size=12)
record_st = st.builds(
    MessageRecord,
    topic=st.one_of(text.filter(bool), st.just("t" * 200)),
    body=st.binary(max_size=64),
    queue_id=st.integers(0, 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    # Not COMPRESSED (1): the decoder inflates those bodies (test_compressed_bodies.py).
    sys_flag=st.sampled_from([0, 2, 4, 8, 0xC]),
    born_timestamp=st.integers(0, 2**40),
    born_host=st.tuples(st.sampled_from(["1.2.3.4", "::1", "fe80::2"]), st.integers(0, 65535)),
    store_timestamp=st.integers(0, 2**40),
    store_host=st.tuples(st.sampled_from(["10.0.0.9", "2001:db8::7"]), st.integers(0, 65535)),
    reconsume_times=st.integers(0, 100),
    prepared_transaction_offset=st.integers(0, 2**62),
    properties=st.dictionaries(text.filter(bool), text, max_size=4),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(record_st, min_size=1, max_size=20))
def test_any_records_match_direct_decode(records):
    buf, placed = packed(records)
    rows, _ = decoded(buf, batch_rows=7)
    assert rows == expected(buf, placed)


@settings(max_examples=100, deadline=None)
@given(st.lists(record_st, min_size=1, max_size=5), st.data())
def test_damaged_bytes_stop_or_raise_record_error(records, data):
    buf = bytearray(packed(records)[0])
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    try:
        rows, stop = decoded(bytes(buf[:cut]))
    except RecordError:
        return
    assert stop.kind in ("limit", "zero", "blank", "bad")
    assert stop.offset <= cut
    assert len(rows) <= len(records)


def test_topic_filter_and_min_offset():
    records = sample_records(60)
    buf, placed = packed(records)
    rows, _ = decoded(buf, topics=frozenset({"orders"}), min_offset=placed[10][0])
    want = [r for r in expected(buf, placed)
            if r["topic"] == "orders" and r["physicalOffset"] >= placed[10][0]]
    assert rows == want


def test_corrupt_record_stops_with_reason():
    records = sample_records(10)
    buf, placed = packed(records)
    damaged = bytearray(buf)
    damaged[placed[4][0] + 100] ^= 0xFF  # inside record 4's body
    rows, stop = decoded(bytes(damaged))
    assert [r["physicalOffset"] for r in rows] == [p for p, _, _ in placed[:4]]
    assert stop.kind == "bad" and stop.offset == placed[4][0] and "CRC" in stop.reason


@pytest.mark.parametrize("raw", [b"a\x01b", b"\x02a\x01b\x02", b"a\x01b\x02\x02c\x01\x02"])
def test_unusual_property_strings_use_the_message_parser(raw):
    got = properties_array(pa.array([raw, b"k\x01v\x02"]), pa.array([0, 1])).to_pylist()
    assert [dict(m) for m in got][1] == {"k": "v"}
    assert len(got) == 2


def test_property_without_separator_names_the_offset():
    with pytest.raises(RecordError, match="offset 7"):
        properties_array(pa.array([b"novalue\x02"]), pa.array([7]))


def test_encode_roundtrip_single_record():
    record = MessageRecord(topic="x", body=b"hi", properties={"TAGS": "t"})
    rows, stop = decoded(encode(record))
    assert rows[0]["tags"] == "t" and rows[0]["body"] == b"hi"
    assert stop.kind == "limit"


ipv4_record_st = record_st.map(
    lambda r: attrs.evolve(r, topic=r.topic[:100], born_host=("1.2.3.4", r.born_host[1]),
                           store_host=("10.0.0.9", r.store_host[1])))


@settings(max_examples=60, deadline=None)
@given(st.lists(ipv4_record_st, min_size=1, max_size=20))
def test_arrow_kernel_path_matches_direct_decode(records):
    buf, placed = packed(records)
    starts = [p for p, _, _ in placed]
    assert fast_columns(buf, starts, len(buf), True) is not None
    rows, _ = decoded(buf, batch_rows=8)
    assert rows == expected(buf, placed)


@settings(max_examples=150, deadline=None)
@given(st.lists(ipv4_record_st, min_size=2, max_size=6), st.data())
def test_arrow_kernel_path_on_damaged_bytes(records, data):
    buf, placed = packed(records)
    damaged = bytearray(buf)
    at = data.draw(st.integers(0, len(buf) - 1))
    damaged[at] = data.draw(st.integers(0, 255))
    try:
        rows, stop = decoded(bytes(damaged))
    except RecordError:
        return
    except InflateError as exc:
        # A damaged sysFlag can mark a body compressed that does not inflate: refused,
        # naming that record.
        (offset,) = map(int, re.findall(r"record at offset (\d+): the compressed body",
                                        str(exc)))
        record, _ = decode(bytes(damaged), offset)
        assert record.sys_flag & COMPRESSED
        return
    whole = [i for i, (p, size, _) in enumerate(placed) if p + size <= stop.offset]
    # every record before the stop decodes as message.decode decodes it
    assert rows == expected(bytes(damaged), [placed[i] for i in whole])


def test_a_damaged_sys_flag_that_marks_a_body_compressed_is_refused_naming_the_record():
    # The kind of case hypothesis found: sysFlag is the big-endian int at bytes 36-39.
    buf, placed = packed([attrs.evolve(r, sys_flag=0, body=b"not deflate")
                          for r in sample_records(2)])
    damaged = bytearray(buf)
    damaged[placed[1][0] + 39] |= COMPRESSED
    with pytest.raises(InflateError, match=f"record at offset {placed[1][0]}: the compressed "
                                           "body is not a deflate stream"):
        decoded(bytes(damaged))
