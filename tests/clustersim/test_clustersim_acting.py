"""The acting-master simulation: a static group's slave acts for its absent master.

A master that crashes leaves its smallest alive slave acting (the name
servers route it as id 0, read-only), whose delayed messages escape to the
other group's master, as do the checkpoints and acks of the pops it serves
and its open transactions;
the master that returns takes the slave's newer tables back before it
registers. Each invariant is shown to catch a broken
rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult, Fallback
from triomq.broker.pop.core.remote_read import Unread
from triomq.broker.pop.core.revive import ReviveQueue
from triomq.broker.registration.core.member_group import GroupWatch
from triomq.broker.registration.core.pre_online import PreOnline
from triomq.broker.secondary.core.transaction import TransactionLedger
from triomq.broker.secondary.core.transaction_reads import TransactionReads
from triomq.broker.send.core.put_checks import BrokerState
from triomq.testing.clustersim_acting import ActingSimulation, run_seed, run_seeds
from triomq.testing.clustersim_acting_broker import StaticBroker
from triomq.testing.clustersim_acting_pops import ActingPops
from triomq.testing.clustersim_acting_transactions import ActingTxProducer, taken_by
from triomq.testing.seeds import Violation


def _lose(self: StaticBroker, order: Fallback, step: int | EscapeResult,
          message: EscapedMessage, done: Callable[[EscapeResult], None]) -> None:
    """The broken rule: the escape answers PUT_OK without the other master storing it."""
    done(EscapeResult(code=0))


def _master_away(sim: ActingSimulation, away_ms: int = 6000) -> None:
    """Run a while, crash the master for ``away_ms``, run until it is routed again."""
    sim.run_for(3000)
    sim.crash("a0", away_ms)
    sim.run_for(away_ms + 10)
    sim.run_until(sim.master_routed, 10_000, "the master back")


def test_a_slave_acts_while_its_master_is_away_and_the_master_takes_its_tables_back() -> None:
    sim = ActingSimulation(5, chaos=False, namesrvs=1, locks=True)
    sim.run_for(3000)
    assert sim.routed_to == "a0"
    sim.crash("a0", 6000)
    sim.run_for(5000)
    assert sim.brokers["a1"].acting and not sim.brokers["a2"].acting
    assert sim.routed_to == "a1"  # the name server routes the acting slave as id 0
    acting_offsets = sim.brokers["a1"].offsets.offsets()
    sim.run_for(1010)
    sim.run_until(sim.master_routed, 10_000, "the master back")
    # The name server's notice (or the next member-group poll) ends the acting term.
    sim.run_until(lambda: not sim.brokers["a1"].acting, 1000, "a1 no longer acting")
    assert sim.pre_onlines == 2  # its first start, and its return
    master = sim.brokers["a0"].offsets.offsets()
    for key, queues in acting_offsets.items():
        for queue_id, offset in queues.items():
            assert master[key][queue_id] >= offset
    sim.run_until(lambda: not sim.undelivered(), 20_000, "every delayed message delivered")
    assert "b0" in sim.delivered.values()  # what came due while a1 acted escaped to b0
    slave, master_log = sim.brokers["a1"].log, sim.brokers["a0"].log
    assert slave.data == master_log.data[:slave.max_offset]
    assert sim.orderly is not None and sim.orderly.grants  # the orderly clients held the queue


# 200 seeds in chunks (``make soak`` runs 2,000): each test stays far inside the suite's
# per-test timeout on a busy machine.
@pytest.mark.parametrize("start", range(0, 200, 40))
def test_seed_sweep_keeps_every_invariant(start: int) -> None:
    summary = run_seeds(40, start)
    assert not summary.failures, [f.violation for f in summary.failures]
    assert summary.passed == 40


def test_the_sweep_exercises_acting_terms_pops_and_transactions() -> None:
    sims = [ActingSimulation(seed) for seed in range(20)]
    results = [sim.run() for sim in sims]
    assert all(r.ok for r in results)
    assert sum(1 for sim in sims if sim.acting_terms) >= 15
    assert sum(1 for sim in sims if sim.pre_onlines > 1) >= 8
    assert sum(1 for sim in sims if sim.pops is not None and sim.pops.acting_pops) >= 5
    assert {sim.escape_bridges for sim in sims} == {
        ("remote",), ("container", "remote"), ("container",)}
    handed_on = [sum(taken_by(sim.brokers["b0"]).values()) for sim in sims if sim.tx]
    assert sum(1 for n in handed_on if n) >= 3  # acting slaves' transactions went to b0


def test_a_failing_seed_names_its_replay_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StaticBroker, "_escape_through", _lose)
    result = run_seed(0)
    assert not result.ok
    assert result.replay == "python -m triomq.testing.clustersim_acting --seeds 1 --start 0"
    assert f"(replay: {result.replay})" in result.violation


def test_an_acting_slave_storing_on_its_own_log_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The broken rule: an acting slave puts its delayed messages through its own put flow,
    # which takes it for a master.
    def as_master(self: StaticBroker) -> BrokerState:
        return BrokerState(broker_id=self.broker_id, role="master", is_master=True,
                           in_sync_replicas=1)

    monkeypatch.setattr(StaticBroker, "_state", as_master)
    sim = ActingSimulation(5, chaos=False, namesrvs=1, escape_while_acting=False)
    caught = r"slave a1 \(acting: True\) appended to its own commit log"
    with pytest.raises(Violation, match=caught):
        _master_away(sim)


def test_a_delayed_message_lost_by_the_escape_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StaticBroker, "_escape_through", _lose)
    sim = ActingSimulation(5, chaos=False, namesrvs=1)
    _master_away(sim)
    with pytest.raises(Violation, match="every acknowledged delayed message delivered") as caught:
        sim.run_until(lambda: not sim.undelivered(), 20_000,
                      "every acknowledged delayed message delivered")
    assert ("replay: triomq.testing.clustersim_acting.ActingSimulation(5, chaos=False, "
            "namesrvs=1).run()") in str(caught.value)


def test_a_master_that_ignores_its_slaves_tables_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The broken rule: the pre-online takes nothing back from the slaves.
    fetched = PreOnline.fetched
    monkeypatch.setattr(PreOnline, "fetched", lambda self, address, versions, now: fetched(
        self, address, None, now))
    sim = ActingSimulation(5, chaos=False, namesrvs=1)
    with pytest.raises(Violation, match=r"went online .* older than a1's"):
        _master_away(sim)


def test_a_lock_granted_without_a_quorum_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The broken rule: one replica's grant is enough, so the returning master grants the
    # queue a client still holds through the slave that acted.
    monkeypatch.setattr("triomq.testing.clustersim_acting_locks.lock_quorum", lambda total: 1)
    sim = ActingSimulation(7, chaos=False, namesrvs=1, locks=True)
    with pytest.raises(Violation, match=r"clients \['o1', 'o2'\] both hold the lock"):
        _master_away(sim)
        sim.run_for(5000)


def test_a_writable_route_to_an_acting_slave_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The broken rule: the name server keeps the group's queues writable without a master.
    monkeypatch.setattr("triomq.namesrv.core.route_info.PERM_WRITE", 0)
    sim = ActingSimulation(5, chaos=False, namesrvs=1)
    with pytest.raises(Violation, match="routes slave a1:10911 as id 0 of broker-a with "
                                        "writable queues"):
        _master_away(sim)


def test_only_the_smallest_alive_slave_acts() -> None:
    sim = ActingSimulation(5, chaos=False, namesrvs=1)
    _master_away(sim)
    assert sim.acting_terms == 1
    sim.run_for(1000)  # the next member-group poll, or the name server's notice
    watch = sim.brokers["a2"].watch
    assert isinstance(watch, GroupWatch) and watch.min_broker_id == 0  # the master is back
    assert not sim.brokers["a2"].acting


def _pops_resolved(sim: ActingSimulation) -> None:
    pops = sim.pops
    assert pops is not None
    sim.run_until(lambda: not pops.unresolved(), 20_000,
                  "every acknowledged pop acked or revived")


def test_an_acting_slaves_pops_are_revived_by_the_master_its_checkpoints_went_to() -> None:
    sim = ActingSimulation(5, chaos=False, namesrvs=1, pops=True)
    _master_away(sim)
    _pops_resolved(sim)
    pops = sim.pops
    assert pops is not None and pops.acting_pops  # a1 served pops while it acted
    # b0 revived them, reading the messages from broker-a; a1 wrote no log of its own.
    assert pops.remote_revives
    slave, master_log = sim.brokers["a1"].log, sim.brokers["a0"].log
    assert slave.data == master_log.data[:slave.max_offset]


def test_a_revive_that_cannot_read_another_groups_message_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The broken rule: b0 never finds the acting slave's popped messages.
    monkeypatch.setattr(ActingPops, "_read_remote", lambda self, broker, read: Unread.NOT_HERE)
    sim = ActingSimulation(5, chaos=False, namesrvs=1, pops=True)
    _master_away(sim)
    with pytest.raises(Violation, match="every acknowledged pop acked or revived"):
        _pops_resolved(sim)


def test_a_revive_of_a_message_whose_ack_was_read_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The broken rule: the revive flow drops acks, so b0 revives what the consumer acked
    # through the acting slave.
    monkeypatch.setattr(ReviveQueue, "_ack", lambda self, ack: None)
    sim = ActingSimulation(7, chaos=False, namesrvs=1, pops=True)
    with pytest.raises(Violation, match=r"b0 revives .* whose ack it read"):
        _master_away(sim)
        _pops_resolved(sim)


def _transactions_ended(sim: ActingSimulation) -> ActingTxProducer:
    tx = sim.tx
    assert tx is not None
    sim.run_until(tx.all_ended, 20_000, "every acknowledged transaction ended")
    tx.check_logs()
    return tx


def test_an_acting_slave_hands_its_open_transactions_on_to_the_other_master() -> None:
    sim = ActingSimulation(5, chaos=False, namesrvs=1, transactions=True)
    _master_away(sim)
    tx = _transactions_ended(sim)
    # a1's check escaped the half messages due to b0, whose own check asked the producer
    # and committed there; a1 wrote no log of its own.
    b0 = sim.brokers["b0"]
    assert sum(taken_by(b0).values()) and sum(tx.commits()["b0"].values())
    slave, master_log = sim.brokers["a1"].log, sim.brokers["a0"].log
    assert slave.data == master_log.data[:slave.max_offset]


def test_an_acting_term_that_forgets_what_it_handed_on_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The broken rule: the term's ledger keeps nothing, so an END_TRANSACTION's commit
    # and the check round both hand the transaction on.
    monkeypatch.setattr(TransactionLedger, "begin", lambda self, key, how: None)
    result = ActingSimulation(11, transactions=True).run()
    assert re.search(r"a1 handed transaction \w+ on twice in one acting term",
                     result.violation), result.violation


def test_a_transaction_committed_more_often_than_its_log_took_it_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The broken rule: the master reads no op record and keeps nothing, so each answer
    # of its producer commits again.
    monkeypatch.setattr(TransactionLedger, "begin", lambda self, key, how: None)
    monkeypatch.setattr(TransactionReads, "catch_up", lambda self, ledger, progress: None)
    result = ActingSimulation(33, transactions=True).run()
    assert re.search(r"committed \d times in a0's log, which took it 1 times",
                     result.violation), result.violation
