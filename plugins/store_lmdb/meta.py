"""The LMDB meta store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from triomq.plugins.store_lmdb.env import OPTION_KEYS, Env
from triomq.store import store_options


class LmdbMetaStore:
    """A ``triomq.store.MetaStore`` in its own LMDB environment.

    Options: ``map_size`` (initial, grows as needed), ``sync`` (default True).
    """

    def __init__(self, directory: str, **options: Any) -> None:
        self._env = Env(directory, ("meta",), **options)
        self._db = self._env.db("meta")

    @classmethod
    def open(cls, directory: str, options: Mapping[str, Any]) -> LmdbMetaStore:
        """The ``triomq_log_store`` factory."""
        return cls(directory, **store_options(options, OPTION_KEYS, ("map_size", "sync"), "lmdb"))

    def get(self, key: str) -> bytes | None:
        with self._env.read() as txn:
            return txn.get(key.encode(), db=self._db)

    def put(self, key: str, value: bytes) -> None:
        self.put_many({key: value})

    def put_many(self, items: Mapping[str, bytes]) -> None:
        def write(txn):
            for k, v in items.items():
                txn.put(k.encode(), bytes(v), db=self._db)

        self._env.write(write)

    def delete(self, key: str) -> None:
        self._env.write(lambda txn: txn.delete(key.encode(), db=self._db))

    def items(self) -> list[tuple[str, bytes]]:
        with self._env.read() as txn:
            return [(k.decode(), bytes(v)) for k, v in txn.cursor(db=self._db)]

    def close(self) -> None:
        self._env.close()

    def __enter__(self) -> LmdbMetaStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
