"""The scenario interpreter on its own: snapshots in, commands out."""

from __future__ import annotations

import attrs

from triomq.testing import scenarios as sc
from triomq.testing.scenario_run import LIVENESS_MS, ScenarioRun

THREE = ("b1", "b2", "b3")


def settled(now_ms: int, *, master: str = "b1", epoch: int = 1) -> sc.ClusterSnapshot:
    brokers = {n: sc.BrokerView(n, up=True, role="master" if n == master else "slave",
                                epoch=epoch, in_sync=frozenset(THREE) if n == master
                                else frozenset()) for n in THREE}
    return sc.ClusterSnapshot(now_ms, brokers, master=master, master_epoch=epoch,
                       sync_state_set=frozenset(THREE))


def test_a_wait_past_its_bound_reports_what_it_sees() -> None:
    run = ScenarioRun(sc.Scenario("s", 3, (sc.Start(), sc.KillMaster(), sc.WaitMaster())))
    assert run.next(settled(0)) == sc.StartControllers()
    assert [run.next(settled(0)) for _ in THREE] == [sc.StartBroker(n) for n in THREE]
    assert run.next(settled(0)) == sc.KillBroker("b1")
    dead = settled(0)
    dead = attrs.evolve(dead, brokers={**dead.brokers, "b1": sc.BrokerView("b1", up=False)})
    commands = []
    now = 0
    while not isinstance(command := run.next(attrs.evolve(dead, now_ms=now)), sc.Done):
        commands.append(command)
        now += 1_000
    assert set(commands) == {sc.Advance()}
    assert now > LIVENESS_MS
    assert run.outcomes == [(0, "master of epoch +1, SyncStateSet (master, replica, replica)"),
                            (2, "no master, epoch +0")]
    assert run.parts == {"b1": "old master"}


def test_parts_name_the_brokers_in_outcomes() -> None:
    run = ScenarioRun(sc.Scenario("s", 3, (
        sc.Start(), sc.KillMaster(), sc.WaitMaster(),
        sc.WaitSyncStateSet(("new master", "replica")))))
    for _ in range(5):
        run.next(settled(0))
    after = settled(10, master="b3", epoch=2)
    after = attrs.evolve(after, brokers={
        **after.brokers, "b1": sc.BrokerView("b1", up=False),
        "b3": attrs.evolve(after.brokers["b3"], in_sync=frozenset({"b2", "b3"}))},
        sync_state_set=frozenset({"b2", "b3"}))
    assert isinstance(run.next(after), sc.Done)
    assert run.outcomes[1:] == [(2, "new master from the SyncStateSet, epoch +1"),
                                (3, "SyncStateSet (new master, replica)")]
    assert run.parts == {"b1": "old master", "b3": "new master"}

