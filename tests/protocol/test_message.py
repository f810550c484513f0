"""Commit-log record codec and layout helpers: exact bytes, round trips, bad input, fuzzing."""

from __future__ import annotations

import struct
import zlib

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.errors import TriomqError
from triomq.protocol.commitlog_layout import (
    BLANK_MAGIC,
    SegmentNameError,
    blank_header,
    blank_needed,
    iter_log,
    iter_spans,
    pack_cq_entry,
    pack_records,
    parse_segment_name,
    scan_log,
    segment_name,
    sorted_segments,
    tags_code,
    unpack_cq_entry,
)
from triomq.protocol.message import (
    BORNHOST_V6,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    STOREHOST_V6,
    MessageRecord,
    RecordError,
    body_crc,
    check,
    decode,
    encode,
    properties_from_bytes,
    store_timestamp_at,
)


def sample(**fields) -> MessageRecord:
    base = dict(topic="TopicTest", body=b"hello", queue_id=3, flag=1, queue_offset=42,
                physical_offset=1234, sys_flag=0, born_timestamp=1700000000000,
                born_host=("192.168.0.1", 50000), store_timestamp=1700000000005,
                store_host=("192.168.0.2", 10911), reconsume_times=2,
                prepared_transaction_offset=7, properties={"TAGS": "a", "KEYS": "k1"})
    base.update(fields)
    return MessageRecord(**base)


def test_layout_is_rocketmq_byte_for_byte() -> None:
    rec = sample()
    raw = encode(rec)
    props = b"TAGS\x01a\x02KEYS\x01k1\x02"
    expected = (
        struct.pack(">iIiiiqqiq", len(raw), MAGIC_V1, zlib.crc32(b"hello") & 0x7FFFFFFF, 3, 1,
                    42, 1234, 0, 1700000000000)
        + bytes([192, 168, 0, 1]) + struct.pack(">i", 50000)
        + struct.pack(">q", 1700000000005)
        + bytes([192, 168, 0, 2]) + struct.pack(">i", 10911)
        + struct.pack(">iqi", 2, 7, 5) + b"hello"
        + bytes([9]) + b"TopicTest" + struct.pack(">H", len(props)) + props
    )
    assert raw == expected
    assert len(raw) == MIN_RECORD_SIZE + 5 + 9 + len(props)
    assert store_timestamp_at(raw) == 1700000000005


def test_ipv6_hosts_set_sysflag_and_widen_fields() -> None:
    rec = sample(born_host=("::1", 1), store_host=("fe80::2", 2))
    raw = encode(rec)
    assert len(raw) == len(encode(sample())) + 24
    back, size = decode(raw)
    assert size == len(raw)
    assert back.sys_flag == BORNHOST_V6 | STOREHOST_V6
    assert back.born_host == ("::1", 1)
    assert back.store_host == ("fe80::2", 2)
    assert store_timestamp_at(raw) == rec.store_timestamp


def test_long_topic_uses_v2_magic() -> None:
    rec = sample(topic="x" * 200)
    raw = encode(rec)
    assert struct.unpack_from(">I", raw, 4)[0] == MAGIC_V2
    assert decode(raw)[0] == rec
    forced = encode(sample(), force_v2=True)
    assert struct.unpack_from(">I", forced, 4)[0] == MAGIC_V2
    assert decode(forced)[0] == sample()


def test_encode_rejects_bad_fields() -> None:
    with pytest.raises(RecordError):
        encode(sample(born_host=("not-an-ip", 1)))
    with pytest.raises(RecordError):
        encode(sample(properties={"a\x01": "b"}))
    with pytest.raises(RecordError):
        encode(sample(properties={"k": "v" * 40000}))


hosts = st.one_of(
    st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str)
).flatmap(lambda ip: st.tuples(st.just(ip), st.integers(0, 65535)))
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]),
                    max_size=20)
records = st.builds(
    MessageRecord,
    topic=st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=140),
    body=st.binary(max_size=300),
    queue_id=st.integers(0, 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    queue_offset=st.integers(0, 2**63 - 1),
    physical_offset=st.integers(0, 2**63 - 1),
    sys_flag=st.integers(0, 0xF),
    born_timestamp=st.integers(0, 2**62),
    born_host=hosts,
    store_timestamp=st.integers(0, 2**62),
    store_host=hosts,
    reconsume_times=st.integers(0, 100),
    prepared_transaction_offset=st.integers(0, 2**62),
    properties=st.dictionaries(prop_text.filter(bool), prop_text, max_size=5),
)


def normalized(rec: MessageRecord, raw: bytes) -> MessageRecord:
    """``rec`` with the v6 bits ``encode`` derives from the hosts."""
    sys_flag = struct.unpack_from(">i", raw, 36)[0]
    return attrs.evolve(rec, sys_flag=sys_flag)


@given(records)
def test_round_trip(rec: MessageRecord) -> None:
    raw = encode(rec)
    back, size = decode(raw)
    assert size == len(raw) == check(raw)
    assert back == normalized(rec, raw)
    assert back.sys_flag & 0xF == rec.sys_flag


@given(records, st.binary(max_size=20))
def test_decode_in_a_larger_buffer(rec: MessageRecord, trailer: bytes) -> None:
    raw = b"\x00" * 7 + encode(rec) + trailer
    back, size = decode(raw, 7, base_offset=100)
    assert size == len(raw) - 7 - len(trailer)
    assert back.body == rec.body


@given(st.binary(max_size=400), st.integers(0, 10))
def test_fuzz_decode_never_crashes(data: bytes, pos: int) -> None:
    try:
        decode(data, min(pos, len(data)))
    except RecordError as exc:
        assert isinstance(exc, TriomqError)
        assert exc.reason


@given(records, st.data())
def test_fuzz_mutated_records(rec: MessageRecord, data: st.DataObject) -> None:
    raw = bytearray(encode(rec))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    try:
        _back, size = decode(bytes(raw))
    except RecordError as exc:
        assert exc.offset == 0
    else:
        assert size <= len(raw)


@given(records, st.integers(0, 400))
def test_truncated_records_are_rejected(rec: MessageRecord, cut: int) -> None:
    raw = encode(rec)
    cut = min(cut, len(raw) - 1)
    with pytest.raises(RecordError):
        decode(raw[:cut])


def test_bad_input_reasons() -> None:
    raw = bytearray(encode(sample()))
    bad_magic = bytearray(raw)
    bad_magic[4:8] = b"\x00\x00\x00\x01"
    with pytest.raises(RecordError, match="bad magic") as info:
        decode(bytes(bad_magic), base_offset=500)
    assert info.value.offset == 500
    lying = bytearray(raw)
    struct.pack_into(">i", lying, 0, 0x7FFFFFFF)
    with pytest.raises(RecordError, match="runs past the end"):
        decode(bytes(lying))
    too_small = bytearray(raw)
    struct.pack_into(">i", too_small, 0, 20)
    with pytest.raises(RecordError, match="below the minimum"):
        decode(bytes(too_small))
    short = bytearray(raw)
    struct.pack_into(">i", short, 0, len(raw) - 1)
    with pytest.raises(RecordError, match="add up"):
        decode(bytes(short))
    crc = bytearray(raw)
    crc[raw.index(b"hello")] ^= 1
    with pytest.raises(RecordError, match="CRC mismatch"):
        decode(bytes(crc))
    assert decode(bytes(crc), verify_crc=False)[0].body != b"hello"


def test_properties_parsing() -> None:
    assert properties_from_bytes(b"") == {}
    assert properties_from_bytes(b"A\x011\x02B\x01\x02") == {"A": "1", "B": ""}
    with pytest.raises(RecordError, match="separator"):
        properties_from_bytes(b"A1\x02", 9)
    with pytest.raises(RecordError, match="UTF-8"):
        properties_from_bytes(b"\xff\x01a\x02")


def test_body_crc_is_masked_crc32() -> None:
    assert body_crc(b"") == 0
    assert body_crc(b"abc") == zlib.crc32(b"abc") & 0x7FFFFFFF


# ---------------------------------------------------------------- layout


def test_segment_names() -> None:
    assert segment_name(0) == "00000000000000000000"
    assert segment_name(1073741824) == "00000000001073741824"
    assert parse_segment_name("00000000001073741824") == 1 << 30
    for bad in ("0000000000107374182", "0000000000107374182x", "abc", "00000000001073741824.tmp"):
        with pytest.raises(SegmentNameError, match=bad.replace(".", r"\.")):
            parse_segment_name(bad, "/store/commitlog")
    assert sorted_segments(["00000000000000002048", "00000000000000000000"]) == [
        (0, "00000000000000000000"), (2048, "00000000000000002048")]


def test_blank_placement() -> None:
    assert blank_needed(0, 100, 1024) == 0
    assert blank_needed(1024 - 108, 100, 1024) == 0
    assert blank_needed(1024 - 107, 100, 1024) == 107
    with pytest.raises(ValueError):
        blank_needed(0, 1020, 1024)
    assert blank_header(300) == struct.pack(">iI", 300, BLANK_MAGIC)


def test_java_string_hashcode_tags() -> None:
    assert tags_code(None) == 0
    assert tags_code("a") == 97
    assert tags_code("ab") == 97 * 31 + 98
    assert tags_code("hello") == 99162322
    assert tags_code("polygenelubricants") == -(2**31)
    assert tags_code("\U0001f600") == (0xD83D * 31 + 0xDE00)


def test_cq_entry() -> None:
    raw = pack_cq_entry(123456789, 300, -5)
    assert len(raw) == 20
    assert unpack_cq_entry(raw) == (123456789, 300, -5)


def test_pack_records_pads_segments() -> None:
    recs = [sample(body=bytes(150)) for _ in range(10)]
    batch = pack_records(recs, 0, 1024, lambda t, q: 5)
    buf, placed = batch.data, batch.placed
    assert [q for _, _, q in placed] == list(range(5, 15))
    first, entries = batch.queue_runs["TopicTest", 3]
    assert first == 5
    assert [unpack_cq_entry(entries, 20 * i)[:2] for i in range(10)] == [
        (p, n) for p, n, _ in placed]
    for phys, size, _ in placed:
        assert phys // 1024 == (phys + size - 1) // 1024
        assert decode(buf, phys)[0].physical_offset == phys
    spans = [s for s in scan_log(buf, 0, 1024).spans]
    assert sum(1 for s in spans if s.blank) == len(buf) // 1024
    with pytest.raises(ValueError):
        pack_records([sample(body=bytes(2000))], 0, 1024, lambda t, q: 0)


def test_scan_log_classifies_the_stop() -> None:
    recs = [sample(body=bytes(100)) for _ in range(12)]
    batch = pack_records(recs, 0, 1024, lambda t, q: 0)
    buf, placed = batch.data, batch.placed
    assert scan_log(buf, 0, 1024).stop == "end"
    assert scan_log(buf, 0, 1024).end == len(buf)
    cut = placed[5][0] + 10
    torn = scan_log(buf[:cut], 0, 1024)
    assert (torn.stop, torn.end) == ("torn", placed[5][0])
    assert scan_log(buf[:placed[5][0] + 3], 0, 1024).stop == "torn"
    # A blank whose padding has not all arrived is torn, not whole.
    blank_at = next(s.offset for s in scan_log(buf, 0, 1024).spans if s.blank)
    part = scan_log(buf[:blank_at + 20], 0, 1024)
    assert (part.stop, part.end) == ("torn", blank_at)
    zero = scan_log(bytes(buf[:placed[3][0]]) + bytes(200), 0, 1024)
    assert (zero.stop, zero.end) == ("zero", placed[3][0])
    bad = bytearray(buf)
    bad[placed[4][0] + 5] ^= 0xFF
    result = scan_log(bad, 0, 1024)
    assert (result.stop, result.end) == ("bad", placed[4][0])
    assert "magic" in result.error.reason


def test_iter_spans_rejects_misplaced_blank() -> None:
    data = blank_header(100) + bytes(92) + bytes(50)
    with pytest.raises(RecordError, match="does not end the segment"):
        list(iter_spans(data, 0, len(data)))
    assert [s.blank for s in iter_spans(data[:100], 0, 100)] == [True]


@given(st.binary(max_size=600))
def test_fuzz_scan_log(data: bytes) -> None:
    result = scan_log(data, 0, 512)
    assert 0 <= result.end <= len(data)
    assert result.stop in ("end", "torn", "zero", "bad")
    assert (result.error is not None) == (result.stop == "bad")


def test_iter_log_over_segment_buffers() -> None:
    recs = [sample(body=bytes(100 + i)) for i in range(20)]
    data = bytes(pack_records(recs, 0, 1024, lambda t, q: 0).data)
    data += bytes(-len(data) % 1024)  # the zero fill of the last segment
    segments = [(o, memoryview(data)[o:o + 1024]) for o in range(0, len(data), 1024)]
    offsets = [span.offset for span, _, _ in iter_log(segments)]
    assert len(offsets) == 20
    for span, buf, seg_start in iter_log(segments):
        assert decode(buf, span.offset - seg_start)[0].physical_offset == span.offset
    assert [s.offset for s, _, _ in iter_log(segments, start=offsets[7])] == offsets[7:]
    # ``end`` inside a record: the walk stops before it.
    cut = offsets[12] + 5
    assert [s.offset for s, _, _ in iter_log(segments, end=cut)] == offsets[:12]
    bad = bytearray(data)
    bad[offsets[15] + 4] ^= 1
    broken = [(o, bytes(bad[o:o + 1024])) for o in range(0, len(bad), 1024)]
    with pytest.raises(RecordError) as info:
        list(iter_log(broken))
    assert info.value.offset == offsets[15]
