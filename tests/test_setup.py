"""The set-up: `make run` installs only what the demonstration needs, `make test` adds
the test tools and the Spark extra, and the packaging metadata reads without setuptools
warnings (no deprecated license table, no experimental configuration)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def planned(target: str, tmp_path: Path) -> list[str]:
    """The commands ``make TARGET`` would run on a fresh checkout (no .venv yet)."""
    for name in ("Makefile", "pyproject.toml", "setup.py"):
        shutil.copy(ROOT / name, tmp_path / name)
    # --no-print-directory: under `make test` this make is a sub-make, which would
    # otherwise print the directories it enters and leaves.
    done = subprocess.run(["make", "--no-print-directory", "-n", target], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_run_installs_no_extra(tmp_path):
    commands = planned("run", tmp_path)
    installs = [c for c in commands if " install -e " in c]
    assert installs == [".venv/bin/pip install -e ."]
    assert commands[-1] == ".venv/bin/triomq demo"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_adds_the_test_and_spark_extras(tmp_path):
    installs = [c for c in planned("test", tmp_path) if " install -e " in c]
    assert installs == [".venv/bin/pip install -e '.[spark,dev]'"]


def test_packaging_metadata_reads_without_warnings():
    code = ("from setuptools.dist import Distribution\n"
            "from setuptools.config.pyprojecttoml import apply_configuration\n"
            "apply_configuration(Distribution(), 'pyproject.toml')\n")
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
