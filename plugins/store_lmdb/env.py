"""One LMDB environment per store, with map-size growth and durable commits."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import lmdb

from triomq.store import StoreClosed

T = TypeVar("T")

DEFAULT_MAP_SIZE = 64 << 20


class Env:
    """An LMDB environment at ``directory`` holding the named databases.

    ``sync=True`` (the default) makes every write transaction durable when
    it commits. When a write does not fit the map, the map is doubled and
    the transaction retried, so callers only change their in-memory state
    after ``write`` returns.
    """

    def __init__(self, directory: str, names: tuple[str, ...], *,
                 map_size: int = DEFAULT_MAP_SIZE, sync: bool = True) -> None:
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.sync_writes = sync
        self.env = lmdb.open(directory, map_size=map_size, max_dbs=len(names) + 1, sync=sync,
                             metasync=sync, subdir=True)
        self.dbs = {name: self.env.open_db(name.encode()) for name in names}
        self.closed = False

    def db(self, name: str):
        return self.dbs[name]

    def read(self) -> lmdb.Transaction:
        """A read transaction (use as a context manager)."""
        if self.closed:
            raise StoreClosed(f"LMDB store {self.directory} is closed")
        return self.env.begin()

    def write(self, fn: Callable[[lmdb.Transaction], T]) -> T:
        """Run ``fn`` in one write transaction, growing the map until it fits."""
        if self.closed:
            raise StoreClosed(f"LMDB store {self.directory} is closed")
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    return fn(txn)
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)

    def sync(self) -> None:
        """Force buffered commits to disk (needed only with ``sync=False``)."""
        if not self.closed:
            self.env.sync(True)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.env.close()


#: Every option a store of this plugin takes (each kind uses some of them).
OPTION_KEYS = ("segment_size", "map_size", "sync", "message_delay_level")
