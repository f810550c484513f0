"""The index file's arithmetic against RocketMQ's layout, byte by byte, and the key rules."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from triomq.broker.index.core.index_dispatch import index_keys, walk
from triomq.broker.index.core.index_file import IndexFile, file_size, java_hash, key_hash
from triomq.protocol.commitlog_layout import blank_header
from triomq.protocol.message import TRANSACTION_COMMIT, TRANSACTION_ROLLBACK, MessageRecord, encode

SLOTS, ENTRIES = 4, 8
T0 = 1_700_000_000_000


def slot(buf: bytearray, number: int) -> int:
    return struct.unpack_from(">i", buf, 40 + number * 4)[0]


def entry(buf: bytearray, number: int) -> tuple[int, int, int, int]:
    """keyHash, phyOffset, timeDiff, prevIndex of entry ``number`` (40 + slots + n * 20)."""
    return struct.unpack_from(">iqii", buf, 40 + SLOTS * 4 + number * 20)


def header(buf: bytearray) -> tuple[int, ...]:
    """beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount."""
    return struct.unpack_from(">qqqqii", buf, 0)


def test_java_string_hash_codes() -> None:
    assert java_hash("hello") == 99162322
    assert java_hash("Aa") == java_hash("BB") == 2112
    assert java_hash("") == 0
    assert java_hash("polygenelubricants") == -(2**31)
    assert key_hash("polygenelubricants") == 0  # Math.abs overflows: RocketMQ uses 0
    assert key_hash("orders#k") == abs(java_hash("orders#k"))
    assert java_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # UTF-16 code units


def test_puts_land_where_rocketmq_puts_them() -> None:
    buf = bytearray(file_size(SLOTS, ENTRIES))
    assert len(buf) == 40 + 4 * 4 + 8 * 20
    index = IndexFile.create(buf, SLOTS, ENTRIES)
    assert header(buf) == (0, 0, 0, 0, 0, 1)
    # "Aa" and "BB" share a hash, so a slot: the second chains to the first.
    assert index.put_key("Aa", 1000, T0)
    assert index.put_key("hello", 2000, T0 + 1999)
    assert index.put_key("BB", 3000, T0 + 5500)
    assert header(buf) == (T0, T0 + 5500, 1000, 3000, 2, 4)
    aa_slot, hello_slot = 2112 % SLOTS, 99162322 % SLOTS
    assert (slot(buf, aa_slot), slot(buf, hello_slot)) == (3, 2)
    assert entry(buf, 1) == (2112, 1000, 0, 0)
    assert entry(buf, 2) == (99162322, 2000, 1, 0)  # 1.999 s: whole seconds
    assert entry(buf, 3) == (2112, 3000, 5, 1)
    assert entry(buf, 0) == (0, 0, 0, 0)  # entry 0 is never used
    # Reading back: newest first, hash and time range checked.
    reopened = IndexFile(buf, SLOTS, ENTRIES)
    assert reopened.select("BB", 10, 0, 2**62) == [3000, 1000]  # same hash: both
    assert reopened.select("Aa", 1, 0, 2**62) == [3000]
    assert reopened.select("hello", 10, T0, T0 + 1000) == [2000]
    assert reopened.select("Aa", 10, T0 + 4000, 2**62) == [3000]
    assert reopened.select("nothing", 10, 0, 2**62) == []
    assert reopened.time_matched(T0 - 10, T0 + 10) and not reopened.time_matched(0, T0 - 1)


def test_a_full_file_refuses_and_the_next_begins_where_it_ended() -> None:
    buf = bytearray(file_size(SLOTS, 3))
    index = IndexFile.create(buf, SLOTS, 3)
    assert index.put_key("a", 10, T0) and index.put_key("b", 20, T0 + 1000)
    assert index.is_full and not index.put_key("c", 30, T0 + 2000)
    following = bytearray(file_size(SLOTS, 3))
    IndexFile.create(following, SLOTS, 3, end_phy_offset=20, end_timestamp=T0 + 1000)
    assert header(following) == (T0 + 1000, T0 + 1000, 20, 20, 0, 1)
    nxt = IndexFile(following, SLOTS, 3)
    assert nxt.header.index_count == 1  # a new file's count starts at 1
    assert nxt.put_key("c", 30, T0 + 4000)
    assert entry(following, 1)[2] == 3  # seconds since the previous file's end...
    # ...then, as RocketMQ does, the first entry makes the file's begin its own.
    assert header(following)[:4] == (T0 + 4000, T0 + 4000, 30, 30)


def test_index_keys_and_the_walk_over_records() -> None:
    assert index_keys("t", {"KEYS": "k1  k2", "UNIQ_KEY": "U"}, 0) == ("t#U", "t#k1", "t#k2")
    assert index_keys("t", {"KEYS": "k1"}, TRANSACTION_ROLLBACK) == ()
    assert index_keys("t", {"KEYS": "k1"}, TRANSACTION_COMMIT) == ("t#k1",)
    segment = 512
    first = encode(MessageRecord("orders", b"x" * 100, properties={"KEYS": "a"},
                                 store_timestamp=T0, physical_offset=0))
    second = encode(MessageRecord("orders", b"y", properties={"UNIQ_KEY": "U1"},
                                  store_host=("::1", 9), physical_offset=len(first)))
    log = first + second
    log += blank_header(segment - len(log)) + bytes(segment - len(log) - 8)
    third = encode(MessageRecord("t" * 200, b"", properties={"KEYS": "z"},
                                 physical_offset=segment))
    log += third
    records, following = walk(log, 0, segment)
    assert [(r.offset, r.keys) for r in records] == [(0, ("orders#a",)),
                                                     (len(first), ("orders#U1",))]
    assert records[0].store_timestamp == T0 and following == segment
    records, following = walk(log[segment:], segment, segment)
    assert records[0].keys == ("t" * 200 + "#z",) and following == segment + len(third)
    # A record cut by the read's end is left for the next read.
    assert walk(log[:len(first) + 10], 0, segment) == (walk(first, 0, segment)[0], len(first))


def _reference_hash(text: str) -> int:
    """Java's String.hashCode, one UTF-16 code unit at a time."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@given(st.text(max_size=300))
def test_java_hash_is_string_hash_code(text: str) -> None:
    assert java_hash(text) == _reference_hash(text)
