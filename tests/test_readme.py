"""The README documents every configuration key, exactly as the code declares it."""

from pathlib import Path

from framework.config import NodeConfig
from framework.settings import describe

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_lists_every_key_with_its_default():
    text = README.read_text(encoding="utf-8")
    missing = [key for key, default, _ in describe(NodeConfig)
               if f"| `{key}` | `{default}` |" not in text]
    assert not missing, f"regenerate the table with `triomq config --markdown`: {missing}"


def test_readme_starts_with_the_two_commands():
    head = README.read_text(encoding="utf-8").split("## ")[0]
    assert "make run" in head and "make test" in head
