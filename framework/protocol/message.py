"""Commit-log message records in RocketMQ's layout, sans-I/O.

A record is the unit a commit log stores::

    totalSize:4 | magicCode:4 | bodyCRC:4 | queueId:4 | flag:4 | queueOffset:8
    | physicalOffset:8 | sysFlag:4 | bornTimestamp:8 | bornHost:8 (20 if v6)
    | storeTimestamp:8 | storeHost:8 (20 if v6) | reconsumeTimes:4
    | preparedTransactionOffset:8 | bodyLength:4 body | topicLength:1 (2 in v2) topic
    | propertiesLength:2 properties

All integers are big-endian. ``magicCode`` is ``MAGIC_V1`` unless the topic
is longer than 127 bytes, then ``MAGIC_V2`` and a 2-byte topic length. The
hosts are IPv6 (16-byte address) when ``sysFlag`` has ``BORNHOST_V6`` /
``STOREHOST_V6``. ``bodyCRC`` is CRC-32 of the body masked to 31 bits.

``encode`` and ``decode`` only touch bytes; ``decode`` raises ``RecordError``
with the offset and the reason of the first thing it cannot accept, and never
allocates more than the buffer it was given holds.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from collections.abc import Mapping

import attrs

from triomq.errors import TriomqError

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194

# sysFlag bits (RocketMQ's MessageSysFlag).
COMPRESSED = 0x1
MULTI_TAGS = 0x2
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC
BORNHOST_V6 = 0x10
STOREHOST_V6 = 0x20
# sysFlag bits 8-10 name the compression of a compressed body (RocketMQ 5);
# 0 is the zlib of older clients, 3 is zlib named.
COMPRESSION_TYPE_MASK = 0x700
ZLIB_COMPRESSION_TYPES = (0, 3)


def zlib_compressed(sys_flag: int) -> bool:
    """Whether a body with ``sys_flag`` is compressed with zlib (not LZ4 or ZSTD)."""
    return bool(sys_flag & COMPRESSED) and (
        (sys_flag & COMPRESSION_TYPE_MASK) >> 8 in ZLIB_COMPRESSION_TYPES)

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# RocketMQ's MessageConst property names.
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_DELAY = "DELAY"
PROPERTY_WAIT = "WAIT"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_CLUSTER = "CLUSTER"

#: The smallest possible record: IPv4 hosts, empty body, topic and properties.
MIN_RECORD_SIZE = 91
#: Java's ``short`` bounds the properties length.
MAX_PROPERTIES_LENGTH = 0x7FFF
MAX_TOPIC_LENGTH_V1 = 127
MAX_TOPIC_LENGTH_V2 = 0x7FFF

_TOTAL_MAGIC = struct.Struct(">iI")
_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_Q64 = struct.Struct(">q")

# Fixed part of a record for each (born v6, store v6) pair: every field up to
# and including bodyLength.
_FIXED = {
    (b6, s6): struct.Struct(
        ">iIiiiqqiq" + ("16si" if b6 else "4si") + "q" + ("16si" if s6 else "4si") + "iqi"
    )
    for b6 in (False, True)
    for s6 in (False, True)
}


class RecordError(TriomqError, ValueError):
    """A record cannot be encoded or decoded; ``offset`` is where, ``reason`` is why."""

    def __init__(self, offset: int, reason: str) -> None:
        self.offset = offset
        self.reason = reason
        super().__init__(f"bad record at offset {offset}: {reason}")


def _host_converter(value: tuple[str, int] | list) -> tuple[str, int]:
    host, port = value
    return (str(host), int(port))


@attrs.frozen
class MessageRecord:
    """One commit-log record; ``properties`` maps property names to values.

    ``born_host`` and ``store_host`` are ``(ip, port)``; an IPv6 ``ip`` makes
    ``encode`` set the matching sysFlag bit (``BORNHOST_V6``/``STOREHOST_V6``).
    ``physical_offset`` and ``queue_offset`` are assigned by the commit log on
    append.
    """

    topic: str
    body: bytes = b""
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = attrs.field(default=("127.0.0.1", 0), converter=_host_converter)
    store_timestamp: int = 0
    store_host: tuple[str, int] = attrs.field(default=("127.0.0.1", 0), converter=_host_converter)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: Mapping[str, str] = attrs.field(factory=dict, converter=dict, hash=False)

    @property
    def tags(self) -> str | None:
        """The ``TAGS`` property, if any."""
        return self.properties.get("TAGS")


def body_crc(body: bytes | memoryview) -> int:
    """RocketMQ's body checksum: CRC-32 masked to 31 bits."""
    return zlib.crc32(body) & 0x7FFFFFFF


@functools.lru_cache(maxsize=1024)
@functools.lru_cache(maxsize=1024)  # per record otherwise, for the few hosts there are
def pack_ip(ip: str) -> bytes:
    """The packed (4 or 16 byte) address of an IPv4 or IPv6 ``ip``; ``RecordError`` if none."""
    try:
        return ipaddress.ip_address(ip).packed
    except ValueError:
        raise RecordError(0, f"host address {ip!r} is not an IPv4 or IPv6 address") from None


def properties_to_bytes(properties: Mapping[str, str]) -> bytes:
    """Serialize properties as ``key\\x01value\\x02`` repeated (UTF-8)."""
    if not properties:
        return b""
    text = PROPERTY_SEPARATOR.join(map(NAME_VALUE_SEPARATOR.join, properties.items()))
    text += PROPERTY_SEPARATOR
    n = len(properties)
    # Every separator must be one we put there.
    if text.count(NAME_VALUE_SEPARATOR) != n or text.count(PROPERTY_SEPARATOR) != n:
        raise RecordError(0, "a property name or value contains a separator character")
    return text.encode()


def properties_from_bytes(raw: bytes, offset: int = 0) -> dict[str, str]:
    """Parse the properties field; ``offset`` is only used in errors."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise RecordError(offset, "properties are not valid UTF-8") from None
    props: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if not item:
            continue
        key, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if not sep:
            raise RecordError(offset, f"property {key[:40]!r} has no value separator")
        props[key] = value
    return props


def encode(record: MessageRecord, *, force_v2: bool = False) -> bytes:
    """Encode ``record``; ``MAGIC_V2`` is used for long topics or when forced."""
    buf = bytearray()
    encode_into(buf, record, force_v2=force_v2)
    return bytes(buf)


@functools.lru_cache(maxsize=1024)
def _topic_field(topic: str, force_v2: bool) -> tuple[bytes, int]:
    """The topic length and topic bytes, and the magic code they imply."""
    raw = topic.encode()
    if len(raw) > MAX_TOPIC_LENGTH_V2:
        raise RecordError(0, f"topic is {len(raw)} bytes, max 32767")
    if force_v2 or len(raw) > MAX_TOPIC_LENGTH_V1:
        return _U16.pack(len(raw)) + raw, MAGIC_V2
    return bytes((len(raw),)) + raw, MAGIC_V1


@functools.lru_cache(maxsize=1024)
def _hosts(born_ip: str, store_ip: str) -> tuple[struct.Struct, bytes, bytes, int]:
    """The fixed-part layout, packed addresses and sysFlag v6 bits for two hosts."""
    born = pack_ip(born_ip)
    store = pack_ip(store_ip)
    b6 = len(born) == 16
    s6 = len(store) == 16
    return _FIXED[b6, s6], born, store, (BORNHOST_V6 if b6 else 0) | (STOREHOST_V6 if s6 else 0)


_V6_BITS = BORNHOST_V6 | STOREHOST_V6


def encode_into(buf: bytearray, record: MessageRecord, *, force_v2: bool = False,
                queue_offset: int | None = None, physical_offset: int | None = None) -> int:
    """Append the encoding of ``record`` to ``buf``; return the record's size.

    ``queue_offset`` and ``physical_offset`` override the record's own (a
    commit log assigns them without building a new record).
    """
    return encode_placed(
        buf, record, record.queue_offset if queue_offset is None else queue_offset,
        record.physical_offset if physical_offset is None else physical_offset, force_v2,
    )


def encode_placed(buf: bytearray, record: MessageRecord, queue_offset: int,
                  physical_offset: int, force_v2: bool = False) -> int:
    """``encode_into`` with the offsets given positionally: the append hot path."""
    topic, magic = _topic_field(record.topic, force_v2)
    props = properties_to_bytes(record.properties)
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise RecordError(physical_offset, f"properties are {len(props)} bytes, max 32767")
    born_host = record.born_host
    store_host = record.store_host
    fixed, born_ip, store_ip, v6_bits = _hosts(born_host[0], store_host[0])
    body = record.body
    total = fixed.size + len(body) + len(topic) + 2 + len(props)
    if total > 0x7FFFFFFF:
        raise RecordError(physical_offset, f"record of {total} bytes is too large")
    buf += fixed.pack(
        total, magic, zlib.crc32(body) & 0x7FFFFFFF, record.queue_id, record.flag,
        queue_offset, physical_offset, (record.sys_flag & ~_V6_BITS) | v6_bits,
        record.born_timestamp, born_ip, born_host[1], record.store_timestamp, store_ip,
        store_host[1], record.reconsume_times, record.prepared_transaction_offset, len(body),
    )
    buf += body
    buf += topic
    buf += _U16.pack(len(props))
    buf += props
    return total


def check(buf: bytes | bytearray | memoryview, pos: int = 0, limit: int | None = None,
          *, base_offset: int = 0, verify_crc: bool = True) -> int:
    """Validate the record at ``buf[pos:]`` without decoding it; return its size.

    ``limit`` bounds the record (default: the end of ``buf``). Raises
    ``RecordError`` at ``base_offset + pos`` for a lying length, a bad magic,
    inconsistent field lengths, a body CRC mismatch, a topic that is not
    UTF-8 or properties that ``decode`` would refuse: a record ``check``
    accepts always decodes. This is the one rule every reader of a log
    applies (the store tools, a broker's recovery, a replica, the C
    ``index_records``).
    """
    _check_fields(buf, pos, len(buf) if limit is None else limit, base_offset, verify_crc)
    return _I32.unpack_from(buf, pos)[0]


def _check_fields(buf, pos: int, limit: int, base_offset: int, verify_crc: bool,
                  content: bool = True):
    """Validate the record at ``pos``; return (total, v2, b6, s6, body_at, body_len).

    ``content=False`` leaves the topic and properties to the caller (``decode``
    decodes them anyway, with the same errors)."""
    where = base_offset + pos
    if limit - pos < 8:
        raise RecordError(where, f"only {limit - pos} bytes left, a record header needs 8")
    total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
    if magic == MAGIC_V1:
        v2 = False
    elif magic == MAGIC_V2:
        v2 = True
    else:
        raise RecordError(where, f"bad magic code 0x{magic:08X}")
    if total < MIN_RECORD_SIZE:
        raise RecordError(where, f"total size {total} is below the minimum {MIN_RECORD_SIZE}")
    if total > limit - pos:
        raise RecordError(where, f"total size {total} runs past the end ({limit - pos} bytes left)")
    sys_flag = _I32.unpack_from(buf, pos + 36)[0]
    b6 = bool(sys_flag & BORNHOST_V6)
    s6 = bool(sys_flag & STOREHOST_V6)
    body_len_at = pos + _FIXED[b6, s6].size - 4
    end = pos + total
    if body_len_at + 4 > end:
        raise RecordError(where, f"total size {total} is too small for the header")
    body_len = _I32.unpack_from(buf, body_len_at)[0]
    body_at = body_len_at + 4
    if body_len < 0 or body_at + body_len > end:
        raise RecordError(where, f"body length {body_len} does not fit in total size {total}")
    at = body_at + body_len
    tlen_size = 2 if v2 else 1
    if at + tlen_size > end:
        raise RecordError(where, "record ends inside the topic length")
    topic_len = _U16.unpack_from(buf, at)[0] if v2 else buf[at]
    at += tlen_size + topic_len
    if at + 2 > end:
        raise RecordError(where, f"topic length {topic_len} does not fit in total size {total}")
    topic_at = at - topic_len
    props_len = _U16.unpack_from(buf, at)[0]
    props_at = at + 2
    at = props_at + props_len
    if at != end:
        raise RecordError(where, f"field lengths add up to {at - pos}, total size says {total}")
    if verify_crc:
        stored = _I32.unpack_from(buf, pos + 8)[0]
        actual = body_crc(memoryview(buf)[body_at:body_at + body_len])
        if stored != actual:
            raise RecordError(where, f"body CRC mismatch: stored {stored}, computed {actual}")
    if not content:
        return total, v2, b6, s6, body_at, body_len
    try:
        bytes(buf[topic_at:topic_at + topic_len]).decode()
    except UnicodeDecodeError:
        raise RecordError(where, "topic is not valid UTF-8") from None
    properties_from_bytes(bytes(buf[props_at:end]), where)
    return total, v2, b6, s6, body_at, body_len


def decode(buf: bytes | bytearray | memoryview, pos: int = 0, *, base_offset: int = 0,
           verify_crc: bool = True) -> tuple[MessageRecord, int]:
    """Decode the record at ``buf[pos:]``; return it and its size.

    Raises ``RecordError`` naming ``base_offset + pos`` and the reason.
    """
    total, v2, b6, s6, body_at, body_len = _check_fields(
        buf, pos, len(buf), base_offset, verify_crc, content=False
    )
    fields = _FIXED[b6, s6].unpack_from(buf, pos)
    body = bytes(buf[body_at:body_at + body_len])
    at = body_at + body_len
    if v2:
        topic_len = _U16.unpack_from(buf, at)[0]
        at += 2
    else:
        topic_len = buf[at]
        at += 1
    where = base_offset + pos
    try:
        topic = bytes(buf[at:at + topic_len]).decode()
    except UnicodeDecodeError:
        raise RecordError(where, "topic is not valid UTF-8") from None
    at += topic_len
    props_len = _U16.unpack_from(buf, at)[0]
    props = properties_from_bytes(bytes(buf[at + 2:at + 2 + props_len]), where)
    record = MessageRecord(
        topic=topic,
        body=body,
        queue_id=fields[3],
        flag=fields[4],
        queue_offset=fields[5],
        physical_offset=fields[6],
        sys_flag=fields[7],
        born_timestamp=fields[8],
        born_host=(_unpack_ip(fields[9]), fields[10]),
        store_timestamp=fields[11],
        store_host=(_unpack_ip(fields[12]), fields[13]),
        reconsume_times=fields[14],
        prepared_transaction_offset=fields[15],
        properties=props,
    )
    return record, total


@functools.lru_cache(maxsize=1024)
def _unpack_ip(packed: bytes) -> str:
    return str(ipaddress.ip_address(packed))


#: A record's bytes up to the end of its storeTimestamp when its born host is IPv6: a
#: record's first bytes this long always hold it.
STORE_TIMESTAMP_SPAN = 76


def store_timestamp_at(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The storeTimestamp of the (already validated) record at ``pos``."""
    born_v6 = _I32.unpack_from(buf, pos + 36)[0] & BORNHOST_V6
    return _Q64.unpack_from(buf, pos + (68 if born_v6 else 56))[0]


def stored_body_crc(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The bodyCRC field of the record at ``pos``."""
    return _I32.unpack_from(buf, pos + 8)[0]
