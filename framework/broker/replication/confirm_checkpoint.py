"""Keeping the confirm offset in RocketMQ's ``checkpoint`` file of the store root.

Readers of the files alone (the Spark data source's ``committedOnly``,
operators' tools) learn from it how far the log is replicated to the whole
SyncStateSet. The broker writes it every ``flush_interval`` when it moved,
never past the local end of the log, and keeps every other field of the
file as it was: in place (an 8-byte write at ``CONFIRM_PHY_OFFSET``, like
RocketMQ's mapped checkpoint) once the file holds its whole page, and by an
atomic replace before that, so a reader never sees a half-made file.
"""

from __future__ import annotations

import os

from triomq.durable_files import replace_atomically
from triomq.protocol.store_checkpoint import (
    CONFIRM_PHY_OFFSET,
    FILE_NAME,
    FILE_SIZE,
    read_long,
    with_long,
)


class ConfirmOffsetCheckpoint:
    """The ``checkpoint`` file under ``root``; blocking: call it from a worker thread."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, FILE_NAME)

    def read(self) -> int | None:
        """The recorded confirm offset, ``None`` when there is no checkpoint file."""
        try:
            with open(self.path, "rb") as f:
                return read_long(f.read(FILE_SIZE), CONFIRM_PHY_OFFSET, self.path)
        except FileNotFoundError:
            return None

    def write(self, confirm_offset: int) -> None:
        """Record ``confirm_offset`` durably."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            replace_atomically(self.path, with_long(b"", CONFIRM_PHY_OFFSET, confirm_offset))
            return
        try:
            current = os.pread(fd, FILE_SIZE, 0)
            page = with_long(current, CONFIRM_PHY_OFFSET, confirm_offset)
            if len(current) == FILE_SIZE:
                os.pwrite(fd, page[CONFIRM_PHY_OFFSET:CONFIRM_PHY_OFFSET + 8], CONFIRM_PHY_OFFSET)
                os.fsync(fd)
                return
        finally:
            os.close(fd)
        replace_atomically(self.path, page)
