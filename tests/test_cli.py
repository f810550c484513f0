"""The ``triomq`` command: kernel sub-commands and error reporting."""

import json

import pytest

from framework.cli import main


def test_plugins_lists_in_tree_plugins(capsys):
    assert main(["plugins", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {p["name"] for p in data["plugins"]}
    assert {"transport_inproc", "transport_tcp", "store_mmap", "store_lmdb", "broker"} <= names
    assert {"commitlog:mmap", "entrylog:lmdb", "meta:mmap"} <= set(data["log_stores"])


def test_config_lists_documented_keys(capsys):
    assert main(["config", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    keys = {row["key"] for row in rows}
    assert {"name", "role", "store.path", "broker.broker_name"} <= keys
    assert all(row["doc"] for row in rows)


@pytest.mark.parametrize("which", [[], ["--cluster"]])
def test_sim_prints_the_tally_last(capsys, which):
    assert main(["sim", "--seeds", "3", "--start", "11", *which]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 passed, 0 failed"


def test_bad_config_names_the_key(tmp_path, capsys):
    config = tmp_path / "node.toml"
    config.write_text('name = "x"\n[store]\nschem = "mmap"\n')
    assert main(["standalone", "--config", str(config)]) == 2
    assert "store.schem: unknown key 'schem'" in capsys.readouterr().err


def test_role_mismatch_is_reported(tmp_path, capsys):
    config = tmp_path / "node.toml"
    config.write_text('role = "controller"\n')
    assert main(["broker", "--config", str(config)]) == 2
    assert "role = 'controller', but 'triomq broker' was run" in capsys.readouterr().err
