"""The store plugins through the plugin manager and the ``triomq store`` command line."""

from __future__ import annotations

from pathlib import Path

import pytest

import plugins.store_lmdb
import plugins.store_mmap
from framework.cli import build_parser
from framework.errors import ConfigError
from framework.plugins import PluginManager
from framework.store import STORE_KINDS, CommitLog, EntryLog, MetaStore
from framework.testing.store_suite import make_record

PROTOCOLS = {"commitlog": CommitLog, "entrylog": EntryLog, "meta": MetaStore}


@pytest.fixture
def pm() -> PluginManager:
    pm = PluginManager()
    pm.register(plugins.store_mmap, "store_mmap")
    pm.register(plugins.store_lmdb, "store_lmdb")
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
