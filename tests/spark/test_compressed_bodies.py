"""Bodies RocketMQ's producers compressed, read by the store tools, the Spark source's
decoder and the Parquet export as their producers set them.

RocketMQ's Java client compresses a body past 4 KiB with zlib and says so in the
record's sysFlag: bit 0 (COMPRESSED), and from RocketMQ 5 the compression type in
bits 8-10 (3: zlib; 1: LZ4, 2: ZSTD). The records here are packed by hand in
RocketMQ's CommitLog layout, not by triomq's encoder.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import struct
import zlib
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from triomq.plugins.spark_export.arrow_decode import decode_range
from triomq.plugins.spark_export.options import parse_options
from triomq.plugins.spark_export.parquet import export_parquet
from triomq.protocol.inflate import InflateError
from triomq.store_cli import dump_command

MAGIC_V1 = 0xDAA320A7
SEGMENT = 1 << 16
TOPIC = b"Zipped"
BODY = b"a body the producer compressed; " * 200  # 6,400 bytes, over 4 KiB
# sysFlag: RocketMQ 4's compressed (zlib implied), RocketMQ 5's with zlib named, LZ4.
COMPRESSED_4, COMPRESSED_ZLIB, COMPRESSED_LZ4 = 0x1, 0x1 | 3 << 8, 0x1 | 1 << 8


def record(offset: int, queue_offset: int, body: bytes, sys_flag: int) -> bytes:
    """One record as RocketMQ's CommitLog writes it (IPv4 hosts, magic V1)."""
    properties = f"TAGS\x01TagA\x02UNIQ_KEY\x01ID{queue_offset}\x02".encode()
    host = socket.inet_aton("127.0.0.1")
    fixed = struct.pack(">iIiiiqqiq4siq4siiqi", 0, MAGIC_V1, zlib.crc32(body) & 0x7FFFFFFF, 0,
                        0, queue_offset, offset, sys_flag, 1_700_000_000_000, host, 40000,
                        1_700_000_000_001, host, 10911, 0, 0, len(body))
    packed = (fixed + body + struct.pack(">B", len(TOPIC)) + TOPIC
              + struct.pack(">h", len(properties)) + properties)
    return struct.pack(">i", len(packed)) + packed[4:]


def store(root: Path, flags: list[int]) -> list[tuple[int, bytes]]:
    """A store root of one segment holding a record per sysFlag of ``flags`` (its body
    zlib-compressed when the flag says compressed); each record's offset and stored
    body."""
    data, placed = b"", []
    for n, flag in enumerate(flags):
        stored = zlib.compress(BODY) if flag & 1 else BODY
        placed.append((len(data), stored))
        data += record(len(data), n, stored, flag)
    (root / "commitlog").mkdir(parents=True)
    (root / "commitlog" / ("0" * 20)).write_bytes(data + bytes(SEGMENT - len(data)))
    return placed


def test_the_decoder_inflates_compressed_bodies_and_keeps_the_stored_crc(
        tmp_path: Path) -> None:
    placed = store(tmp_path, [0, COMPRESSED_4, COMPRESSED_ZLIB])
    segment = (tmp_path / "commitlog" / ("0" * 20)).read_bytes()
    for segment_size in (SEGMENT, None):  # the C walk first, and the Python walk
        rows = [row for batch in decode_range(segment, 0, segment_size=segment_size)
                for row in batch.to_pylist()]
        assert [(r["physicalOffset"], r["body"], r["bodyCRC"], r["sysFlag"]) for r in rows] \
            == [(offset, BODY, zlib.crc32(stored) & 0x7FFFFFFF, flag)
                for (offset, stored), flag in zip(placed, [0, COMPRESSED_4, COMPRESSED_ZLIB],
                                                  strict=True)]


def test_the_parquet_export_holds_the_inflated_bodies(tmp_path: Path) -> None:
    store(tmp_path / "store", [COMPRESSED_ZLIB, 0])
    export_parquet(parse_options({"path": str(tmp_path / "store")}), str(tmp_path / "out"))
    table = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table()
    assert table.column("body").to_pylist() == [BODY, BODY]


def test_store_dump_prints_the_inflated_bodies(tmp_path: Path) -> None:
    store(tmp_path, [COMPRESSED_ZLIB, 0])
    out, err = io.StringIO(), io.StringIO()
    assert dump_command(str(tmp_path), out, err, as_json=True) == 0, err.getvalue()
    assert [base64.b64decode(json.loads(line)["body"]) for line in out.getvalue().splitlines()] \
        == [BODY, BODY]
    out = io.StringIO()
    assert dump_command(str(tmp_path), out, err, width=20) == 0
    assert all(f"body[{len(BODY)}]=a body the produc..." in line
               for line in out.getvalue().splitlines())


def test_a_body_compressed_otherwise_than_with_zlib_is_refused_naming_it(
        tmp_path: Path) -> None:
    placed = store(tmp_path, [0, COMPRESSED_LZ4])
    segment = (tmp_path / "commitlog" / ("0" * 20)).read_bytes()
    with pytest.raises(InflateError, match=f"record at offset {placed[1][0]}: compression "
                                           f"type 1 is not zlib"):
        list(decode_range(segment, 0, segment_size=SEGMENT))
    with pytest.raises(InflateError, match=f"record at offset {placed[1][0]}: compression "
                                           f"type 1 is not zlib"):
        dump_command(str(tmp_path), io.StringIO(), io.StringIO(), as_json=True)
