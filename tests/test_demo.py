"""``triomq demo`` (``make run``) completes; its consumer group gets every acknowledged message."""

import re
import shutil
from pathlib import Path

import pytest

from triomq.cli import main
from triomq.demo import run_demo
from triomq.plugin_manager import PluginManager


@pytest.mark.parametrize(("transport", "keep"), [("inproc", True), ("tcp", False)])
async def test_demo_keeps_every_acknowledged_message(transport, keep):
    lines: list[str] = []
    assert await run_demo(PluginManager.discover(), transport, say=lines.append, keep=keep) == 0
    report = "\n".join(lines)
    assert re.search(r"acknowledged, never consumed +0 \(lost\)", report)
    acked = int(re.search(r"messages acknowledged +(\d+)", report).group(1))
    consumed = int(re.search(r"messages consumed +(\d+)", report).group(1))
    assert consumed >= acked >= 500
    assert "surviving replicas identical True" in report
    assert "the controller elected" in report
    root = Path(re.search(r"stores under (\S+)", report).group(1))
    if not keep:
        assert not root.exists()
        assert "stores kept" not in report
        return
    try:
        assert f"stores kept under {root}" in report
        dump = re.search(r"triomq store dump (\S+)", report).group(1)
        assert main(["store", "verify", dump]) == 0
        for name in ("b1", "b2", "b3", "c1", "c2", "c3"):
            assert (root / name).is_dir()
    finally:
        shutil.rmtree(root)
