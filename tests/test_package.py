"""The package root: the embedding API, each name loaded on first use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import triomq
import triomq.config
import triomq.runtime

ROOT = Path(__file__).resolve().parents[1]


def test_the_embedding_api_is_the_modules_own() -> None:
    assert triomq.open_node is triomq.runtime.open_node
    assert triomq.NodeConfig is triomq.config.NodeConfig
    assert set(triomq.__all__) <= set(dir(triomq))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        triomq.nope  # noqa: B018


def test_importing_a_codec_does_not_load_the_runtime() -> None:
    # A Spark worker decoding records needs neither trio nor the node runtime.
    code = ("import sys, triomq.protocol.columns, triomq.plugins.spark_export.arrow_decode; "
            "print(sorted(m for m in ('trio', 'triomq.runtime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_host_packages_named_framework_or_plugins_do_not_shadow_triomq(tmp_path) -> None:
    # A host application may have top-level packages with these generic names;
    # triomq must neither import them nor be hidden by them.
    for name in ("framework", "plugins"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(
            f"raise ImportError('the host package {name} was imported')\n")
    code = ("import json, triomq; from triomq.cli import main; "
            "raise SystemExit(main(['plugins', '--json']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    names = {p["name"] for p in json.loads(out.stdout)["plugins"]}
    assert {"transport_tcp", "store_mmap", "broker", "controller_dledger"} <= names


def test_every_package_folder_is_packaged() -> None:
    # pyproject maps framework/ to triomq and plugins/ to triomq.plugins; a
    # package folder missing from its list would be left out of a wheel.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {"framework": "triomq", "plugins": "triomq.plugins"}
    found = set()
    for folder, package in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *parts)))
    assert found == set(config["packages"])
    assert config["package-dir"] == {package: folder for folder, package in folders.items()}
