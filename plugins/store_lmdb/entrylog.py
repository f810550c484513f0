"""The Raft entry log in LMDB: one key per entry, metadata in the same transaction."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from triomq.plugins.store_lmdb.env import OPTION_KEYS, Env
from triomq.store import EntryRecord, HardState, IndexOutOfRange, StoreError, store_options

_U64 = struct.Struct(">Q")
_TERM = struct.Struct(">Q")
_PAIR = struct.Struct(">QQ")


class LmdbEntryLog:
    """A ``triomq.store.EntryLog``: ``entries`` maps index -> term | data.

    ``meta`` holds ``first`` (first index, compaction term) and ``hard``
    (term, vote). Options: ``map_size``, ``sync`` (default True: every call
    is durable on return; with False, durable at ``sync()``).
    """

    def __init__(self, directory: str, **options: Any) -> None:
        self._env = Env(directory, ("entries", "meta"), **options)
        self._entries = self._env.db("entries")
        self._meta = self._env.db("meta")
        with self._env.read() as txn:
            first = txn.get(b"first", db=self._meta)
            hard = txn.get(b"hard", db=self._meta)
            cur = txn.cursor(db=self._entries)
            last = _U64.unpack(cur.key())[0] if cur.last() else None
        self._first, self._compacted_term = _PAIR.unpack(first) if first else (1, 0)
        self._hard = HardState(*_PAIR.unpack(hard)) if hard else HardState()
        self._last = self._first - 1 if last is None else last

    @classmethod
    def open(cls, directory: str, options: Mapping[str, Any]) -> LmdbEntryLog:
        """The ``triomq_log_store`` factory."""
        return cls(directory, **store_options(options, OPTION_KEYS, ("map_size", "sync"), "lmdb"))

    @property
    def first_index(self) -> int:
        return self._first

    @property
    def last_index(self) -> int:
        return self._last

    def _check(self, index: int) -> None:
        if not self._first <= index <= self._last:
            raise IndexOutOfRange(index, self._first, self._last)

    def append(self, entries: Sequence[EntryRecord]) -> None:
        if not entries:
            return
        expected = self._last + 1
        for i, e in enumerate(entries):
            if e.index != expected + i:
                raise StoreError(f"entry {e.index} appended after {expected + i - 1}")
        self.append_records(expected, [e.term for e in entries], [e.data for e in entries])

    def append_records(self, first_index: int, terms: Sequence[int],
                       datas: Sequence[bytes]) -> None:
        if len(terms) != len(datas):
            raise StoreError(f"{len(terms)} terms for {len(datas)} entries")
        if not datas:
            return
        if first_index != self._last + 1:
            raise StoreError(f"entry {first_index} appended after {self._last}")

        def write(txn):
            db, key, term_bytes = self._entries, _U64.pack, _TERM.pack
            for index, term, data in zip(range(first_index, first_index + len(datas)), terms,
                                         datas, strict=True):
                txn.put(key(index), term_bytes(term) + data, db=db)

        self._env.write(write)
        self._last = first_index + len(datas) - 1

    def get(self, index: int) -> EntryRecord:
        self._check(index)
        with self._env.read() as txn:
            raw = txn.get(_U64.pack(index), db=self._entries)
        return EntryRecord(index, _TERM.unpack_from(raw)[0], raw[8:])

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[EntryRecord]:
        if lo >= hi:
            return []
        self._check(lo)
        self._check(hi - 1)
        out: list[EntryRecord] = []
        total = 0
        with self._env.read() as txn:
            cur = txn.cursor(db=self._entries)
            cur.set_key(_U64.pack(lo))
            for key, raw in cur:
                index = _U64.unpack(key)[0]
                if index >= hi:
                    break
                total += len(raw) - 8
                if out and max_bytes is not None and total > max_bytes:
                    break
                out.append(EntryRecord(index, _TERM.unpack_from(raw)[0], raw[8:]))
        return out

    def term_at(self, index: int) -> int:
        if index == self._first - 1:
            return self._compacted_term
        self._check(index)
        with self._env.read() as txn:
            return _TERM.unpack_from(txn.get(_U64.pack(index), db=self._entries))[0]

    def _delete_range(self, txn, lo: int, hi: int | None) -> None:
        cur = txn.cursor(db=self._entries)
        if not cur.set_range(_U64.pack(lo)):
            return
        while cur.key() and (hi is None or _U64.unpack(cur.key())[0] < hi):
            if not cur.delete():
                break

    def truncate_suffix(self, index: int) -> None:
        if index > self._last:
            return
        index = max(index, self._first)
        self._env.write(lambda txn: self._delete_range(txn, index, None))
        self._last = index - 1

    def compact_prefix(self, index: int, term: int | None = None) -> None:
        """Drop entries ``< index``; past ``last_index + 1`` ``term`` is required."""
        if index <= self._first:
            return
        if index > self._last + 1:
            if term is None:
                raise IndexOutOfRange(index, self._first, self._last)
            compacted = term
        else:
            compacted = self.term_at(index - 1)

        def write(txn):
            self._delete_range(txn, 0, index)
            txn.put(b"first", _PAIR.pack(index, compacted), db=self._meta)

        self._env.write(write)
        self._first, self._compacted_term = index, compacted
        self._last = max(self._last, index - 1)

    def sync(self) -> None:
        self._env.sync()

    @property
    def hard_state(self) -> HardState:
        return self._hard

    def set_hard_state(self, state: HardState) -> None:
        self._env.write(lambda txn: txn.put(b"hard", _PAIR.pack(state.term, state.vote),
                                            db=self._meta))
        if not self._env.sync_writes:
            self._env.sync()
        self._hard = state

    def close(self) -> None:
        self._env.sync()
        self._env.close()

    def __enter__(self) -> LmdbEntryLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
