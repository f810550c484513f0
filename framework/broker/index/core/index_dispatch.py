"""Which index keys the records of a commit-log stretch carry, sans-I/O.

RocketMQ's ``IndexService.buildIndex`` rule: a record is indexed under
``topic#key`` for its ``UNIQ_KEY`` property (the client's message id) and
for each word of its ``KEYS`` property (space-separated), unless it is a
rolled-back transactional message. ``walk`` reads the records of bytes
read from a log (already checked by the store: it reads only the fields
the index needs) and says where the next read starts: after the last
whole record, or at the next segment for a blank. ``key_hashes`` gives the
same walk's keys as index entries ready for ``IndexFile.put_hashed``
(``keyHash:4 | phyOffset:8 | storeTimestamp:8`` each); its C version
(``triomq.protocol._speedups``) runs without the GIL, so the index service
hashes a batch in a worker thread while the broker's loop goes on.
"""

from __future__ import annotations

import struct

import attrs

from triomq.broker.index.core.index_file import key_hash
from triomq.protocol.extensions import optional_extension
from triomq.protocol.message import (
    BLANK_MAGIC,
    BORNHOST_V6,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
    STOREHOST_V6,
    TRANSACTION_ROLLBACK,
    RecordError,
    properties_from_bytes,
)

__all__ = ["KEY_ENTRY", "KEY_SEPARATOR", "SPEEDUPS", "IndexedRecord", "index_keys",
           "key_hashes", "key_hashes_py", "walk"]

KEY_SEPARATOR = " "

_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_Q64 = struct.Struct(">q")
_TOTAL_MAGIC = struct.Struct(">iI")
#: One hashed key: keyHash, phyOffset, storeTimestamp.
KEY_ENTRY = struct.Struct(">iqq")

_speedups = optional_extension("_speedups")  # None: the pure-Python versions
_key_hashes = getattr(_speedups, "key_hashes", None)
#: Whether ``key_hashes`` runs in C, without the GIL.
SPEEDUPS = _key_hashes is not None


@attrs.frozen
class IndexedRecord:
    """A record's place, store time and index keys (``topic#key``)."""

    offset: int
    size: int
    store_timestamp: int
    keys: tuple[str, ...]


def index_keys(topic: str, properties: dict[str, str], sys_flag: int) -> tuple[str, ...]:
    """The index keys of a record (none for a rolled-back transactional message)."""
    if sys_flag & TRANSACTION_ROLLBACK == TRANSACTION_ROLLBACK:
        return ()
    keys = []
    uniq = properties.get(PROPERTY_UNIQ_KEY)
    if uniq:
        keys.append(f"{topic}#{uniq}")
    keys.extend(f"{topic}#{key}" for key in properties.get(PROPERTY_KEYS, "").split(
        KEY_SEPARATOR) if key)
    return tuple(keys)


def _record(buf: bytes | memoryview, pos: int, total: int, magic: int,
            base_offset: int) -> IndexedRecord:
    end = pos + total
    sys_flag = _I32.unpack_from(buf, pos + 36)[0]
    born6 = 12 if sys_flag & BORNHOST_V6 else 0
    store6 = 12 if sys_flag & STOREHOST_V6 else 0
    store_timestamp = _Q64.unpack_from(buf, pos + 56 + born6)[0]
    at = pos + 84 + born6 + store6
    body_length = _I32.unpack_from(buf, at)[0]
    at += 4 + body_length
    if body_length < 0 or at + 3 > end:
        raise RecordError(base_offset + pos, f"body length {body_length} does not fit")
    if magic == MAGIC_V2:
        topic_length = _U16.unpack_from(buf, at)[0]
        at += 2
    else:
        topic_length = buf[at]
        at += 1
    if at + topic_length + 2 > end:
        raise RecordError(base_offset + pos, f"topic length {topic_length} does not fit")
    try:
        topic = bytes(buf[at:at + topic_length]).decode()
    except UnicodeDecodeError:
        raise RecordError(base_offset + pos, "topic is not valid UTF-8") from None
    at += topic_length
    props_length = _U16.unpack_from(buf, at)[0]
    if at + 2 + props_length > end:
        raise RecordError(base_offset + pos, f"properties length {props_length} does not fit")
    properties = properties_from_bytes(bytes(buf[at + 2:at + 2 + props_length]),
                                       base_offset + pos)
    return IndexedRecord(base_offset + pos, total, store_timestamp,
                         index_keys(topic, properties, sys_flag))


def walk(buf: bytes | memoryview, base_offset: int, segment_size: int
         ) -> tuple[list[IndexedRecord], int]:
    """The records wholly in ``buf`` (read from physical ``base_offset``, a record
    boundary) and the offset the next read starts at; ``RecordError`` for bytes that
    are not a record."""
    records: list[IndexedRecord] = []
    pos = 0
    while len(buf) - pos >= 8:
        total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
        if magic == BLANK_MAGIC:
            # The rest of the segment is padding: go on at the next one.
            physical = base_offset + pos
            return records, physical - physical % segment_size + segment_size
        if total == 0:
            break  # the zero fill past the log's end
        if magic not in (MAGIC_V1, MAGIC_V2) or total < MIN_RECORD_SIZE:
            raise RecordError(base_offset + pos, f"no record here (magic 0x{magic:08X}, "
                                                 f"total size {total})")
        if total > len(buf) - pos:
            break  # read the rest with the next read
        records.append(_record(buf, pos, total, magic, base_offset))
        pos += total
    return records, base_offset + pos


def key_hashes_py(buf: bytes | memoryview, base_offset: int, segment_size: int
                  ) -> tuple[bytes, int]:
    """``walk``'s records as hashed keys, in log order, and where the next read starts."""
    records, following = walk(buf, base_offset, segment_size)
    pack = KEY_ENTRY.pack
    entries = b"".join(pack(key_hash(key), record.offset, record.store_timestamp)
                       for record in records for key in record.keys)
    return entries, following


def key_hashes(buf: bytes | memoryview, base_offset: int, segment_size: int
               ) -> tuple[bytes, int]:
    """``key_hashes_py``, in C where it is built (the Python version judges anything
    unusual and raises its ``RecordError``)."""
    if _key_hashes is not None:
        found = _key_hashes(buf, base_offset, segment_size)
        if found is not None:
            entries, following = found
            return entries, following
    return key_hashes_py(buf, base_offset, segment_size)
