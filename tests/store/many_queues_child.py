"""Child process of the open-file tests: an mmap store under a low open-file limit.

Usage: ``python many_queues_child.py MODE DIR NOFILE [OPTIONS_JSON]``. It lowers
its soft ``RLIMIT_NOFILE`` to ``NOFILE``, then, by ``MODE``:

- ``write QUEUES``: appends one record to each of ``QUEUES`` queues of one
  topic (batches of 100 queues), flushing now and then, and closes;
- ``reopen``: opens the store again (recovery) and reads every queue's entry;
- ``exhaust``: takes every descriptor left, then appends to a new queue (refused),
  to a queue it holds and reads (served), gives the descriptors back and
  appends to the new queue (taken); then closes.

It prints one JSON line of what it saw; any exception ends it with a traceback
and a non-zero exit.
"""

from __future__ import annotations

import json
import os
import resource
import sys

from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.protocol.message import MessageRecord
from triomq.store import StoreOutOfResources

TOPIC = "fanout"
OPTIONS = {"segment_size": 1 << 20, "cq_entries_per_file": 100}


def record(queue_id: int) -> MessageRecord:
    return MessageRecord(topic=TOPIC, body=queue_id.to_bytes(4, "big"), queue_id=queue_id,
                         properties={"UNIQ_KEY": str(queue_id)})


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def write(log: MmapCommitLog, queues: int) -> dict:
    written = refused = 0
    most_fds = 0
    for first in range(0, queues, 100):
        batch = [record(q) for q in range(first, min(first + 100, queues))]
        try:
            log.append_batch(batch)
            written += len(batch)
        except StoreOutOfResources:
            refused += len(batch)
        most_fds = max(most_fds, open_fds())
        if first % 2000 == 0:
            log.flush()
    return {"written": written, "refused": refused, "most_fds": most_fds,
            "mapped": log.cq_files.mapped, "remaps": log.cq_files.remaps}


def reopen(log: MmapCommitLog) -> dict:
    bodies = 0
    for topic, queue_id in log.queues():
        for entry in log.queue_entries(topic, queue_id, 0, 10):
            if log.read_record(entry.physical_offset).body == queue_id.to_bytes(4, "big"):
                bodies += 1
    return {"queues": len(log.queues()), "bodies": bodies, "most_fds": open_fds(),
            "recovery": log.recovery}


def exhaust(log: MmapCommitLog) -> dict:
    log.append(record(0))
    taken = []
    try:
        while True:
            taken.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    seen: dict = {}
    try:
        log.append(record(1))
        seen["new_queue"] = "taken"
    except StoreOutOfResources as exc:
        seen["new_queue"] = f"refused: {exc}"
    seen["held_queue"] = log.append(record(0)).queue_offset
    seen["read"] = log.read_record(log.queue_entries(TOPIC, 0, 0, 1)[0].physical_offset).body.hex()
    for fd in taken:
        os.close(fd)
    seen["new_queue_after"] = log.append(record(1)).queue_offset
    seen["queues"] = [[t, q, log.queue_max_offset(t, q)] for t, q in log.queues()]
    return seen


def main() -> None:
    mode, directory, nofile = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rest = sys.argv[4:]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
    options = dict(OPTIONS)
    if mode == "write" and len(rest) > 1:
        options.update(json.loads(rest[1]))
    log = MmapCommitLog(directory, **options)
    if mode == "write":
        seen = write(log, int(rest[0]))
    elif mode == "reopen":
        seen = reopen(log)
    else:
        seen = exhaust(log)
    log.close()
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
