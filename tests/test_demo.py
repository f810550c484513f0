"""``triomq demo`` (``make run``) completes; its consumer group gets every acknowledged message."""

import re
import shutil
from pathlib import Path

import pytest
import trio

from triomq.cli import main
from triomq.plugin_manager import PluginManager
from triomq.plugins.demo.demo import SETTLE_WITHIN, Ledger, run_demo


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
    assert re.search(r"producer stopped; waited \d+ ms for the \d+ acknowledged", report)
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


async def test_the_report_waits_for_acknowledged_messages_that_arrive_late(autojump_clock):
    """The producer has stopped; the consumer group sees the last two acknowledged
    messages 4 s later: the demo waits for them and calls nothing lost."""
    ledger = Ledger()
    for n in range(5):
        ledger.acknowledged(f"m{n}")
    for n in range(3):
        ledger.consumed(f"m{n}")

    async def late_consumer() -> None:
        await trio.sleep(4)
        ledger.consumed("m3")
        ledger.consumed("m3")  # redelivered: a duplicate, not a loss
        await trio.sleep(0.5)
        ledger.consumed("m4")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(late_consumer)
        waited = await ledger.settled(within=SETTLE_WITHIN)
    assert waited == pytest.approx(4.5)
    assert ledger.unconsumed == set() and ledger.duplicates == 1


async def test_the_report_calls_lost_only_what_never_arrives_within_its_bound(autojump_clock):
    ledger = Ledger()
    ledger.acknowledged("m0")
    ledger.acknowledged("m1")
    ledger.consumed("m0")
    waited = await ledger.settled(within=SETTLE_WITHIN)
    assert waited == pytest.approx(SETTLE_WITHIN)
    assert ledger.unconsumed == {"m1"}
