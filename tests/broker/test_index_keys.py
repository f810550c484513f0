"""The index's keys and puts: the C versions give what the Python references give."""

from __future__ import annotations

import struct

import pytest

from triomq.broker.index.core import index_dispatch
from triomq.broker.index.core.index_dispatch import KEY_ENTRY, key_hashes, key_hashes_py
from triomq.broker.index.core.index_file import IndexFile, file_size, key_hash
from triomq.protocol.message import (
    BLANK_MAGIC,
    TRANSACTION_ROLLBACK,
    MessageRecord,
    RecordError,
    encode,
)

speedups = index_dispatch._speedups
needs_c = pytest.mark.skipif(not index_dispatch.SPEEDUPS, reason="C speedups not built")
SEGMENT = 4096


def record(topic: str = "orders", sys_flag: int = 0, **properties: str) -> bytes:
    return encode(MessageRecord(topic=topic, body=b"body", sys_flag=sys_flag,
                                store_timestamp=1_700_000_000_123, born_host=("::1", 9),
                                properties=properties))


def log_bytes() -> bytes:
    """Records of every kind the index meets, a blank to the segment's end, more
    records, then the start of a record cut short."""
    first = b"".join([
        record(UNIQ_KEY="7F000001000000000000000000000001", KEYS="a  b a"),
        record(topic="pedidos-ñ", KEYS="clé 鍵 😀"),
        record(UNIQ_KEY="", KEYS=""),
        record(TAGS="t"),
        record(sys_flag=TRANSACTION_ROLLBACK, UNIQ_KEY="rolled", KEYS="back"),
        record(KEYS="first", UNIQ_KEY="u1", **{"KEYS ": "not keys"}),
    ])
    blank = struct.pack(">iI", SEGMENT - len(first), BLANK_MAGIC)
    first += blank + bytes(SEGMENT - len(first) - len(blank))
    second = record(topic="t" * 200, KEYS="long-topic")  # a V2 record
    return first + second + record(KEYS="cut")[:50]


def test_the_keys_of_every_kind_of_record() -> None:
    data = log_bytes()
    entries, following = key_hashes_py(data, 0, SEGMENT)
    keys = [(h, offset) for h, offset, _ in KEY_ENTRY.iter_unpack(entries)]
    expected = [("orders#7F000001000000000000000000000001", 0), ("orders#a", 0),
                ("orders#b", 0), ("orders#a", 0)]
    second = len(record(UNIQ_KEY="7F000001000000000000000000000001", KEYS="a  b a"))
    expected += [(f"pedidos-ñ#{k}", second) for k in ("clé", "鍵", "😀")]
    assert keys[:7] == [(key_hash(k), offset) for k, offset in expected]
    assert key_hash("pedidos-ñ#😀") != key_hash("pedidos-ñ#?")  # surrogate pairs hashed
    assert len(keys) == 7 + 2  # rolled back: none; KEYS and UNIQ_KEY of the sixth
    assert following == SEGMENT  # the blank: the next read starts at the next segment
    entries, following = key_hashes_py(data[SEGMENT:], SEGMENT, SEGMENT)
    assert entries == KEY_ENTRY.pack(key_hash(f"{'t' * 200}#long-topic"), SEGMENT,
                                     1_700_000_000_123)
    assert following == SEGMENT + len(record(topic="t" * 200, KEYS="long-topic"))


@needs_c
@pytest.mark.parametrize("base", [0, 7 * SEGMENT])
def test_c_key_hashes_are_the_python_ones(base: int) -> None:
    data = log_bytes()
    for start, end in [(0, len(data)), (0, SEGMENT - 1), (0, 100), (0, 8), (0, 0),
                       (SEGMENT, len(data)), (SEGMENT, len(data) - 50)]:
        found = speedups.key_hashes(data[start:end], base + start, SEGMENT)
        assert found == key_hashes_py(data[start:end], base + start, SEGMENT), (start, end)


@needs_c
def test_c_hands_a_bad_record_to_python_which_names_it() -> None:
    good = record(KEYS="k")
    bad_utf8 = bytearray(record(KEYS="k\u00e9"))
    bad_utf8[bad_utf8.index("é".encode())] = 0xFF
    for data in (good + b"\x00\x00\x00\x40\x12\x34\x56\x78" + bytes(64), good + bad_utf8):
        assert speedups.key_hashes(data, 0, SEGMENT) is None
        with pytest.raises(RecordError) as error:
            key_hashes(data, 0, SEGMENT)
        assert error.value.offset == len(good)


def entries(count: int) -> bytes:
    return b"".join(KEY_ENTRY.pack(key_hash(f"t#k{i % 9}"), 1000 + i * 10,
                                   1_700_000_000_000 + i * 1500) for i in range(count))


@needs_c
def test_c_puts_write_the_bytes_python_writes() -> None:
    slot_num, index_num = 5, 12  # slots shared, files filled
    batch = entries(30)
    files = []
    for put in ("put_hashed", "put_hashed_py"):
        written, done = [], 0
        while done < 30:
            buf = bytearray(file_size(slot_num, index_num))
            index = IndexFile.create(buf, slot_num, index_num)
            done += getattr(index, put)(batch, done)
            assert IndexFile(buf, slot_num, index_num).header == index.header
            written.append(bytes(buf))
        files.append(written)
    assert files[0] == files[1] and len(files[0]) == 3  # 11 entries a file
    index = IndexFile(bytearray(files[0][0]), slot_num, index_num)
    assert index.select("t#k3", 10, 0, 2**62) == [1000 + 3 * 10]
