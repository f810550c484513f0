"""``triomq demo`` (``make run``) completes and loses no acknowledged message."""

import pytest

from framework.demo import run_demo
from framework.plugins import PluginManager


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_demo_keeps_every_acknowledged_message(transport):
    lines: list[str] = []
    assert await run_demo(PluginManager.discover(), transport, say=lines.append) == 0
    report = "\n".join(lines)
    assert "(all of them)" in report
    assert "surviving replicas identical True" in report
    assert "the controller elected" in report
