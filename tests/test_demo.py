"""``triomq demo`` (``make run``) completes; its consumer group gets every acknowledged message.
``triomq demo --acting-master`` reports a slave acting for its killed master and the master's
return, and fails a run that lost a message or whose consumer offsets went back."""

import re
import shutil
from pathlib import Path

import pytest
import trio

from triomq.cli import main
from triomq.plugin_manager import PluginManager
from triomq.plugins.demo import acting
from triomq.plugins.demo.acting import run_acting_demo
from triomq.plugins.demo.acting_report import ActingRun, problems, report
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


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_the_acting_master_demo_reports_what_the_nodes_said(transport):
    """a0 is killed: a1 acts (routed as broker id 0, read only), serves broker-a's backlog,
    escapes the delayed messages due meanwhile onto broker-b; a0 comes back through
    pre-online and broker-a's consumer offsets never go back."""
    lines: list[str] = []
    assert await run_acting_demo(PluginManager.discover(), transport, say=lines.append) == 0
    text = "\n".join(lines)
    acked = int(re.search(r"messages acknowledged +(\d+) \(", text).group(1))
    assert re.search(rf"messages consumed +{acked}\n", text)
    assert re.search(r"acknowledged, never consumed +0 \(lost\)", text)
    assert "acting slave                 a1 (broker id 1)" in text
    assert re.search(r"kill -> route rewritten +\d+ ms \(broker id 0 -> \S+, perm 4\)", text)
    assert re.search(r"kill -> acting term +\d+ ms \(a1\)", text)
    # The backlog of 40 left on broker-a before the kill, read through the acting slave
    # (with any delayed message the master delivered before it died).
    through = int(re.search(r"consumed through a1 +(\d+) message\(s\) of broker-a", text)[1])
    assert through >= 40
    # broker-a is read only: every send while a1 acts goes to broker-b.
    assert re.search(r"sent while a1 acted +(\d+) acknowledged \(\1 by broker-b\)", text)
    # The delayed messages due meanwhile are delivered by broker-b, none lost.
    due = re.search(r"delayed, due in the outage +(\d+) stored on broker-a, \1 delivered by "
                    r"broker-b \(escaped\), 0 lost", text)
    assert due and int(due[1]) > 0
    assert re.search(r"pre-online of a0 +took consumer offsets, delay offsets\b.* from \S+ "
                     r"\(took back \d newer table\(s\) of the slaves\)", text)
    assert re.search(r"restart -> registered +\d+ ms \(broker id 0 -> a0, perm 6\)", text)
    offsets = re.findall(r"queue \d +(\d+), (\d+), (\d+)", text)
    assert len(offsets) == 4
    for at_kill, while_acting, after in offsets:
        assert int(at_kill) < int(while_acting) <= int(after)
    assert "offsets gone back            0" in text
    assert "PROBLEM" not in text


async def test_the_acting_master_demo_flags_offsets_a_master_without_pre_online_took_back(
        monkeypatch):
    """With skip_pre_online a0 registers at once with its old offsets: the report says
    which queues went back, and the demo fails."""
    monkeypatch.setattr(acting, "BROKER", {**acting.BROKER, "skip_pre_online": True})
    lines: list[str] = []
    assert await run_acting_demo(PluginManager.discover(), "inproc", say=lines.append) == 1
    text = "\n".join(lines)
    assert "(no pre-online ran)" in text
    assert "offsets gone back            4" in text
    assert len(re.findall(r"PROBLEM +queue \d's offset went back after the return: "
                          r"(\d+) -> (\d+)", text)) == 4


def test_the_acting_report_flags_a_lost_message_and_an_offset_that_went_back():
    run = ActingRun(acked={"m1": ("normal", "broker-a"), "m2": ("delayed", "broker-a"),
                           "m3": ("normal", "broker-b")},
                    due_in_outage={"m2"}, consumed={"m1": ["broker-a"], "m3": ["broker-b"]},
                    acting_slave="a1", acting_id=1, acting_term="a1",
                    offsets={"at the kill": {0: 5, 1: 5}, "while acting": {0: 9, 1: 4},
                             "after the return": {0: 9, 1: 4}})
    lines = report(run)
    assert "  acknowledged, never consumed 1 (lost)" in lines
    assert ("  delayed, due in the outage   1 stored on broker-a, 0 delivered by broker-b "
            "(escaped), 1 lost") in lines
    assert "  offsets gone back            1" in lines
    assert problems(run) == ["1 acknowledged message(s) never consumed",
                             "queue 1's offset went back while acting: 5 -> 4"]
    assert ("  PROBLEM                      queue 1's offset went back while acting: 5 -> 4"
            in lines)


def test_the_acting_report_passes_a_run_that_kept_everything_with_the_routed_slave_acting():
    run = ActingRun(acked={"m1": ("normal", "broker-a")},
                    consumed={"m1": ["broker-a", "broker-a"]},
                    acting_slave="a1", acting_term="a1",
                    offsets={"at the kill": {0: 1}, "while acting": {0: 1},
                             "after the return": {0: 2}})
    assert problems(run) == []
    assert "  consumed more than once      1" in report(run)
    run.acting_term = "a2"
    assert problems(run) == ["the route names a1 broker id 0 but a2 acts"]
