"""The C walk (``record_index``) changes how fast records are found, never what is read."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.spark.storegen import sample_records
from tests.spark.test_arrow_decode import SEGMENT, decoded, packed
from triomq.plugins.spark_export.record_index import checked_records
from triomq.protocol.commitlog_layout import SPEEDUPS
from triomq.protocol.inflate import InflateError

RECORDS = sample_records(60, body_size=40)
BUF, PLACED = packed(RECORDS)


def both(buf, **kwargs):
    """(rows, stop) of the Python walk and of the C walk over ``buf``."""
    return decoded(buf, **kwargs), decoded(buf, segment_size=SEGMENT, **kwargs)


@pytest.mark.skipif(not SPEEDUPS, reason="C extension not built or disabled")
def test_the_c_walk_finds_every_record_in_log_order():
    found = checked_records(BUF, 0, SEGMENT)
    assert found is not None and found.stop == "end" and found.end == len(BUF)
    assert found.offsets.to_pylist() == [phys for phys, _, _ in PLACED]
    assert found.sizes.to_pylist() == [size for _, size, _ in PLACED]


def test_small_batches_and_a_start_offset_read_the_same():
    (rows, _), (c_rows, _) = both(BUF, batch_rows=7, min_offset=PLACED[10][0])
    assert c_rows == rows and len(rows) == 50


def refusal_or_read(buf, **kwargs):
    """A walk's (rows, stop), or the InflateError naming a body flagged compressed that
    does not inflate (a damaged sysFlag can set the flag), which every walk raises."""
    try:
        return decoded(buf, **kwargs)
    except InflateError as exc:
        return str(exc)


@settings(max_examples=60, deadline=None)
@given(at=st.integers(0, len(BUF) - 1), value=st.integers(0, 255))
def test_a_damaged_byte_reads_the_same_either_way(at, value):
    buf = bytearray(BUF)
    buf[at] = value
    read, c_read = refusal_or_read(bytes(buf)), refusal_or_read(bytes(buf), segment_size=SEGMENT)
    if isinstance(read, str):
        assert c_read == read and "the compressed body" in read
        return
    (rows, stop), (c_rows, c_stop) = read, c_read
    assert c_rows == rows
    assert (c_stop.kind == "bad") == (stop.kind == "bad")
    if stop.kind == "bad":
        assert attrs.astuple(c_stop) == attrs.astuple(stop)


@settings(max_examples=30, deadline=None)
@given(cut=st.integers(1, len(BUF) - 1))
def test_a_cut_range_reads_the_same_either_way(cut):
    (rows, stop), (c_rows, c_stop) = both(BUF[:cut])
    assert c_rows == rows and (c_stop.kind == "bad") == (stop.kind == "bad")


def test_a_damaged_flag_that_marks_a_body_compressed_is_refused_the_same_either_way():
    # The falsifying example once found: the byte at 558 is a record's sysFlag.
    buf = bytearray(BUF)
    buf[558] = 1
    read = refusal_or_read(bytes(buf))
    assert read == refusal_or_read(bytes(buf), segment_size=SEGMENT)
    assert isinstance(read, str) and "is not a deflate stream" in read
