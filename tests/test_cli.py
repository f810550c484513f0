"""The ``triomq`` command: kernel sub-commands and error reporting."""

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from triomq.cli import build_parser, main
from triomq.plugin_manager import PluginManager


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


@pytest.mark.parametrize("which", [[], ["--cluster"], ["--acting"]])
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


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_help_texts_are_plain_text():
    parsers = list(_parsers(build_parser(PluginManager.discover())))
    assert {"admin", "store", "demo", "sim"} <= {p.prog.split()[-1] for p in parsers}
    marked = [p.prog for p in parsers
              if re.search(r"``|:(class|func|meth|mod):`", p.format_help())]
    assert not marked, f"reStructuredText markup in the help of {marked}"


def _run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """Run ``triomq ARGS`` with its standard output a pipe nobody reads any more."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "triomq.cli", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [["config"], ["config", "--markdown"], ["plugins", "--json"]])
def test_output_into_a_closed_pipe_ends_quietly(args):
    done = _run_into_closed_pipe(*args)
    assert (done.returncode, done.stderr) == (0, "")


def test_piped_into_head(tmp_path):
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(["bash", "-c", 'triomq config | head -1; exit "${PIPESTATUS[0]}"'],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0
    assert done.stdout == "name = 'node'\n"
    assert "Traceback" not in done.stderr


def test_other_broken_pipes_are_not_hidden(monkeypatch, capsys):
    def fail(args):
        raise BrokenPipeError("a socket of the command's own")

    monkeypatch.setattr("triomq.cli._cmd_config", fail)
    with pytest.raises(BrokenPipeError):
        main(["config"])


def test_a_missing_extra_is_named(monkeypatch, capsys):
    def needs_arrow(args):
        import pyarrow_not_installed_here  # noqa: F401

    def fail(args):
        raise ModuleNotFoundError("No module named 'pyarrow'", name="pyarrow")

    monkeypatch.setattr("triomq.cli._cmd_config", fail)
    assert main(["config"]) == 2
    assert "needs pyarrow, from the 'spark' extra: pip install 'triomq[spark]'" in (
        capsys.readouterr().err)
    monkeypatch.setattr("triomq.cli._cmd_config", needs_arrow)
    with pytest.raises(ModuleNotFoundError):
        main(["config"])
