"""Writes RocketMQ-layout store roots for the Spark tests and benchmark.

A store is files: preallocated 20-digit segments under ``commitlog/`` filled
by ``commitlog_layout.pack_records`` (blanks included), the binary
``checkpoint`` with a confirm offset, and ``epochFileCheckpoint``.
"""

from __future__ import annotations

import datetime
import os
import struct
from collections.abc import Sequence

from triomq.ha.checkpoint import save_epoch_checkpoint
from triomq.ha.core.epoch import EpochCache
from triomq.protocol.commitlog_layout import (
    COMMITLOG_DIR,
    ROCKETMQ_CHECKPOINT,
    iter_spans,
    pack_records,
    segment_name,
    segment_start,
    sorted_segments,
)
from triomq.protocol.message import MessageRecord, RecordError, body_crc, decode


class StoreWriter:
    """Appends records to a store root the way a broker's commit log lays them out."""

    def __init__(self, root: str, segment_size: int) -> None:
        self.root = root
        self.segment_size = segment_size
        self.end = 0
        self.placed: list[tuple[int, int, int]] = []
        self._queues: dict[tuple[str, int], int] = {}
        os.makedirs(os.path.join(root, COMMITLOG_DIR), exist_ok=True)

    def append(self, records: Sequence[MessageRecord]) -> list[tuple[int, int, int]]:
        """Append ``records``; return ``(physical offset, size, queue offset)`` of each."""
        def next_queue_offset(topic: str, queue_id: int) -> int:
            return self._queues.get((topic, queue_id), 0)

        packed = pack_records(records, self.end, self.segment_size, next_queue_offset)
        data, placed = packed.data, packed.placed
        for record, (_, _, qoff) in zip(records, placed, strict=True):
            self._queues[record.topic, record.queue_id] = qoff + 1
        self.write_raw(self.end, bytes(data))
        self.placed.extend(placed)
        return placed

    def write_raw(self, offset: int, data: bytes) -> None:
        """Write bytes at ``offset`` into preallocated segments (may leave a torn tail)."""
        pos = 0
        while pos < len(data):
            at = offset + pos
            start = segment_start(at, self.segment_size)
            n = min(len(data) - pos, start + self.segment_size - at)
            path = os.path.join(self.root, COMMITLOG_DIR, segment_name(start))
            if not os.path.exists(path):
                with open(path, "wb") as f:
                    f.truncate(self.segment_size)
            with open(path, "r+b") as f:
                f.seek(at - start)
                f.write(data[pos:pos + n])
            pos += n
        self.end = max(self.end, offset + len(data))

    def set_confirm_offset(self, offset: int) -> None:
        """Write RocketMQ's ``checkpoint`` with ``confirmPhyOffset = offset``."""
        content = bytearray(4096)
        struct.pack_into(">q", content, 32, offset)
        with open(os.path.join(self.root, ROCKETMQ_CHECKPOINT), "wb") as f:
            f.write(content)

    def set_epochs(self, starts: Sequence[tuple[int, int]]) -> None:
        """Save the epoch checkpoint ``[(epoch, start offset), ...]``."""
        cache = EpochCache()
        for epoch, start in starts:
            cache = cache.append(epoch, start)
        save_epoch_checkpoint(self.root, cache)


def sample_records(n: int, *, topics: Sequence[str] = ("orders", "payments", "audit"),
                   body_size: int = 64, start: int = 0) -> list[MessageRecord]:
    """``n`` varied records: topics, queues, tags, keys, IPv4 and IPv6 hosts."""
    out = []
    for i in range(start, start + n):
        props = {"TAGS": f"tag{i % 5}", "UNIQ_KEY": f"U{i:08d}"}
        if i % 3 == 0:
            props["KEYS"] = f"k{i}"
        out.append(MessageRecord(
            topic=topics[i % len(topics)],
            body=(f"message {i} ".encode() * (body_size // 10 + 1))[:body_size],
            queue_id=i % 4,
            flag=i % 7,
            sys_flag=0,
            born_timestamp=1_700_000_000_000 + i,
            born_host=("10.0.0.1", 40000 + i % 3) if i % 11 else ("::1", 5000),
            store_timestamp=1_700_000_000_500 + i,
            store_host=("192.168.1.7", 10911),
            reconsume_times=i % 2,
            properties=props,
        ))
    return out


def decode_store(root: str) -> list[dict]:
    """Every record of the store, decoded one by one with ``message.decode``, as rows."""
    directory = os.path.join(root, COMMITLOG_DIR)
    rows = []
    for start, name in sorted_segments(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        try:
            for span in iter_spans(data, base_offset=start):
                if not span.blank:
                    record, size = decode(data, span.offset - start, base_offset=start)
                    rows.append(record_row(record, size))
        except RecordError:
            break
    return rows


def record_row(record: MessageRecord, size: int) -> dict:
    """The data source's row for ``record`` (timestamps in milliseconds)."""
    def host(h: tuple[str, int]) -> str:
        return f"[{h[0]}]:{h[1]}" if ":" in h[0] else f"{h[0]}:{h[1]}"

    return {
        "physicalOffset": record.physical_offset,
        "size": size,
        "topic": record.topic,
        "queueId": record.queue_id,
        "queueOffset": record.queue_offset,
        "body": record.body,
        "bodyCRC": body_crc(record.body),
        "tags": record.properties.get("TAGS"),
        "keys": record.properties.get("KEYS"),
        "properties": dict(record.properties),
        "sysFlag": record.sys_flag,
        "flag": record.flag,
        "reconsumeTimes": record.reconsume_times,
        "bornTimestamp": record.born_timestamp,
        "storeTimestamp": record.store_timestamp,
        "bornHost": host(record.born_host),
        "storeHost": host(record.store_host),
        "preparedTransactionOffset": record.prepared_transaction_offset,
    }


def normalize(rows: list[dict]) -> list[dict]:
    """Rows from Arrow ``to_pylist`` made comparable with ``record_row``'s."""
    out = []
    for row in rows:
        row = dict(row)
        for key in ("bornTimestamp", "storeTimestamp"):
            if isinstance(row.get(key), datetime.datetime):
                row[key] = round(row[key].timestamp() * 1000)
        if isinstance(row.get("properties"), list):
            row["properties"] = dict(row["properties"])
        out.append(row)
    return sorted(out, key=lambda r: r["physicalOffset"])
