"""The send request and response headers (RocketMQ's ``extFields``), sans-I/O.

``parse_send_header`` reads a ``SendMessageRequestHeaderV2`` (one-letter
keys, see ``codes.SEND_V2_FIELDS``) and raises ``HeaderError`` naming the
field at fault. ``offset_msg_id`` / ``parse_offset_msg_id`` are RocketMQ's
offset message id: the store host's address and port and the physical
offset, as upper-case hex (32 digits for IPv4, 56 for IPv6).
"""

from __future__ import annotations

import functools
import ipaddress
import struct
from collections.abc import Mapping

import attrs

from triomq.errors import TriomqError
from triomq.protocol.header_fields import INT32, INT64
from triomq.protocol.header_fields import java_integer as parse_java_integer
from triomq.protocol.message import RecordError, properties_from_bytes, properties_to_bytes

__all__ = [
    "HeaderError",
    "SendHeader",
    "encode_send_header",
    "java_integer",
    "offset_msg_id",
    "parse_offset_msg_id",
    "parse_send_header",
]



class HeaderError(TriomqError, ValueError):
    """A request or response header field is missing or malformed; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"header field {field!r}: {message}")


@attrs.frozen
class SendHeader:
    """What a producer sends along with a message body."""

    topic: str
    producer_group: str = ""
    queue_id: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    flag: int = 0
    properties: Mapping[str, str] = attrs.field(factory=dict, converter=dict)
    reconsume_times: int = 0


def java_integer(fields: Mapping[str, str], key: str, bounds: tuple[int, int]) -> int | None:
    """Header field ``key`` read as Java's parseInt/parseLong would
    (``triomq.protocol.header_fields.java_integer``) and checked against ``bounds``;
    None when absent."""
    raw = fields.get(key)
    if raw is None:
        return None
    return _checked(raw, key, bounds)


def _checked(raw: str, name: str, bounds: tuple[int, int]) -> int:
    value = parse_java_integer(raw)
    if value is None:
        raise HeaderError(name, f"expected an integer, got {raw[:40]!r}")
    if not bounds[0] <= value <= bounds[1]:
        raise HeaderError(name, f"{value} is out of range [{bounds[0]}, {bounds[1]}]")
    return value


def _int(fields: Mapping[str, str], key: str, name: str, bounds: tuple[int, int],
         default: int | None = None) -> int:
    raw = fields.get(key)
    if raw is None:
        if default is None:
            raise HeaderError(name, "missing")
        return default
    return _checked(raw, name, bounds)


def parse_send_header(fields: Mapping[str, str]) -> SendHeader:
    """The ``SendMessageRequestHeaderV2`` in ``fields``; ``HeaderError`` if it is bad."""
    topic = fields.get("b")
    if not topic:
        raise HeaderError("topic", "missing or empty")
    try:
        properties = properties_from_bytes(fields.get("i", "").encode("utf-8", "surrogatepass"))
        # A name or value holding a separator parses, but no record may carry it.
        properties_to_bytes(properties)
    except RecordError as exc:
        raise HeaderError("properties", exc.reason) from None
    return SendHeader(
        topic=topic,
        producer_group=fields.get("a", ""),
        queue_id=_int(fields, "e", "queueId", (0, INT32[1])),
        sys_flag=_int(fields, "f", "sysFlag", INT32, 0),
        born_timestamp=_int(fields, "g", "bornTimestamp", INT64, 0),
        flag=_int(fields, "h", "flag", INT32, 0),
        properties=properties,
        reconsume_times=_int(fields, "j", "reconsumeTimes", INT32, 0),
    )


def encode_send_header(header: SendHeader) -> dict[str, str]:
    """The ``extFields`` for ``header`` (the inverse of ``parse_send_header``)."""
    return {
        "a": header.producer_group,
        "b": header.topic,
        "e": str(header.queue_id),
        "f": str(header.sys_flag),
        "g": str(header.born_timestamp),
        "h": str(header.flag),
        "i": properties_to_bytes(header.properties).decode(),
        "j": str(header.reconsume_times),
    }


def offset_msg_id(store_host: tuple[str, int], physical_offset: int) -> str:
    """RocketMQ's offset message id for a record stored at ``physical_offset``."""
    return (_packed_ip(store_host[0]) + struct.pack(">iq", store_host[1], physical_offset)
            ).hex().upper()


@functools.lru_cache(maxsize=64)
def _packed_ip(host: str) -> bytes:
    # Once per host, not per message: parsing the address is most of an id's cost.
    return ipaddress.ip_address(host).packed


def parse_offset_msg_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """``(store_host, physical_offset)`` from an offset message id."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise HeaderError("msgId", f"not hex: {msg_id[:60]!r}") from None
    if len(raw) not in (16, 28):
        raise HeaderError("msgId", f"{len(raw)} bytes, expected 16 (IPv4) or 28 (IPv6)")
    ip_size = len(raw) - 12
    port, offset = struct.unpack_from(">iq", raw, ip_size)
    return (str(ipaddress.ip_address(raw[:ip_size])), port), offset
