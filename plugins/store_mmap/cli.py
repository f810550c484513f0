"""``triomq store verify|dump|recover DIR``: the store tools.

``DIR`` is a store root (RocketMQ's ``storePathRootDir``): ``commitlog/``,
``consumequeue/`` and checkpoint files, written by triomq or by RocketMQ.
``verify`` and ``dump`` only read; ``recover`` does what an abnormal
restart does (cut a torn or corrupt tail, re-index the consume queues)
from the first segment, and leaves triomq's ``triomq_checkpoint.json`` next
to RocketMQ's own files, which it does not touch.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Iterator
from typing import TextIO

from framework.errors import TriomqError
from framework.protocol.commitlog_layout import COMMITLOG_DIR, Span, check_placement, iter_log
from framework.protocol.message import RecordError, decode, stored_body_crc
from framework.store import StoreCorruption
from plugins.store_mmap.commitlog import MmapCommitLog
from plugins.store_mmap.segments import Segment, SegmentQueue


class BadRecord(TriomqError):
    """A record failed its checks: ``path`` of the segment, physical ``offset``, ``reason``."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(f"{path}: bad record at offset {offset}: {reason}")


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``store verify|dump|recover`` to the ``triomq`` parser."""
    store = subparsers.add_parser("store", help="inspect and repair a commit-log store")
    sub = store.add_subparsers(dest="store_command", required=True, metavar="COMMAND")

    verify = sub.add_parser("verify", help="check every record; exit 1 at the first bad one")
    verify.add_argument("dir", help="store root (holds commitlog/)")
    verify.set_defaults(func=lambda args: verify_command(args.dir, sys.stdout, sys.stderr))

    dump = sub.add_parser("dump", help="print the records")
    dump.add_argument("dir", help="store root (holds commitlog/)")
    dump.add_argument("--from", dest="start", type=int, default=None, metavar="OFFSET",
                      help="physical offset of the first record to print")
    dump.add_argument("--json", action="store_true", help="one JSON object per line")
    dump.set_defaults(func=lambda args: dump_command(args.dir, args.start, args.json,
                                                     sys.stdout, sys.stderr))

    recover = sub.add_parser("recover", help="cut a torn or corrupt tail, rebuild the queues")
    recover.add_argument("dir", help="store root (holds commitlog/)")
    recover.add_argument("--cq-entries-per-file", type=int, default=300_000)
    recover.set_defaults(func=lambda args: recover_command(args.dir, args.cq_entries_per_file,
                                                           sys.stdout, sys.stderr))


def walk(root: str, start: int | None = None) -> Iterator[tuple[Segment, Span]]:
    """Every record span of the store at ``root`` from ``start``, read-only.

    Raises ``BadRecord`` at the first record failing its checks, and
    ``StoreCorruption`` for a non-segment file or a gap between segments.
    """
    files = SegmentQueue(os.path.join(root, COMMITLOG_DIR), None, writable=False)
    try:
        if start is not None and (files.first_start is None or start < files.first_start):
            raise BadRecord(os.path.join(root, COMMITLOG_DIR), start, "no segment holds it")
        try:
            for span, buf, seg_start in iter_log(((s.start, s.mm) for s in files.segments),
                                                 start):
                check_placement(buf, span.offset - seg_start, span.offset)
                yield files.find(span.offset), span
        except RecordError as exc:
            seg = files.find(exc.offset)
            raise BadRecord(seg.path, exc.offset, exc.reason) from None
    finally:
        files.close()


def verify_command(root: str, out: TextIO, err: TextIO) -> int:
    """Check every record; 0 if all are good, 1 at the first bad one, 2 for a bad DIR."""
    if not os.path.isdir(os.path.join(root, COMMITLOG_DIR)):
        print(f"{root}: no {COMMITLOG_DIR}/ directory", file=err)
        return 2
    count = size = 0
    end = 0
    try:
        for _, span in walk(root):
            count += 1
            size += span.size
            end = span.offset + span.size
    except (BadRecord, StoreCorruption) as exc:
        print(f"bad: {exc}", file=err)
        return 1
    print(f"ok: {count} records, {size} bytes, data ends at offset {end}", file=out)
    return 0


def record_json(seg: Segment, span: Span) -> dict:
    """The JSON form of the record at ``span``."""
    record, _ = decode(seg.mm, span.offset - seg.start, base_offset=seg.start)
    return {
        "physicalOffset": span.offset,
        "size": span.size,
        "topic": record.topic,
        "queueId": record.queue_id,
        "queueOffset": record.queue_offset,
        "bodyCRC": stored_body_crc(seg.mm, span.offset - seg.start),
        "sysFlag": record.sys_flag,
        "bornTimestamp": record.born_timestamp,
        "storeTimestamp": record.store_timestamp,
        "properties": dict(record.properties),
        "body": base64.b64encode(record.body).decode(),
    }


def dump_command(root: str, start: int | None, as_json: bool, out: TextIO, err: TextIO) -> int:
    """Print the records from ``start``; 1 at a bad record, 2 for a bad DIR."""
    if not os.path.isdir(os.path.join(root, COMMITLOG_DIR)):
        print(f"{root}: no {COMMITLOG_DIR}/ directory", file=err)
        return 2
    try:
        for seg, span in walk(root, start):
            doc = record_json(seg, span)
            if as_json:
                print(json.dumps(doc, sort_keys=True), file=out)
            else:
                print(f"{doc['physicalOffset']:>12} size={doc['size']} topic={doc['topic']} "
                      f"queue={doc['queueId']}:{doc['queueOffset']} "
                      f"stored={doc['storeTimestamp']} props={doc['properties']}", file=out)
    except (BadRecord, StoreCorruption) as exc:
        print(f"bad: {exc}", file=err)
        return 1
    return 0


def recover_command(root: str, cq_entries_per_file: int, out: TextIO, err: TextIO) -> int:
    """Run a full abnormal recovery on the store at ``root``."""
    if not os.path.isdir(os.path.join(root, COMMITLOG_DIR)):
        print(f"{root}: no {COMMITLOG_DIR}/ directory", file=err)
        return 2
    try:
        log = MmapCommitLog(root, cq_entries_per_file=cq_entries_per_file, full_recovery=True)
    except TriomqError as exc:
        print(f"cannot recover: {exc}", file=err)
        return 1
    info = dict(log.recovery)
    info.update(max_offset=log.max_offset, queues=len(log.queues()))
    log.close()
    if info.get("cut_at") is not None:
        print(f"cut at offset {info['cut_at']}: {info['reason']}", file=out)
    print(f"recovered: log ends at {info['max_offset']}, {info['queues']} consume queues "
          f"re-indexed from {info['max_offset'] - info['scanned']}", file=out)
    return 0
