"""The body of SEND_BATCH_MESSAGE, sans-I/O: RocketMQ's ``MessageDecoder.encodeMessages``.

A batch body is its messages back to back, each (integers big-endian)::

    totalSize:4 | magicCode:4 | bodyCRC:4 | flag:4 | bodyLength:4 body
    | propertiesLength:2 properties

``totalSize`` counts the whole message (22 bytes plus the body and the
properties). RocketMQ's clients write 0 as the magic code and the body CRC
(the broker computes the stored CRC), so neither is checked. The topic,
queue and the other fields of the stored records come from the request's
``SendMessageRequestHeader``.

``decode_batch`` raises ``BatchError`` naming the message (by its index
and byte position) and the field at fault, so nothing of a bad batch is
stored.
"""

from __future__ import annotations

import struct

import attrs

from triomq.errors import TriomqError
from triomq.protocol.message import (
    MAX_PROPERTIES_LENGTH,
    RecordError,
    properties_from_bytes,
    properties_to_bytes,
)

__all__ = ["BATCH_HEADER_SIZE", "BatchError", "BatchMessage", "decode_batch"]

_HEAD = struct.Struct(">iiiii")
_U16 = struct.Struct(">H")
#: The fixed part of one message: totalSize, magicCode, bodyCRC, flag, bodyLength and
#: propertiesLength.
BATCH_HEADER_SIZE = _HEAD.size + _U16.size


class BatchError(TriomqError, ValueError):
    """A message of a batch body is malformed: ``index`` and ``position`` say which."""

    def __init__(self, index: int, position: int, field: str, reason: str) -> None:
        self.index = index
        self.position = position
        self.field = field
        self.reason = reason
        super().__init__(f"batch message {index} (at byte {position}): {field}: {reason}")


@attrs.frozen
class BatchMessage:
    """One message of a batch: what the client set per message, and where it began."""

    body: bytes
    flag: int = 0
    properties: dict[str, str] = attrs.field(factory=dict, hash=False)
    position: int = 0


def decode_batch(data: bytes | bytearray | memoryview) -> list[BatchMessage]:
    """The messages of a batch body; ``BatchError`` at the first malformed one."""
    view = memoryview(data)
    messages: list[BatchMessage] = []
    pos = 0
    while pos < len(view):
        index = len(messages)
        left = len(view) - pos
        if left < BATCH_HEADER_SIZE:
            raise BatchError(index, pos, "totalSize",
                             f"{left} bytes left, a message needs at least {BATCH_HEADER_SIZE}")
        total, _magic, _crc, flag, body_length = _HEAD.unpack_from(view, pos)
        if not BATCH_HEADER_SIZE <= total <= left:
            raise BatchError(index, pos, "totalSize",
                             f"{total} is not within {BATCH_HEADER_SIZE}..{left} (bytes left)")
        if not 0 <= body_length <= total - BATCH_HEADER_SIZE:
            raise BatchError(index, pos, "bodyLength",
                             f"{body_length} does not fit in totalSize {total}")
        body_at = pos + _HEAD.size
        props_at = body_at + body_length
        props_length = _U16.unpack_from(view, props_at)[0]
        if props_length > MAX_PROPERTIES_LENGTH:
            raise BatchError(index, pos, "propertiesLength",
                             f"{props_length} is over {MAX_PROPERTIES_LENGTH}")
        if BATCH_HEADER_SIZE + body_length + props_length != total:
            raise BatchError(index, pos, "totalSize",
                             f"{total}, but the fields add up to "
                             f"{BATCH_HEADER_SIZE + body_length + props_length}")
        raw = bytes(view[props_at + 2:props_at + 2 + props_length])
        try:
            properties = properties_from_bytes(raw)
            properties_to_bytes(properties)  # a separator inside a name or value
        except RecordError as exc:
            raise BatchError(index, pos, "properties", exc.reason) from None
        messages.append(BatchMessage(bytes(view[body_at:props_at]), flag, properties, pos))
        pos += total
    if not messages:
        raise BatchError(0, 0, "body", "the batch holds no message")
    return messages

