"""The LMDB store plugin: commit log, Raft entry log and meta store, one environment each.

Provides ``("commitlog", "lmdb")``, ``("entrylog", "lmdb")``,
``("meta", "lmdb")`` and the read-only ``("commitlog-reader", "lmdb")`` (for
``triomq store``, ``triomq export`` and the Spark source) through
``triomq_log_store``. Writes are durable when
they return unless the store is opened with ``sync=False``.

Options (one table may serve every kind): ``segment_size`` (commit log: the
virtual segment size for blank padding, default 1 GiB, fixed at creation so
the bytes match an mmap replica's), ``map_size`` (initial LMDB map size,
doubled whenever a write does not fit), ``sync`` (default True).
"""

from __future__ import annotations

from collections.abc import Mapping

from triomq.hookspecs import StoreFactory, hookimpl
from triomq.plugins.store_lmdb.commitlog import LmdbCommitLog
from triomq.plugins.store_lmdb.entrylog import LmdbEntryLog
from triomq.plugins.store_lmdb.meta import LmdbMetaStore
from triomq.plugins.store_lmdb.reader import LmdbLogReader
from triomq.store import READER_KIND

__all__ = ["LmdbCommitLog", "LmdbEntryLog", "LmdbLogReader", "LmdbMetaStore"]


@hookimpl
def triomq_log_store() -> Mapping[tuple[str, str], StoreFactory]:
    return {
        ("commitlog", "lmdb"): LmdbCommitLog.open,
        ("entrylog", "lmdb"): LmdbEntryLog.open,
        ("meta", "lmdb"): LmdbMetaStore.open,
        (READER_KIND, "lmdb"): LmdbLogReader.open,
    }
