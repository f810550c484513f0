"""RocketMQ's ``checkpoint`` file (``StoreCheckpoint``) in a store root, sans-I/O.

The file is 4096 bytes; RocketMQ 5 keeps five big-endian longs at its start:

| byte | field |
| --- | --- |
| 0 | physicMsgTimestamp |
| 8 | logicsMsgTimestamp |
| 16 | indexMsgTimestamp |
| 24 | masterFlushedOffset |
| 32 | confirmPhyOffset |

triomq writes ``confirmPhyOffset`` (the offset every SyncStateSet member
holds, see the HA layer) so that readers of the files alone, like the Spark
data source's ``committedOnly``, stop where replication is confirmed.
Writers change only their field and keep every other byte as it was.
"""

from __future__ import annotations

import struct

from triomq.errors import TriomqError

FILE_NAME = "checkpoint"
FILE_SIZE = 4096
PHYSIC_MSG_TIMESTAMP = 0
LOGICS_MSG_TIMESTAMP = 8
INDEX_MSG_TIMESTAMP = 16
MASTER_FLUSHED_OFFSET = 24
CONFIRM_PHY_OFFSET = 32

_LONG = struct.Struct(">q")


class StoreCheckpointError(TriomqError, ValueError):
    """The checkpoint bytes are too short for the field asked for."""


def read_long(data: bytes | bytearray | memoryview, position: int, where: str = FILE_NAME) -> int:
    """The long at ``position`` (one of the field constants)."""
    if len(data) < position + 8:
        raise StoreCheckpointError(
            f"{where}: {len(data)} bytes, too short for the field at byte {position}")
    return _LONG.unpack_from(data, position)[0]


def with_long(data: bytes | bytearray | memoryview, position: int, value: int) -> bytes:
    """``data`` (padded to ``FILE_SIZE``) with the long at ``position`` set to ``value``."""
    page = bytearray(data[:FILE_SIZE])
    page.extend(bytes(FILE_SIZE - len(page)))
    _LONG.pack_into(page, position, value)
    return bytes(page)
