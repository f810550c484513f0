"""The store plugins through the plugin manager and the ``triomq store`` command line."""

from __future__ import annotations

import struct
from pathlib import Path

import lmdb
import pytest

import triomq.plugins.store_lmdb
import triomq.plugins.store_mmap
from triomq.cli import build_parser
from triomq.errors import ConfigError
from triomq.plugin_manager import PluginManager
from triomq.store import (
    READER_KIND,
    STORE_KINDS,
    CommitLog,
    CommitLogReader,
    EntryLog,
    MetaStore,
    StoreNotFound,
)
from triomq.testing.store_suite import make_record

PROTOCOLS = {"commitlog": CommitLog, "entrylog": EntryLog, "meta": MetaStore}


@pytest.fixture
def pm() -> PluginManager:
    pm = PluginManager()
    pm.register(triomq.plugins.store_mmap, "store_mmap")
    pm.register(triomq.plugins.store_lmdb, "store_lmdb")
    return pm


def test_every_kind_on_both_schemes(pm: PluginManager, tmp_path: Path) -> None:
    assert {(k, s) for k in STORE_KINDS for s in ("mmap", "lmdb")} <= set(pm.store_kinds())
    for kind in STORE_KINDS:
        for scheme in ("mmap", "lmdb"):
            # One options table serves every kind of a plugin.
            opts = {"segment_size": 1 << 16}
            store = pm.log_store(kind, scheme)(str(tmp_path / f"{kind}-{scheme}"), opts)
            assert isinstance(store, PROTOCOLS[kind])
            store.close()
    for scheme in ("mmap", "lmdb"):
        reader = pm.log_store(READER_KIND, scheme)(str(tmp_path / f"commitlog-{scheme}"), {})
        assert isinstance(reader, CommitLogReader) and reader.scheme == scheme
        assert (reader.min_offset, reader.end_offset) == (0, 0)
        reader.close()
        with pytest.raises(StoreNotFound):
            pm.log_store(READER_KIND, scheme)(str(tmp_path / f"meta-{scheme}"), {})
    for scheme in ("mmap", "lmdb"):
        with pytest.raises(ConfigError, match="segmentsize") as info:
            pm.log_store("commitlog", scheme)(str(tmp_path / "x"), {"segmentsize": 1})
        assert info.value.path == "segmentsize"


def test_store_cli(pm: PluginManager, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "root"
    with pm.log_store("commitlog", "mmap")(str(root), {"segment_size": 1 << 16}) as log:
        log.append_batch([make_record(i) for i in range(5)])
    parser = build_parser(pm)
    for argv, code in ((["store", "verify", str(root)], 0),
                       (["store", "dump", str(root), "--json", "--from", "0"], 0),
                       (["store", "recover", str(root)], 0),
                       (["store", "verify", str(tmp_path / "missing")], 2)):
        args = parser.parse_args(argv)
        assert args.func(args) == code
    out = capsys.readouterr().out
    assert "ok: 5 records" in out
    assert out.count('"physicalOffset"') == 5
    assert "recovered: log ends at" in out


def patch_lmdb_log(directory: Path, offset: int, data: bytes) -> None:
    """Overwrite bytes of an LMDB commit log in place, as a damaged disk would."""
    env = lmdb.open(str(directory), max_dbs=8)
    log = env.open_db(b"log")
    with env.begin(write=True) as txn:
        cur = txn.cursor(db=log)
        cur.set_range(struct.pack(">Q", offset + 1))
        cur.prev()
        at = struct.unpack(">Q", cur.key())[0]
        chunk = bytearray(cur.value())
        chunk[offset - at:offset - at + len(data)] = data
        cur.put(cur.key(), bytes(chunk))
    env.close()


def test_store_cli_on_an_lmdb_store(pm: PluginManager, tmp_path: Path,
                                    capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "lmdb"
    with pm.log_store("commitlog", "lmdb")(str(root), {"segment_size": 4096}) as log:
        results = log.append_batch([make_record(i, queue_id=i % 2, body_size=150)
                                    for i in range(40)])  # blanks at segment ends
    parser = build_parser(pm)

    def cli(*argv: str) -> int:
        args = parser.parse_args(["store", *argv])
        return args.func(args)

    assert cli("verify", str(root)) == 0
    assert "ok: 40 records" in capsys.readouterr().out
    assert cli("dump", str(root), "--queue", "1", "--from", str(results[30].physical_offset)) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5

    bad = results[25]
    patch_lmdb_log(root, bad.physical_offset + bad.size - 2, b"\xff")
    assert cli("verify", str(root)) == 1
    err = capsys.readouterr().err
    assert f"bad record at offset {bad.physical_offset}: properties are not valid UTF-8" in err
    assert "14 good records after it" in err
    assert cli("recover", str(root), "--dry-run") == 0
    assert f"would cut at offset {bad.physical_offset}" in capsys.readouterr().out
    assert cli("recover", str(root)) == 1
    assert "refusing to cut" in capsys.readouterr().err
    assert cli("recover", "--scheme", "lmdb", str(root), "--force") == 0
    assert f"recovered: log ends at {bad.physical_offset}, 2 consume queues" in \
        capsys.readouterr().out
    assert cli("verify", str(root)) == 0
    with pm.log_store("commitlog", "lmdb")(str(root), {"segment_size": 4096}) as log:
        assert log.max_offset == bad.physical_offset
        assert log.queue_max_offset("t", 0) + log.queue_max_offset("t", 1) == 25
        assert [r.physical_offset for r in log.iter_records()] == [
            r.physical_offset for r in results[:25]]
