"""The README is tested like code: every fenced block of it, and what it names.

Blocks by info string:

- ``python``: run as a program in a fresh temporary folder (with a timeout);
- ``python pytest``: a test module, run by pytest there; its tests must pass;
- ``python fragment``: needs what a page cannot give it (a Spark session, a
  store root): compiled, and its imports run;
- ``toml``: parsed; a node's configuration is loaded and validated as a
  ``NodeConfig``, a ``pyproject.toml`` excerpt must name the ``triomq``
  entry-point group;
- ``sh``: every command exists: ``make`` targets in the Makefile, ``triomq``
  sub-commands and their options in the parser (``--help`` of each parses),
  other programs on the PATH;
- ``text output``: what the ``python`` block before it prints, checked against
  the program's output with numbers and message ids masked (queues, offsets
  and ids differ from run to run);
- ``text``: not checked (layout trees, a command's output).

In ``sh`` blocks, ``.venv/bin/triomq`` is checked as ``triomq`` and
``source FILE`` needs the file.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from triomq import hookspecs
from triomq.cli import build_parser, main
from triomq.config import NodeConfig, from_mapping
from triomq.plugin_manager import PluginManager
from triomq.settings import describe
from triomq.testing import pytest_plugin

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
KINDS = {"python", "python pytest", "python fragment", "toml", "sh", "text", "text output"}


def blocks() -> list[tuple[int, str, str]]:
    """``(line, info string, text)`` of every fenced block."""
    found = []
    lines = README.read_text(encoding="utf-8").splitlines()
    start = info = None
    for number, line in enumerate(lines, 1):
        if not line.startswith("```"):
            continue
        if start is None:
            start, info = number, line[3:].strip()
        else:
            found.append((start, info, "\n".join(lines[start:number - 1]) + "\n"))
            start = None
    assert start is None, f"README.md:{start}: a block is never closed"
    return found


def of_kind(kind: str) -> list[pytest.param]:
    return [pytest.param(text, id=f"line-{line}") for line, info, text in blocks()
            if info == kind]


def programs_and_outputs() -> list[pytest.param]:
    """Each ``python`` block, with the ``text output`` block after it (None if none)."""
    found = blocks()
    pairs = []
    for index, (line, info, text) in enumerate(found):
        if info != "python":
            continue
        after = found[index + 1] if index + 1 < len(found) else None
        shown = after[2] if after is not None and after[1] == "text output" else None
        pairs.append(pytest.param(text, shown, id=f"line-{line}"))
    return pairs


def masked(output: str) -> list[str]:
    """Output lines with message ids and numbers masked."""
    output = re.sub(r"\b[0-9A-F]{32}\b", "<id>", output)
    return re.sub(r"\d+", "#", output).strip().splitlines()


def test_every_block_says_what_it_is():
    unknown = [(line, info) for line, info, _ in blocks() if info not in KINDS]
    assert not unknown, f"blocks need one of the info strings {sorted(KINDS)}: {unknown}"


@pytest.mark.parametrize(("code", "shown"), programs_and_outputs())
def test_python_block_runs_quietly_and_prints_what_is_shown(code, shown, tmp_path):
    program = tmp_path / "example.py"
    program.write_text(code)
    done = subprocess.run([sys.executable, str(program)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", "an example runs without a warning"
    assert shown is not None, "the block's output is shown after it, in a `text output` block"
    assert masked(done.stdout) == masked(shown)


def test_every_output_follows_a_program():
    found = blocks()
    orphans = [line for index, (line, info, _) in enumerate(found)
               if info == "text output" and (index == 0 or found[index - 1][1] != "python")]
    assert orphans == []


@pytest.mark.parametrize("code", of_kind("python pytest"))
def test_python_test_module_passes(code, tmp_path):
    (tmp_path / "test_example.py").write_text(code)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_example.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\d+ passed", done.stdout)


@pytest.mark.parametrize("code", of_kind("python fragment"))
def test_python_fragment_compiles_and_imports(code):
    tree = ast.parse(code)
    imports = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    assert imports, "a fragment imports what it uses"
    exec(compile(ast.Module(body=imports, type_ignores=[]), "README.md", "exec"), {})


@pytest.mark.parametrize("text", of_kind("toml"))
def test_toml_block_is_valid(text):
    data = tomllib.loads(text)
    if "project" in data:
        assert "triomq" in data["project"]["entry-points"]
    else:
        assert isinstance(from_mapping(NodeConfig, data), NodeConfig)


def test_the_static_master_shown_is_the_example_file():
    shown = [tomllib.loads(text) for _, info, text in blocks()
             if info == "toml" and 'name = "broker-a-0"' in text]
    example = tomllib.loads((ROOT / "examples" / "static" / "broker-a-0.toml").read_text())
    assert shown == [example]


def _sub_commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _check_triomq(words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser(PluginManager.discover())
    path: list[str] = []
    for word in words:
        sub = _sub_commands(parser)
        if word not in sub:
            break
        parser = sub[word]
        path.append(word)
    assert path, f"no such command: triomq {' '.join(words)}"
    options = {o.split("=")[0].strip("[]") for o in words if o.lstrip("[").startswith("--")}
    unknown = options - set(parser._option_string_actions)
    assert not unknown, f"triomq {' '.join(path)} has no option {sorted(unknown)}"
    with pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: triomq {' '.join(path)}")


@pytest.mark.parametrize("text", of_kind("sh"))
def test_sh_block_commands_exist(text, capsys):
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    for line in text.splitlines():
        command = line.split(" #")[0].strip()
        if not command or command.startswith("#"):
            continue
        words = shlex.split(command)
        if words[0] in ("triomq", ".venv/bin/triomq"):
            _check_triomq(words[1:], capsys)
        elif words[0] == "source":
            assert (ROOT / words[1]).exists() or words[1] == ".venv/bin/activate"
        elif words[0] == "make":
            assert words[1] in targets, f"no make target {words[1]!r}"
        elif "/" in words[0]:
            # A script of the repository, by its path from the root (not from the
            # working directory, which another test may have changed).
            script = ROOT / words[0]
            assert script.is_file() and os.access(script, os.X_OK), \
                f"{words[0]}: no executable file of the repository"
        else:
            assert shutil.which(words[0]), f"{words[0]}: not a command here"


def test_readme_lists_every_key_with_its_default():
    text = README.read_text(encoding="utf-8")
    missing = [key for key, default, _ in describe(NodeConfig)
               if f"| `{key}` | `{default}` |" not in text]
    assert not missing, f"regenerate the table with `triomq config --markdown`: {missing}"


def test_readme_starts_with_the_two_commands():
    head = README.read_text(encoding="utf-8").split("## ")[0]
    assert "make run" in head and "make test" in head


def test_every_in_tree_plugin_and_hook_is_listed():
    text = README.read_text(encoding="utf-8")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    plugins = pyproject["project"]["entry-points"]["triomq"]
    assert [name for name in plugins if f"| `{name}`" not in text] == []
    hooks = [name for name in dir(hookspecs) if name.startswith("triomq_")]
    assert [name for name in hooks if f"`{name}(" not in text] == []


def test_the_pytest_fixtures_are_named():
    text = README.read_text(encoding="utf-8")
    tree = ast.parse(Path(pytest_plugin.__file__).read_text())
    fixtures = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                and any("fixture" in ast.unparse(d) for d in node.decorator_list)]
    assert fixtures
    assert [name for name in fixtures if f"`{name}`" not in text] == []


def test_files_named_are_in_the_repository():
    text = README.read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w./-]+\.(?:md|py|toml|c))`", text))
    named |= {target for target in re.findall(r"\]\(([^)#]+)\)", text)
              if not target.startswith(("http://", "https://"))}
    # Paths are written from the repository's root, bare names are files there.
    assert sorted(name for name in named if not (ROOT / name).exists()) == []
    assert not re.search(r"\bseed \d{3}\b|DESIGN\.md", text)


def test_files_named_by_the_architecture_page_exist():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w.-]+/[\w./-]*\.(?:py|md|c|toml))`", text))
    # Written from the repository's root, or inside framework/ or plugins/.
    absent = [name for name in named
              if not any((base / name).exists() for base in (ROOT, ROOT / "framework",
                                                              ROOT / "plugins"))]
    assert sorted(absent) == []
    assert not re.search(r"\bseed \d{3}\b|DESIGN\.md", text)
