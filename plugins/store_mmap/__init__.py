"""The mmap store plugin: RocketMQ-layout commit log, Raft entry log and a file meta store.

Provides ``("commitlog", "mmap")``, ``("entrylog", "mmap")`` and
``("meta", "mmap")`` through ``triomq_log_store`` and the ``triomq store``
command line (``verify``, ``dump``, ``recover``).

Options (one table may serve every kind; each kind takes what it uses):

- ``segment_size``: bytes per segment file (commit log: default 1 GiB or
  the size of existing segments; entry log: default 64 MiB);
- ``cq_entries_per_file``: consume-queue entries per file (300,000);
- ``checkpoint_interval``: bytes flushed between checkpoint updates, which
  bounds the scan of an abnormal restart (64 MiB);
- ``full_recovery``: scan the whole log on open, whatever the checkpoint says.

Flushing policy (group commit, interval, none) is run by
``framework.store.FlushService`` over the commit log's ``flush``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from framework.hookspecs import StoreFactory, hookimpl
from plugins.store_mmap.cli import add_commands
from plugins.store_mmap.commitlog import MmapCommitLog
from plugins.store_mmap.entrylog import MmapEntryLog
from plugins.store_mmap.meta import FileMetaStore

__all__ = ["FileMetaStore", "MmapCommitLog", "MmapEntryLog"]


@hookimpl
def triomq_log_store() -> Mapping[tuple[str, str], StoreFactory]:
    return {
        ("commitlog", "mmap"): MmapCommitLog.open,
        ("entrylog", "mmap"): MmapEntryLog.open,
        ("meta", "mmap"): FileMetaStore.open,
    }


@hookimpl
def triomq_add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    add_commands(subparsers)
