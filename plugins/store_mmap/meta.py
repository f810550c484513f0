"""A small durable key-value store in one JSON file, replaced atomically on every write."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from typing import Any

from triomq.durable_files import replace_atomically
from triomq.plugins.store_mmap.segments import OPTION_KEYS, read_json
from triomq.store import StoreClosed, StoreCorruption, store_options

META_FILE = "meta.json"


class FileMetaStore:
    """A ``triomq.store.MetaStore``: values are kept in memory and in ``meta.json``.

    Every write rewrites the file (write, fsync, rename, fsync directory), so
    it suits the small metadata it is meant for (offsets, topic config,
    broker identity), not bulk data.
    """

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self._path = os.path.join(directory, META_FILE)
        doc = read_json(self._path) or {}
        try:
            self._data = {str(k): base64.b64decode(v, validate=True) for k, v in doc.items()}
        except (AttributeError, TypeError, ValueError) as exc:
            raise StoreCorruption(self._path, 0, f"bad value: {exc}") from None
        self._closed = False

    @classmethod
    def open(cls, directory: str, options: Mapping[str, Any]) -> FileMetaStore:
        """The ``triomq_log_store`` factory (no options)."""
        return cls(directory, **store_options(options, OPTION_KEYS, (), "mmap"))

    def _save(self, data: dict[str, bytes]) -> None:
        if self._closed:
            raise StoreClosed(f"meta store {self._path} is closed")
        doc = {k: base64.b64encode(v).decode() for k, v in sorted(data.items())}
        replace_atomically(self._path, json.dumps(doc).encode())
        self._data = data

    def get(self, key: str) -> bytes | None:
        return self._data.get(key)

    def put(self, key: str, value: bytes) -> None:
        self._save({**self._data, key: bytes(value)})

    def put_many(self, items: Mapping[str, bytes]) -> None:
        self._save({**self._data, **{k: bytes(v) for k, v in items.items()}})

    def delete(self, key: str) -> None:
        if key in self._data:
            self._save({k: v for k, v in self._data.items() if k != key})

    def items(self) -> list[tuple[str, bytes]]:
        return sorted(self._data.items())

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> FileMetaStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
