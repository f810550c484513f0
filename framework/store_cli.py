"""``triomq store verify|dump|recover DIR``: the store tools, for any store plugin.

``DIR`` is a commit log store of any plugin that provides a reader
(``triomq.store.READER_KIND``): a store root of segment files (written by
triomq's mmap store or by RocketMQ), an LMDB store... ``--scheme`` picks the
plugin; by default the first whose reader recognises ``DIR``. All three
judge records by one rule (``triomq.log_check``), the rule a broker's
recovery applies:

- ``verify`` reads only; exit 1 at the first bad record, naming it and
  the good records after it that a recovery would drop;
- ``dump`` reads only; prints records (``--json``, or text with bodies
  escaped and cut at ``--width``), filtered by ``--topic``, ``--key``,
  ``--queue``; a body its producer compressed is printed inflated;
- ``recover`` opens the store through its plugin with a full recovery and
  cuts the log at the first bad record. It refuses when good records
  follow the cut unless ``--force``; ``--dry-run`` only says what it would
  cut and why.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from triomq.errors import TriomqError
from triomq.log_check import Following, LogWalk, following, open_reader
from triomq.plugin_manager import PluginManager
from triomq.protocol.commitlog_layout import Span
from triomq.protocol.inflate import DEFAULT_MAX_BODY_SIZE, producer_body
from triomq.protocol.message import MessageRecord, body_crc
from triomq.store import CommitLogReader, StoreNotFound

#: Characters of a body the text dump shows by default.
DEFAULT_WIDTH = 60


def add_commands(subparsers: argparse._SubParsersAction, pm: PluginManager) -> None:
    """Add ``store verify|dump|recover`` to the ``triomq`` parser."""
    store = subparsers.add_parser("store", help="inspect and repair a commit log store")
    sub = store.add_subparsers(dest="store_command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("dir", help="the store's directory (a store root holding commitlog/, "
                                   "an LMDB store...)")
        p.add_argument("--scheme", help="the store plugin's scheme (mmap, lmdb...; default: "
                                        "the first that recognises DIR)")

    p = sub.add_parser("verify", help="check every record; exit 1 at the first bad one")
    common(p)
    p.set_defaults(func=lambda a: verify_command(a.dir, sys.stdout, sys.stderr, plugins=pm,
                                                 scheme=a.scheme))

    p = sub.add_parser("dump", help="print the records")
    common(p)
    p.add_argument("--from", dest="start", type=int, default=None, metavar="OFFSET",
                   help="physical offset of the first record to print")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--topic", help="only records of this topic")
    p.add_argument("--key", help="only records with this key (KEYS or UNIQ_KEY property)")
    p.add_argument("--queue", type=int, metavar="QUEUE_ID", help="only records of this queue id")
    p.add_argument("--width", type=int, default=DEFAULT_WIDTH,
                   help=f"characters of a body shown in text mode (default {DEFAULT_WIDTH})")
    p.set_defaults(func=lambda a: dump_command(
        a.dir, sys.stdout, sys.stderr, start=a.start, as_json=a.json, topic=a.topic,
        key=a.key, queue=a.queue, width=a.width, plugins=pm, scheme=a.scheme))

    p = sub.add_parser("recover", help="cut a torn or corrupt tail, rebuild the queues")
    common(p)
    p.add_argument("--dry-run", action="store_true",
                   help="only say what would be cut and why; change nothing")
    p.add_argument("--force", action="store_true",
                   help="cut even when good records follow the bad one (they are dropped)")
    p.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a store option for the plugin (repeatable)")
    p.set_defaults(func=lambda a: recover_command(
        a.dir, sys.stdout, sys.stderr, dry_run=a.dry_run, force=a.force,
        options=parse_options(a.option), plugins=pm, scheme=a.scheme))


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as store options; values are JSON when they parse as JSON."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise TriomqError(f"--option {pair!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def verify_command(root: str, out: TextIO, err: TextIO, *,
                   plugins: PluginManager | None = None, scheme: str | None = None) -> int:
    """Check every record; 0 if all are good, 1 at a bad one, 2 for a bad DIR."""
    try:
        reader = open_reader(root, plugins, scheme)
    except StoreNotFound as exc:
        print(exc, file=err)
        return 2
    except TriomqError as exc:
        print(f"bad: {exc}", file=err)
        return 1
    try:
        walk = LogWalk(reader).run()
        after = following(reader, walk.end)
        if walk.clean and not after.count:
            print(f"ok: {walk.count} records, data from {walk.start} to {walk.end} "
                  f"({reader.scheme} store)", file=out)
            return 0
        print(f"bad: {_stop_text(reader, walk)}", file=err)
        if after.count:
            print(_following_text(after, "a recovery drops"), file=err)
        return 1
    finally:
        reader.close()


def _stop_text(reader: CommitLogReader, walk: LogWalk) -> str:
    where = reader.where(walk.end)
    if walk.error is not None:
        return f"{where}: {walk.error}"
    return f"{where}: zero fill at offset {walk.end} where good records follow"


def _following_text(after: Following, verb: str) -> str:
    return (f"{after.count} good records after it, which {verb}: offsets {after.first} to "
            f"{after.last} ({after.size} bytes)")


def dump_command(root: str, out: TextIO, err: TextIO, *, start: int | None = None,
                 as_json: bool = False, topic: str | None = None, key: str | None = None,
                 queue: int | None = None, width: int = DEFAULT_WIDTH,
                 plugins: PluginManager | None = None, scheme: str | None = None) -> int:
    """Print the records from ``start`` that pass the filters; 1 at a bad record
    (or zero fill with good records after it, as ``verify``),
    2 for a bad DIR."""
    try:
        reader = open_reader(root, plugins, scheme)
    except StoreNotFound as exc:
        print(exc, file=err)
        return 2
    except TriomqError as exc:
        print(f"bad: {exc}", file=err)
        return 1
    try:
        walk = LogWalk(reader, start)
        for span, record in walk.records():
            if ((topic is not None and record.topic != topic)
                    or (queue is not None and record.queue_id != queue)
                    or (key is not None and key not in _keys(record))):
                continue
            doc = record_json(span, record)
            if as_json:
                print(json.dumps(doc, sort_keys=True), file=out)
            else:
                print(record_text(span, record, width), file=out)
        after = following(reader, walk.end)
        if walk.clean and not after.count:
            return 0
        print(f"bad: {_stop_text(reader, walk)}", file=err)
        if after.count:
            print(_following_text(after, "a recovery drops"), file=err)
        return 1
    finally:
        reader.close()


def _keys(record: MessageRecord) -> set[str]:
    props = record.properties
    keys = set(props.get("KEYS", "").split())
    if "UNIQ_KEY" in props:
        keys.add(props["UNIQ_KEY"])
    return keys


def record_json(span: Span, record: MessageRecord) -> dict:
    """The JSON form of ``record`` (at ``span``)."""
    return {
        "physicalOffset": span.offset,
        "size": span.size,
        "topic": record.topic,
        "queueId": record.queue_id,
        "queueOffset": record.queue_offset,
        "bodyCRC": body_crc(record.body),
        "sysFlag": record.sys_flag,
        "bornTimestamp": record.born_timestamp,
        "storeTimestamp": record.store_timestamp,
        "properties": dict(record.properties),
        "body": base64.b64encode(_body(span, record)).decode(),
    }


def _body(span: Span, record: MessageRecord) -> bytes:
    """The body its producer set, inflated if it compressed it (``bodyCRC`` is the stored
    bytes')."""
    return producer_body(record.body, record.sys_flag, DEFAULT_MAX_BODY_SIZE,
                         f"record at offset {span.offset}")


def record_text(span: Span, record: MessageRecord, width: int) -> str:
    """One line for ``record``: its place, queue, time, properties and body (escaped,
    cut at ``width`` characters)."""
    body = _body(span, record)
    return (f"{span.offset:>12} size={span.size} topic={record.topic} "
            f"queue={record.queue_id}:{record.queue_offset} "
            f"stored={record.store_timestamp} props={dict(record.properties)} "
            f"body[{len(body)}]={escaped(body, width)}")


def escaped(body: bytes, width: int) -> str:
    """``body`` as printable text: UTF-8 where it is, escapes elsewhere, at most
    ``width`` characters (a cut ends with ``...``)."""
    text = body.decode("utf-8", "backslashreplace")
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)
    return text if len(text) <= width else text[:max(width - 3, 0)] + "..."


def recover_command(root: str, out: TextIO, err: TextIO, *, dry_run: bool = False,
                    force: bool = False, options: dict[str, Any] | None = None,
                    plugins: PluginManager | None = None, scheme: str | None = None) -> int:
    """Cut the log at its first bad record and rebuild what depends on it.

    1 when good records follow the cut and ``force`` is not given (nothing is
    changed), 2 for a bad DIR.
    """
    pm = PluginManager.discover() if plugins is None else plugins
    try:
        reader = open_reader(root, pm, scheme)
    except StoreNotFound as exc:
        print(exc, file=err)
        return 2
    except TriomqError as exc:
        print(f"cannot recover: {exc}", file=err)
        return 1
    try:
        walk = LogWalk(reader).run()
        after = following(reader, walk.end)
        store_options = {**reader.recovery_options(), **(options or {})}
        name = reader.scheme
    finally:
        reader.close()
    cut = not walk.clean or after.count
    if dry_run:
        if cut:
            print(f"would cut at offset {walk.end}: {_reason(walk)}", file=out)
            if after.count:
                print(_following_text(after, "the cut drops"), file=out)
        else:
            print(f"nothing to cut: {walk.count} good records, data ends at {walk.end}",
                  file=out)
        return 0
    if after.count and not force:
        print(f"refusing to cut at offset {walk.end} ({_reason(walk)}): "
              + _following_text(after, "the cut would drop")
              + "; --force cuts anyway, --dry-run shows what is cut", file=err)
        return 1
    try:
        log = pm.log_store("commitlog", name)(root, store_options)
    except TriomqError as exc:
        print(f"cannot recover: {exc}", file=err)
        return 1
    try:
        if log.max_offset > walk.end:
            log.truncate(walk.end)
        end, queues = log.max_offset, len(log.queues())
    finally:
        log.close()
    if cut:
        print(f"cut at offset {walk.end}: {_reason(walk)}", file=out)
        if after.count:
            print(f"dropped {after.count} good records after it (offsets {after.first} to "
                  f"{after.last})", file=out)
    print(f"recovered: log ends at {end}, {queues} consume queues", file=out)
    if end != walk.end:
        print(f"the {name} store's own recovery ended the log at {end}, not at {walk.end}",
              file=err)
        return 1
    return 0


def _reason(walk: LogWalk) -> str:
    if walk.error is not None:
        return walk.error.reason
    return "zero fill where good records follow"
