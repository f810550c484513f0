"""The C column pass decodes exactly what the Python decoder decodes, or leaves it to it."""

from __future__ import annotations

import ipaddress
import os
import struct
from unittest import mock

import attrs
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.spark.storegen import sample_records
from triomq.plugins.spark_export import arrow_decode
from triomq.plugins.spark_export.arrow_columns import column_arrays
from triomq.plugins.spark_export.arrow_decode import ARROW_SCHEMA, Stop, decode_range
from triomq.protocol import columns
from triomq.protocol.commitlog_layout import COMMITLOG_DIR, pack_records, sorted_segments
from triomq.protocol.message import MessageRecord, encode

pytestmark = pytest.mark.skipif(not columns.SPEEDUPS, reason="C extension not built")

SEGMENT = 1 << 20
INT64 = (-(2**63), 2**63 - 1)
MAX_MILLIS = (2**63 - 1) // 1000


def decode_both_ways(buf: bytes, **kwargs):
    """(C-path outcome, Python-path outcome, runs the C path took) of ``decode_range``."""
    taken = []

    def counted(*args):
        arrays = column_arrays(*args)
        taken.append(arrays is not None)
        return arrays

    def outcome():
        stop: list[Stop] = []
        try:
            batches = list(decode_range(buf, 0, stop=stop, **kwargs))
        except Exception as exc:  # both paths must fail the same way
            return type(exc), str(exc)
        return pa.Table.from_batches(batches, schema=ARROW_SCHEMA).combine_chunks(), stop

    with mock.patch.object(arrow_decode, "column_arrays", counted):
        with_c = outcome()
    with mock.patch.object(arrow_decode, "column_arrays", lambda *args: None):
        python = outcome()
    return with_c, python, taken


def assert_same(with_c, python):
    if isinstance(with_c[0], pa.Table) and isinstance(python[0], pa.Table):
        assert with_c[0].schema == python[0].schema
        assert with_c[0].equals(python[0]), (with_c[0].to_pylist(), python[0].to_pylist())
        assert with_c[1] == python[1]
    else:
        assert with_c == python


text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
               max_size=10)
hosts = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
    st.sampled_from(["::", "::1", "1::", "1:0:0:2::3", "fe80::1:0:0:0", "::ffff:1.2.3.4",
                     "0:0:1::", "2001:db8:0:0:1:0:0:1"]),
)
port = st.integers(-(2**31), 2**31 - 1)
millis = st.one_of(st.integers(0, 2**41), st.integers(*INT64),
                   st.sampled_from([MAX_MILLIS, MAX_MILLIS + 1, -MAX_MILLIS, -MAX_MILLIS - 1]))
plain_record = st.builds(
    MessageRecord,
    topic=st.one_of(st.sampled_from(["orders", "payments", "audit", "t" * 200]), text),
    body=st.binary(max_size=40),
    queue_id=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    sys_flag=st.sampled_from([0, 1, 2, 4, 8, 0xC]),
    born_timestamp=millis,
    born_host=st.tuples(hosts, port),
    store_timestamp=millis,
    store_host=st.tuples(hosts, port),
    reconsume_times=st.integers(-(2**31), 2**31 - 1),
    prepared_transaction_offset=st.integers(*INT64),
    properties=st.dictionaries(
        st.one_of(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY"]), text), text, max_size=4),
)
odd_properties = st.one_of(
    st.sampled_from([
        b"a\x01b", b"\x02a\x01b\x02", b"a\x01b\x02\x02c\x01\x02", b"a\x01b\x01c\x02",
        b"\x01v\x02", b"k\x01\x02", b"TAGS\x01x\x02TAGS\x01y\x02KEYS\x01\x02KEYS\x01z\x02",
        b"\xff\x01a\x02", b"k\x01\xc3\x02", b"novalue\x02", b"\x02", b"",
    ]),
    st.binary(max_size=16),
    st.lists(st.sampled_from([b"TAGS", b"KEYS", b"k", b"", b"\x01", b"\x02", b"\xe2\x82\xac",
                              b"v"]), max_size=8).map(b"".join),
)


def with_properties(record: MessageRecord, raw: bytes) -> bytes:
    """``record`` encoded with ``raw`` as its property bytes, whatever they hold."""
    head = encode(attrs.evolve(record, properties={}))[:-2]
    out = head + struct.pack(">H", len(raw)) + raw
    return struct.pack(">i", len(out)) + out[4:]


def plain(record: MessageRecord) -> bool:
    """Whether the C pass takes ``record`` (else it leaves the run to Python)."""
    mapped = [h for h, _ in (record.born_host, record.store_host)
              if ipaddress.ip_address(h).version == 6 and ipaddress.ip_address(h).ipv4_mapped]
    return not mapped and INT64[0] not in (record.born_timestamp, record.store_timestamp)


@settings(max_examples=150, deadline=None)
@given(st.lists(plain_record, min_size=1, max_size=12), st.integers(1, 8))
def test_generated_records_decode_the_same(records, batch_rows):
    buf = bytes(pack_records(records, 0, SEGMENT, lambda topic, qid: 0).data)
    for kwargs in ({}, {"segment_size": SEGMENT}):
        with_c, python, taken = decode_both_ways(buf, batch_rows=batch_rows, **kwargs)
        assert_same(with_c, python)
        if all(plain(r) for r in records):
            assert taken and all(taken)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(plain_record, st.one_of(st.none(), odd_properties)),
                min_size=1, max_size=6))
def test_odd_property_strings_decode_the_same(items):
    buf = b"".join(encode(r) if raw is None else with_properties(r, raw) for r, raw in items)
    with_c, python, _ = decode_both_ways(buf, batch_rows=4)
    assert_same(with_c, python)


@settings(max_examples=100, deadline=None)
@given(st.lists(plain_record, min_size=1, max_size=5), st.data())
def test_damaged_bytes_decode_the_same(records, data):
    buf = bytearray(pack_records(records, 0, SEGMENT, lambda topic, qid: 0).data)
    for _ in range(data.draw(st.integers(1, 3))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    with_c, python, _ = decode_both_ways(bytes(buf[:cut]))
    assert_same(with_c, python)


def test_store_segments_decode_the_same(store):
    directory = os.path.join(store.root, COMMITLOG_DIR)
    for _, name in sorted_segments(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        with_c, python, taken = decode_both_ways(data, segment_size=1 << 16, batch_rows=100)
        assert_same(with_c, python)
        assert taken and all(taken)


def test_crc_mismatch_is_left_to_python():
    buf = bytearray(encode(MessageRecord(topic="t", body=b"hello")))
    buf[-6] ^= 0xFF  # inside the body (the topic and properties take the last 4 bytes)
    assert column_arrays(bytes(buf), [0], len(buf), True) is None
    assert column_arrays(bytes(buf), [0], len(buf), False) is not None


def test_sample_records_take_the_c_path():
    records = sample_records(200)
    buf = bytes(pack_records(records, 0, SEGMENT, lambda topic, qid: 0).data)
    with_c, python, taken = decode_both_ways(buf, batch_rows=64)
    assert_same(with_c, python)
    assert taken == [True] * 4
