"""``record_columns`` (C) builds the columns ``message.decode`` reads, or answers None."""

from __future__ import annotations

import array
import ipaddress
import os
import struct
import subprocess
import sys

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triomq.protocol import columns
from triomq.protocol.columns import RecordColumns, VarColumn, record_columns
from triomq.protocol.message import MessageRecord, decode, encode

pytestmark = pytest.mark.skipif(not columns.SPEEDUPS, reason="C extension not built")

MAX_MILLIS = (2**63 - 1) // 1000


def ints(raw: memoryview, code: str) -> list[int]:
    values = array.array(code)
    values.frombytes(raw)
    return values.tolist()


def valid(bitmap: memoryview | None, n: int) -> list[bool]:
    return [bitmap is None or bool(bitmap[i >> 3] >> (i & 7) & 1) for i in range(n)]


def values(column: VarColumn, n: int) -> list[bytes | None]:
    offsets = ints(column.offsets, "i")
    assert len(offsets) == n + 1 and offsets[-1] == len(column.data)
    data = bytes(column.data)
    return [data[offsets[i]:offsets[i + 1]] if ok else None
            for i, ok in enumerate(valid(column.validity, n))]


def timestamps(raw: memoryview, bitmap: memoryview | None, n: int) -> list[int | None]:
    return [v if ok else None for v, ok in zip(ints(raw, "q"), valid(bitmap, n), strict=True)]


def rows(c: RecordColumns) -> list[dict]:
    """The columns as one dict per record, in ``expected_row``'s terms."""
    n = c.count
    starts = ints(c.property_offsets, "i")
    pkeys = values(c.property_keys, starts[-1])
    pvalues = values(c.property_values, starts[-1])
    text = {name: [None if v is None else v.decode() for v in values(getattr(c, name), n)]
            for name in ("topic", "tags", "keys", "born_host", "store_host")}
    out = []
    for i in range(n):
        pairs = range(starts[i], starts[i + 1])
        out.append({
            "physical_offset": ints(c.physical_offset, "q")[i],
            "size": ints(c.size, "i")[i],
            "queue_id": ints(c.queue_id, "i")[i],
            "queue_offset": ints(c.queue_offset, "q")[i],
            "body": values(c.body, n)[i],
            "body_crc": ints(c.body_crc, "i")[i],
            "properties": [(pkeys[k].decode(), pvalues[k].decode()) for k in pairs],
            "sys_flag": ints(c.sys_flag, "i")[i],
            "flag": ints(c.flag, "i")[i],
            "reconsume_times": ints(c.reconsume_times, "i")[i],
            "born_timestamp": timestamps(c.born_timestamp, c.born_timestamp_validity, n)[i],
            "store_timestamp": timestamps(c.store_timestamp, c.store_timestamp_validity, n)[i],
            "prepared_transaction_offset": ints(c.prepared_transaction_offset, "q")[i],
            **{name: column[i] for name, column in text.items()},
        })
    return out


def host(h: tuple[str, int]) -> str:
    return f"[{h[0]}]:{h[1]}" if ipaddress.ip_address(h[0]).version == 6 else f"{h[0]}:{h[1]}"


def micros(millis: int) -> int | None:
    return millis * 1000 if abs(millis) <= MAX_MILLIS else None


def expected_row(buf: bytes, pos: int) -> dict:
    record, size = decode(buf, pos)
    return {
        "physical_offset": record.physical_offset, "size": size, "queue_id": record.queue_id,
        "queue_offset": record.queue_offset, "body": record.body,
        "body_crc": struct.unpack_from(">i", buf, pos + 8)[0],
        "properties": list(record.properties.items()), "sys_flag": record.sys_flag,
        "flag": record.flag, "reconsume_times": record.reconsume_times,
        "born_timestamp": micros(record.born_timestamp),
        "store_timestamp": micros(record.store_timestamp),
        "prepared_transaction_offset": record.prepared_transaction_offset,
        "topic": record.topic, "tags": record.properties.get("TAGS"),
        "keys": record.properties.get("KEYS"), "born_host": host(record.born_host),
        "store_host": host(record.store_host),
    }


text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
               max_size=10)
hosts = st.tuples(
    st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6).filter(lambda a: not a.ipv4_mapped),
              st.sampled_from(["::", "::1", "1::", "1:0:0:2::3", "0:0:1::"])).map(str),
    st.integers(-(2**31), 2**31 - 1),
)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63) + 1, 2**63 - 1)
record_st = st.builds(
    MessageRecord,
    topic=st.one_of(text, st.just("t" * 200)),
    body=st.binary(max_size=40),
    queue_id=int32, flag=int32, queue_offset=int64, physical_offset=int64,
    sys_flag=st.sampled_from([0, 1, 2, 4, 8, 0xC]),
    born_timestamp=st.one_of(int64, st.integers(0, 2**41)), born_host=hosts,
    store_timestamp=st.one_of(int64, st.just(-MAX_MILLIS - 1)), store_host=hosts,
    reconsume_times=int32, prepared_transaction_offset=int64,
    properties=st.dictionaries(st.one_of(st.sampled_from(["TAGS", "KEYS"]), text), text,
                               max_size=4),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(record_st, min_size=1, max_size=8), st.booleans())
def test_columns_match_message_decode(records, verify_crc):
    encoded = [encode(r) for r in records]
    buf = b"".join(encoded)
    starts = [sum(map(len, encoded[:i])) for i in range(len(encoded))]
    got = record_columns(buf, starts, len(buf), verify_crc=verify_crc)
    assert got is not None
    assert rows(got) == [expected_row(buf, pos) for pos in starts]


def test_int32_buffer_starts_and_a_run_inside_a_larger_buffer():
    one = encode(MessageRecord(topic="a", properties={"TAGS": "x"}))
    buf = b"\0" * 8 + one * 3 + b"\xff" * 5
    starts = [8 + i * len(one) for i in range(3)]
    got = record_columns(buf, memoryview(array.array("i", starts)).cast("B"), 8 + 3 * len(one))
    assert got is not None and [r["tags"] for r in rows(got)] == ["x"] * 3


@pytest.mark.parametrize("change", [
    {"properties_raw": b"a\x01b"},                # not terminated
    {"properties_raw": b"\x02k\x01v\x02"},        # an empty pair
    {"properties_raw": b"novalue\x02"},           # no separator
    {"properties_raw": b"k\x01\xff\x02"},         # not UTF-8
    {"born_host": ("::ffff:1.2.3.4", 1)},         # written differently by Python 3.13
    {"born_timestamp": -(2**63)},                 # no microsecond value, not even null
    {"topic_raw": b"\xc3"},                       # not UTF-8
    {"crc": 1},
    {"magic": 0xCBD43194},
    {"total": 1},
])
def test_records_left_to_python(change):
    record = MessageRecord(topic="t", body=b"hello")
    record = attrs.evolve(record, **{k: v for k, v in change.items()
                                     if k in ("born_host", "born_timestamp")})
    raw = bytearray(encode(record))
    if "properties_raw" in change:
        raw = raw[:-2] + struct.pack(">H", len(change["properties_raw"])) + change["properties_raw"]
        struct.pack_into(">i", raw, 0, len(raw))
    if "topic_raw" in change:
        raw[-3] = change["topic_raw"][0]  # the one-byte topic "t"
    if "crc" in change:
        struct.pack_into(">i", raw, 8, change["crc"])
    if "magic" in change:
        struct.pack_into(">I", raw, 4, change["magic"])
    if "total" in change:
        struct.pack_into(">i", raw, 0, len(raw) + change["total"])
    assert record_columns(bytes(raw), [0], len(raw)) is None


def test_crc_is_only_checked_when_asked():
    raw = bytearray(encode(MessageRecord(topic="t", body=b"hello")))
    struct.pack_into(">i", raw, 8, 1)
    assert record_columns(bytes(raw), [0], len(raw), verify_crc=False) is not None


def test_runs_past_the_buffer_are_left_to_python():
    raw = encode(MessageRecord(topic="t"))
    assert record_columns(raw, [0], len(raw) + 1) is None
    assert record_columns(raw, [], len(raw)) is None
    assert record_columns(raw * 2, [len(raw), 0], 2 * len(raw)) is None


def test_no_speedups_disables_the_c_pass():
    env = dict(os.environ, TRIOMQ_NO_SPEEDUPS="1")
    script = "from triomq.protocol import columns; print(columns.SPEEDUPS)"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True, cwd=os.path.dirname(os.path.dirname(
                             os.path.dirname(os.path.abspath(__file__)))))
    assert out.stdout.strip() == "False"


def test_buffers_stay_intact_while_later_runs_reuse_freed_memory():
    def run(topic: str) -> tuple[bytes, RecordColumns]:
        records = [MessageRecord(topic=topic, body=bytes([i % 251]) * 300,
                                 properties={"TAGS": topic}) for i in range(400)]
        encoded = [encode(r) for r in records]
        buf = b"".join(encoded)
        starts = [sum(map(len, encoded[:i])) for i in range(len(encoded))]
        got = record_columns(buf, starts, len(buf))
        assert got is not None
        return buf, got

    kept_buf, kept = run("first")
    want = rows(kept)
    for i in range(20):  # each run frees its blocks (64 KiB and more) for the next
        run(f"t{i}")
    assert rows(kept) == want == [expected_row(kept_buf, pos) for pos in
                                  [r * ints(kept.size, "i")[0] for r in range(400)]]
    assert bytes(kept.body.data[:300]) == bytes([0]) * 300
