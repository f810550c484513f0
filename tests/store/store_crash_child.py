"""Child process of the crash tests: applies the operations read from stdin to a store.

Usage: ``python store_crash_child.py commitlog|entrylog|replica DIR [MASTER] < ops.json``.
After each operation and its flush it prints ``done <i>`` (``replica``:
``done <i> <offset>``); the parent kills it with SIGKILL at some moment and
checks what recovery finds.
"""

from __future__ import annotations

import json
import sys

from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.plugins.store_mmap.entrylog import MmapEntryLog
from triomq.protocol.message import MessageRecord
from triomq.store import EntryRecord

COMMITLOG_OPTIONS = {"segment_size": 1 << 16, "cq_entries_per_file": 64,
                     "checkpoint_interval": 20_000}
ENTRYLOG_OPTIONS = {"segment_size": 1 << 15}


def body(ident: int, size: int) -> bytes:
    """The body of record ``ident``: recognisable, cheap to build."""
    return (ident.to_bytes(8, "big") * (size // 8 + 1))[:size]


def record(ident: int, size: int) -> MessageRecord:
    return MessageRecord(topic="crash", body=body(ident, size), queue_id=ident % 3,
                         store_timestamp=ident, properties={"UNIQ_KEY": str(ident)})


def run_commitlog(directory: str, ops: list) -> None:
    log = MmapCommitLog(directory, **COMMITLOG_OPTIONS)
    offsets = [r.physical_offset for r in log.iter_records()]
    print("ready", flush=True)
    for i, (kind, arg) in enumerate(ops):
        if kind == "append":
            results = log.append_batch([record(ident, size) for ident, size in arg])
            offsets += [r.physical_offset for r in results]
        else:
            keep = max(0, len(offsets) - arg)
            log.truncate(offsets[keep] if keep < len(offsets) else log.max_offset)
            del offsets[keep:]
        log.flush()
        print(f"done {i}", flush=True)
    log.close()


def run_entrylog(directory: str, ops: list) -> None:
    log = MmapEntryLog(directory, **ENTRYLOG_OPTIONS)
    print("ready", flush=True)
    for i, (kind, arg) in enumerate(ops):
        if kind == "append":
            first = log.last_index + 1
            log.append([EntryRecord(first + n, term, body(term, size))
                        for n, (term, size) in enumerate(arg)])
            log.sync()
        else:
            log.truncate_suffix(max(log.first_index, log.last_index + 1 - arg))
        print(f"done {i}", flush=True)
    log.close()


def run_replica(directory: str, master_dir: str, chunks: list[int]) -> None:
    """Copy the master's log into the replica with ``append_raw``, chunk by chunk."""
    master = MmapCommitLog(master_dir, **COMMITLOG_OPTIONS)
    replica = MmapCommitLog(directory, **COMMITLOG_OPTIONS)
    print("ready", flush=True)
    for i, n in enumerate(chunks):
        at = replica.max_offset
        data = master.read(at, n)
        if data:
            replica.append_raw(at, data)
        replica.flush()
        print(f"done {i} {replica.max_offset}", flush=True)
    replica.close()
    master.close()


if __name__ == "__main__":
    kind, directory = sys.argv[1], sys.argv[2]
    operations = json.load(sys.stdin)
    if kind == "replica":
        run_replica(directory, sys.argv[3], operations)
    else:
        (run_commitlog if kind == "commitlog" else run_entrylog)(directory, operations)
