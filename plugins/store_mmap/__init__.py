"""The mmap store plugin: RocketMQ-layout commit log, Raft entry log and a file meta store.

Provides ``("commitlog", "mmap")``, ``("entrylog", "mmap")``,
``("meta", "mmap")`` and the read-only ``("commitlog-reader", "mmap")`` (what
``triomq store``, ``triomq export`` and the Spark source read a store
through) with ``triomq_log_store``.

Options (one table may serve every kind; each kind takes what it uses):

- ``segment_size``: bytes per segment file (commit log: default 1 GiB or
  the size of existing segments; entry log: default 64 MiB);
- ``cq_entries_per_file``: consume-queue entries per file (300,000);
- ``checkpoint_interval``: bytes flushed between checkpoint updates, which
  bounds the scan of an abnormal restart (64 MiB);
- ``full_recovery``: scan the whole log on open, whatever the checkpoint says;
- ``max_open_consume_queue_files``: consume-queue files kept mapped (one
  descriptor each); those not used recently beyond it are unmapped until
  used again (1024, or half the process's open-file limit if lower).

Flushing policy (group commit, interval, none) is run by
``triomq.store.FlushService`` over the commit log's ``flush``.
"""

from __future__ import annotations

from collections.abc import Mapping

from triomq.hookspecs import StoreFactory, hookimpl
from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.plugins.store_mmap.entrylog import MmapEntryLog
from triomq.plugins.store_mmap.meta import FileMetaStore
from triomq.plugins.store_mmap.reader import MmapLogReader
from triomq.store import READER_KIND

__all__ = ["FileMetaStore", "MmapCommitLog", "MmapEntryLog", "MmapLogReader"]


@hookimpl
def triomq_log_store() -> Mapping[tuple[str, str], StoreFactory]:
    return {
        ("commitlog", "mmap"): MmapCommitLog.open,
        ("entrylog", "mmap"): MmapEntryLog.open,
        ("meta", "mmap"): FileMetaStore.open,
        (READER_KIND, "mmap"): MmapLogReader.open,
    }
