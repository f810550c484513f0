"""``triomq export parquet STORE_DIR OUT_DIR``: the command line of the Spark plugin.

``triomq export controller OUT_DIR CONTROLLER_DIR...`` writes the controller
tables (``controller_tables``) to ``OUT_DIR/<table>.parquet`` with pyarrow.

By default the export runs in this process with pyarrow (see
``triomq.plugins.spark_export.parquet``), with its progress on stderr
(messages, bytes, rate, time left): a rich bar on a terminal, else a plain
line every ten seconds (``progress``). ``--spark-master URL`` runs it as a
Spark job instead (the ``triomq`` data source written with
``partitionBy("topic")``), on any cluster; both record the next offset in
``OUT_DIR/_triomq_export.json`` and resume from it.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from triomq.errors import TriomqError
from triomq.plugins.spark_export.options import ReadOptions, parse_options
from triomq.plugins.spark_export.progress import Progress, ProgressLines, terminal_bar


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``export parquet`` and ``export controller`` to the ``triomq`` parser."""
    export = subparsers.add_parser("export", help="export a store's messages (Parquet)")
    sub = export.add_subparsers(dest="export_format", required=True, metavar="FORMAT")
    p = sub.add_parser("parquet", help="export messages to Parquet, partitioned by topic")
    p.add_argument("store_dir", metavar="STORE_DIR",
                   help="store root holding commitlog/, or another store plugin's store "
                        "(LMDB...)")
    p.add_argument("out_dir", metavar="OUT_DIR", help="output directory (resumable)")
    p.add_argument("--topics", nargs="+", metavar="TOPIC",
                   help="topics to export (space or comma separated; default all)")
    p.add_argument("--from", dest="start", metavar="OFFSET",
                   help="first physical offset (default: the log start, or where the last "
                        "run stopped)")
    p.add_argument("--to", dest="end", metavar="OFFSET",
                   help="physical offset to stop at (default: the log end)")
    p.add_argument("--committed-only", action="store_true",
                   help="stop at the confirm offset (data replicated to the SyncStateSet)")
    p.add_argument("--spark-master", metavar="URL",
                   help="run as a Spark job on this master (e.g. local[2], spark://host:7077)")
    p.set_defaults(func=run_export)
    c = sub.add_parser("controller", help="export controller tables (SyncStateSets, master "
                                          "history) to Parquet")
    c.add_argument("out_dir", metavar="OUT_DIR", help="output directory")
    c.add_argument("controller_dirs", metavar="CONTROLLER_DIR", nargs="+",
                   help="data directory of every controller (holding entrylog/ and snapshot/)")
    c.set_defaults(func=run_controller_export)


def options_from_args(args: argparse.Namespace) -> ReadOptions:
    """The data source options the command line asks for, checked."""
    raw = {"path": args.store_dir, "committedOnly": str(args.committed_only)}
    if args.topics:
        raw["topics"] = ",".join(args.topics)
    if args.start is not None:
        raw["startingOffset"] = args.start
    if args.end is not None:
        raw["endingOffset"] = args.end
    return parse_options(raw)


def run_export(args: argparse.Namespace) -> int:
    """Run ``triomq export parquet``; return the exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    opts = options_from_args(args)
    if args.spark_master:
        from triomq.plugins.spark_export.spark_job import export_with_spark

        result = export_with_spark(opts, args.out_dir, args.spark_master)
    else:
        from triomq.plugins.spark_export.parquet import export_parquet

        with _progress() as progress:
            result = export_parquet(opts, args.out_dir, progress)
    counts = "" if result.rows is None else f"{result.rows} messages in {result.files} files, "
    print(f"exported {counts}offsets [{result.start}, {result.end}), to {args.out_dir}")
    return 0


def run_controller_export(args: argparse.Namespace) -> int:
    """Run ``triomq export controller``; return the exit code."""
    from triomq.plugins.spark_export.controller_tables import export_parquet

    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    counts = export_parquet(args.controller_dirs, args.out_dir)
    print(", ".join(f"{table}: {n} rows" for table, n in counts.items()) + f", to {args.out_dir}")
    return 0


@contextmanager
def _progress() -> Iterator[Progress]:
    """The export's progress on stderr: a rich bar on a terminal, else plain lines."""
    from rich.console import Console

    console = Console(stderr=True)
    if console.is_terminal:
        with terminal_bar(console) as update:
            yield update
        return
    lines = ProgressLines()

    def update(done: int, total: int, messages: int) -> None:
        line = lines.update(time.monotonic(), done, total, messages)
        if line is not None:
            print(line, file=sys.stderr, flush=True)

    yield update


def main(argv: list[str] | None = None) -> int:
    """Run the plugin's commands alone (``python -m triomq.plugins.spark_export.cli``)."""
    parser = argparse.ArgumentParser(prog="triomq")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except TriomqError as exc:
        print(f"triomq: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
