"""The Raft driver's durable state: the entry log and the snapshot of one node.

``DurableState`` maps each write of a ``Ready`` onto the ``EntryLog`` of a
store plugin (``("entrylog", scheme)``) and keeps the latest state-machine
snapshot in that plugin's ``MetaStore`` (``("meta", scheme)``), under four
keys written in one atomic ``put_many``. A snapshot is stored before the log
prefix it covers is compacted; a crash in between is finished on the next
load. Every method blocks: the driver calls the slow ones in a worker thread.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from triomq import store
from triomq.consensus.core.confchange import ConfState
from triomq.consensus.core.config import RaftConfig
from triomq.consensus.core.log import Entry, HardState, Snapshot
from triomq.consensus.core.raft import bootstrap_entries
from triomq.consensus.core.ready import (
    AppendEntries,
    PersistHardState,
    SaveSnapshot,
    TruncateSuffix,
    Write,
)
from triomq.plugin_manager import PluginManager

#: The folders of a node's Raft directory: the entry log and the snapshot's MetaStore.
ENTRY_LOG_DIR, SNAPSHOT_DIR = "entrylog", "snapshot"
_SNAPSHOT_KEYS = ("snapshot.index", "snapshot.term", "snapshot.conf", "snapshot.data")
_CONF_LISTS = ("voters", "learners", "voters_outgoing", "learners_next")


# --------------------------------------------------------------------------


def _conf_json(state: ConfState) -> bytes:
    return json.dumps({"voters": state.voters, "learners": state.learners,
                       "voters_outgoing": state.voters_outgoing,
                       "learners_next": state.learners_next,
                       "auto_leave": state.auto_leave}).encode()


class DurableState:
    """The entry log and the snapshot (in a MetaStore) of one node. Blocking calls."""

    def __init__(self, entry_log: store.EntryLog, meta: store.MetaStore, fsync: bool) -> None:
        self.entry_log = entry_log
        self.meta = meta
        self.fsync = fsync

    @classmethod
    def open(cls, plugins: PluginManager, config: RaftConfig, directory: str) -> DurableState:
        """Open (creating if needed) the stores under ``directory``."""
        options = dict(config.store_options)
        if config.store_scheme == "lmdb":
            options.setdefault("sync", config.fsync)
        return cls.open_scheme(plugins, config.store_scheme, directory, options, config.fsync)

    @classmethod
    def open_scheme(cls, plugins: PluginManager, scheme: str, directory: str,
                    options: dict[str, object], fsync: bool) -> DurableState:
        """Open (creating if needed) the ``scheme`` store plugin's stores under
        ``directory`` (``ENTRY_LOG_DIR`` and ``SNAPSHOT_DIR``)."""
        entry_log = plugins.log_store("entrylog", scheme)(
            os.path.join(directory, ENTRY_LOG_DIR), options)
        try:
            meta = plugins.log_store("meta", scheme)(
                os.path.join(directory, SNAPSHOT_DIR), options)
        except BaseException:
            entry_log.close()
            raise
        return cls(entry_log, meta, fsync)

    def close(self) -> None:
        """Sync and close both stores."""
        try:
            self.entry_log.close()
        finally:
            self.meta.close()

    def load_snapshot(self) -> Snapshot:
        """The stored snapshot (the empty one if none); StoreCorruption if unreadable."""
        values = [self.meta.get(key) for key in _SNAPSHOT_KEYS]
        if values[0] is None:
            return Snapshot()
        if any(v is None for v in values):
            raise store.StoreCorruption(_SNAPSHOT_KEYS[0], 0, "incomplete Raft snapshot")
        index, term, conf, data = values
        try:
            doc = json.loads(conf)
            lists = {key: doc[key] for key in _CONF_LISTS}
            if any(not isinstance(ids, list) or not all(type(i) is int and i > 0 for i in ids)
                   for ids in lists.values()):
                raise ValueError("node ids must be lists of positive integers")
            if type(doc["auto_leave"]) is not bool:
                raise ValueError("auto_leave must be a boolean")
            snapshot = Snapshot(int(index), int(term),
                                ConfState(**lists, auto_leave=doc["auto_leave"]), bytes(data))
        except (KeyError, TypeError, ValueError) as exc:
            raise store.StoreCorruption("snapshot", 0, f"bad Raft snapshot: {exc}") from None
        if snapshot.index < 0 or snapshot.term < 0:
            raise store.StoreCorruption("snapshot", 0, "negative snapshot index or term")
        return snapshot

    def load(self, config: RaftConfig) -> tuple[HardState, Snapshot, list[Entry]]:
        """Recover (and, for a new founder, bootstrap) what ``Raft`` starts from."""
        snapshot = self.load_snapshot()
        log = self.entry_log
        if log.first_index <= snapshot.index:
            # A crash between saving a snapshot and compacting: finish the compaction.
            log.compact_prefix(snapshot.index + 1, snapshot.term)
        if log.first_index > snapshot.index + 1:
            raise store.StoreCorruption("entrylog", log.first_index,
                                        f"entry log starts at {log.first_index} but the "
                                        f"snapshot ends at {snapshot.index}")
        stored = log.hard_state
        if (stored.term == 0 and snapshot.index == 0 and log.last_index == 0
                and not config.join):
            hard_state, entries = bootstrap_entries(config.founders())
            self.persist([AppendEntries(entries), PersistHardState(hard_state)], sync=True)
            return hard_state, snapshot, list(entries)
        return stored, snapshot, self.entries_from(log.first_index)

    def entries_from(self, first: int) -> list[Entry]:
        """The logged entries from ``first`` (or the log's first, if later) to the end."""
        log = self.entry_log
        records = log.entries(max(first, log.first_index), log.last_index + 1)
        return [Entry.from_record(r.index, r.term, r.data) for r in records]

    def blocks(self, writes: Sequence[Write]) -> bool:
        """Whether carrying out ``writes`` may wait on the disk."""
        return self.fsync or any(not isinstance(w, AppendEntries) for w in writes)

    def persist(self, writes: Sequence[Write], sync: bool | None = None) -> None:
        """Carry out a ``Ready``'s writes in order, then sync if configured."""
        log = self.entry_log
        appended = False
        for write in writes:
            if isinstance(write, AppendEntries) and write.entries:
                entries = write.entries
                log.append_records(entries[0].index, [e.term for e in entries],
                                   [e.to_record() for e in entries])
                appended = True
            elif isinstance(write, PersistHardState):
                state = write.hard_state
                log.set_hard_state(state)
            elif isinstance(write, TruncateSuffix):
                log.truncate_suffix(write.index)
            elif isinstance(write, SaveSnapshot):
                snap = write.snapshot
                self.meta.put_many(dict(zip(_SNAPSHOT_KEYS, (
                    str(snap.index).encode(), str(snap.term).encode(),
                    _conf_json(snap.conf_state), snap.data), strict=True)))
                log.compact_prefix(snap.index + 1, snap.term)
        if appended and (self.fsync if sync is None else sync):
            log.sync()
