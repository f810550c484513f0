"""Controller metadata tables: SyncStateSets and master history from controllers' data dirs.

``load(CONTROLLER_DIR)`` or, better, ``load([DIR_1, DIR_2, DIR_3])`` with the
data directory of every controller (each holds ``entrylog/`` and
``snapshot/``, by default ``<store.path>/raft``; a node's store path holding
``raft/`` is accepted too). The entry log and snapshot are opened through
the store plugin that wrote them (``mmap`` or ``lmdb``, asked from a
``PluginManager``), read, and replayed by ``triomq.controller.core.history``:
only committed entries count (see that module for how the commit point is
known from disk; with one directory only its snapshot is certain).

Tables (option ``table``):

- ``syncStateSet``: one row per broker group as of the commit point.
- ``masterHistory``: one row per master change, in log order.
- ``syncStateSetHistory``: one row per SyncStateSet change, in log order.

Opening a store may finish what a crash left (cut a torn entry-log tail),
as the controller's own restart would; a running controller holds its
directory's lock and cannot be read (stop it first).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from triomq.consensus.core.log import LogError, RaftLog
from triomq.consensus.durable import ENTRY_LOG_DIR, SNAPSHOT_DIR, DurableState
from triomq.controller.core.history import ControllerHistory, commit_point, replay
from triomq.errors import TriomqError
from triomq.plugin_manager import PluginManager
from triomq.plugins.spark_export.errors import SparkExportError

log = logging.getLogger("triomq.spark")

_STR, _INT, _LONG = (pa.string(), "string"), (pa.int32(), "int"), (pa.int64(), "long")
_IDS = (pa.list_(pa.int64()), "array<long>")
_GROUP = (("clusterName", *_STR), ("brokerName", *_STR))
_EPOCHS = (("masterEpoch", *_INT), ("syncStateSetEpoch", *_INT))
_AT = (("event", *_STR), ("raftIndex", *_LONG), ("raftTerm", *_LONG))

#: (name, Arrow type, Spark type) of each column of each table.
COLUMNS: dict[str, tuple[tuple[str, pa.DataType, str], ...]] = {
    "syncStateSet": (
        *_GROUP, ("masterBrokerId", *_LONG), ("masterAddress", *_STR), *_EPOCHS,
        ("syncStateSet", *_IDS),
        ("brokerAddresses", pa.map_(pa.int64(), pa.string()), "map<long,string>"),
        ("committedIndex", *_LONG), ("committedTerm", *_LONG), ("commitBasis", *_STR),
    ),
    "masterHistory": (*_GROUP, *_EPOCHS, ("brokerId", *_LONG), ("address", *_STR), *_AT),
    "syncStateSetHistory": (*_GROUP, *_EPOCHS, ("syncStateSet", *_IDS), *_AT),
}
SCHEMAS = {table: ", ".join(f"{name} {spark}" for name, _, spark in columns)
           for table, columns in COLUMNS.items()}
ARROW_SCHEMAS = {table: pa.schema([(name, typ) for name, typ, _ in columns])
                 for table, columns in COLUMNS.items()}

_RAFT = "raft"


def controller_dirs(paths: Sequence[str]) -> list[str]:
    """The controller data directories of ``paths``; ``SparkExportError`` naming a bad one."""
    found: list[str] = []
    for path in paths:
        if not os.path.isdir(path):
            raise SparkExportError(path, "is not a directory")
        for candidate in (path, os.path.join(path, _RAFT)):
            if all(os.path.isdir(os.path.join(candidate, d))
                   for d in (ENTRY_LOG_DIR, SNAPSHOT_DIR)):
                found.append(os.path.realpath(candidate))
                break
        else:
            raise SparkExportError(
                path, f"is not a controller data directory: it has no {ENTRY_LOG_DIR}/ and "
                f"{SNAPSHOT_DIR}/ (nor {_RAFT}/ holding them)")
    if len(set(found)) != len(found):
        raise SparkExportError("path", f"a controller directory is given twice: {paths}")
    return found


def _scheme(directory: str) -> str:
    # LMDB keeps an environment file; the mmap store keeps segments and JSON files.
    return "lmdb" if os.path.exists(os.path.join(directory, ENTRY_LOG_DIR, "data.mdb")) else "mmap"


def read_log(plugins: PluginManager, directory: str) -> RaftLog:
    """The snapshot and entries of one controller data directory."""
    scheme = _scheme(directory)
    try:
        durable = DurableState.open_scheme(plugins, scheme, directory, {}, fsync=False)
        try:
            snapshot = durable.load_snapshot()
            entries = durable.entries_from(snapshot.index + 1)
        finally:
            durable.close()
    except (TriomqError, LogError, OSError) as exc:
        raise SparkExportError(directory, f"cannot read the controller's Raft log ({scheme} "
                               f"store; is the controller still running?): {exc}") from None
    return RaftLog(snapshot, entries)


def history(paths: Sequence[str], plugins: PluginManager | None = None) -> ControllerHistory:
    """The committed controller history of the data directories ``paths``."""
    dirs = controller_dirs(paths)
    pm = plugins if plugins is not None else PluginManager.discover()
    logs = [read_log(pm, d) for d in dirs]
    commit = commit_point(logs)
    if commit.basis == "snapshot":
        log.warning(
            "controller dirs %s: the commit point is not known from %d log(s) (give the data "
            "dir of every controller, stopped after its leader committed an entry); reading "
            "up to the snapshot at index %d only", dirs, len(dirs), commit.index)
    try:
        return replay(logs, commit)
    except TriomqError as exc:
        raise SparkExportError(dirs[commit.source], str(exc)) from None


def rows(table: str, found: ControllerHistory) -> list[tuple]:
    """The rows of controller table ``table``."""
    commit = (found.commit.index, found.commit.term, found.commit.basis)
    if table == "syncStateSet":
        return [(g.cluster_name, g.broker_name, g.master_broker_id, g.master_address,
                 g.master_epoch, g.sync_state_set_epoch, sorted(g.sync_state_set),
                 g.addresses, *commit)
                for _, g in sorted(found.groups.items())]
    if table == "masterHistory":
        return [(c.cluster_name, c.broker_name, c.master_epoch, c.sync_state_set_epoch,
                 c.broker_id, c.address, c.event, c.index, c.term)
                for c in found.master_changes]
    return [(c.cluster_name, c.broker_name, c.master_epoch, c.sync_state_set_epoch,
             sorted(c.sync_state_set), c.event, c.index, c.term)
            for c in found.sync_state_set_changes]


def _arrow_value(value: object) -> object:
    # pyarrow reads a map value as a list of pairs.
    return list(value.items()) if isinstance(value, dict) else value


def export_parquet(paths: Sequence[str], out_dir: str) -> dict[str, int]:
    """Write each controller table to ``OUT_DIR/<table>.parquet``; rows per table."""
    found = history(paths)
    os.makedirs(out_dir, exist_ok=True)
    counts = {}
    for table, schema in ARROW_SCHEMAS.items():
        table_rows = rows(table, found)
        arrays = [pa.array([_arrow_value(row[i]) for row in table_rows], field.type)
                  for i, field in enumerate(schema)]
        pq.write_table(pa.Table.from_arrays(arrays, schema=schema),
                       os.path.join(out_dir, f"{table}.parquet"))
        counts[table] = len(table_rows)
    return counts
