"""Read-only access to an LMDB commit log, for tools (``CommitLogReader``).

Opens the environment read-only: nothing is created or changed, and a node
may have the store open meanwhile (each ``read`` is one read transaction).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from typing import Any

import lmdb

from triomq.plugins.store_lmdb.commitlog import log_bounds, read_range
from triomq.store import StoreNotFound

_U64 = struct.Struct(">Q")
_EXPECTED = "an LMDB commit log (data.mdb with log and state databases)"


class LmdbLogReader:
    """A ``triomq.store.CommitLogReader`` on the LMDB commit log in ``directory``."""

    scheme = "lmdb"

    def __init__(self, directory: str) -> None:
        self.directory = directory
        if not os.path.isfile(os.path.join(directory, "data.mdb")):
            raise StoreNotFound(directory, _EXPECTED)
        try:
            self._env = lmdb.open(directory, readonly=True, max_dbs=8, subdir=True)
        except lmdb.Error:
            raise StoreNotFound(directory, _EXPECTED) from None
        try:
            with self._env.begin() as txn:
                names = {key for key, _ in txn.cursor()}
            if not {b"log", b"state"} <= names:
                raise StoreNotFound(directory, _EXPECTED)
            self._log = self._env.open_db(b"log", create=False)
            state = self._env.open_db(b"state", create=False)
            with self._env.begin() as txn:
                stored = txn.get(b"segment_size", db=state)
                self._min, self._end = log_bounds(txn, self._log, state)
        except BaseException:
            self._env.close()
            raise
        if stored is None:
            self._env.close()
            raise StoreNotFound(directory, _EXPECTED)
        self.segment_size = _U64.unpack(stored)[0]

    @classmethod
    def open(cls, directory: str, options: Mapping[str, Any]) -> LmdbLogReader:
        """The ``triomq_log_store`` factory of ``READER_KIND`` (options are not used)."""
        return cls(directory)

    @property
    def min_offset(self) -> int:
        return self._min

    @property
    def end_offset(self) -> int:
        return self._end

    def read(self, offset: int, size: int) -> bytes:
        end = min(offset + max(size, 0), self._end)
        if end <= offset:
            return b""
        with self._env.begin() as txn:
            return read_range(txn, self._log, offset, end)

    def where(self, offset: int) -> str:
        return self.directory

    def recovery_options(self) -> dict[str, Any]:
        # Transactions leave nothing to recover; the segment size must match the store's.
        return {"segment_size": self.segment_size}

    def close(self) -> None:
        self._env.close()
