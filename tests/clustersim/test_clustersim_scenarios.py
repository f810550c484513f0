"""Issue 6's failover scenarios inside the deterministic controller-mode simulation.

Each test drives ``Simulation(seed, chaos=False)`` by hand; the simulation's
invariants (one writer per epoch, no acked message lost, prefix-consistent
SyncStateSet members, epochs never going back) are checked all along, so a
scenario also fails if any of them breaks while it runs.
"""

from __future__ import annotations

import pytest

from triomq.broker.core.codes import ResponseCode as PutCode
from triomq.controller import ElectMasterEvent, ResponseCode
from triomq.testing.clustersim import Simulation
from triomq.testing.clustersim_controller import controller_name

CONTROLLERS = {controller_name(i) for i in (1, 2, 3)}


def settled(replicas: int, *, seed: int = 7, unclean: bool = False) -> Simulation:
    """A simulation whose group has a master, a full SyncStateSet and completed puts."""
    sim = Simulation(seed, replicas=replicas, unclean=unclean, chaos=False)
    sim.run_until(lambda: sim.master() is not None
                  and len(sim.group_state.sync_state_set) == replicas
                  and len(sim.acked) >= 5, 10_000, "a settled group")
    return sim


def elections(sim: Simulation) -> list[ElectMasterEvent]:
    return [e for e in sim.committed_events if isinstance(e, ElectMasterEvent)]


def ok_puts(sim: Simulation, broker: str, since: int) -> int:
    return sum(1 for at, src, code in sim.put_results
               if at >= since and src == broker and code == PutCode.SUCCESS)


@pytest.mark.parametrize("seed", [3, 11, 29])
def test_controller_leader_killed_during_an_election_elects_once(seed: int) -> None:
    sim = settled(3, seed=seed)
    old = sim.master()
    epoch = sim.group_state.master_epoch
    before = len(elections(sim))
    sim.crash_broker(old.name, 60_000)

    def election_proposed() -> bool:
        leader = sim.leader()
        if leader is None or leader.raft is None:
            return False
        log = leader.raft.log
        pending = log.slice(leader.raft.commit_index + 1, log.last_index)
        return any(b'"ElectMaster"' in entry.data for entry in pending)

    sim.run_until(election_proposed, 5_000, "an election proposed")
    killed = sim.leader()
    sim.crash_controller(killed.id, 1_000)
    sim.run_until(lambda: sim.master() is not None, 10_000, "a new master")
    sim.run_for(3_000)
    new = sim.master()
    assert new is not None and new.name != old.name
    assert sim.group_state.master_epoch == epoch + 1
    assert [e.master_epoch for e in elections(sim)[before:]] == [epoch + 1]
    masters = [b for b in sim.brokers.values() if b.up and b.term.role == "master"]
    assert masters == [new]


@pytest.mark.parametrize("seed", [7, 13])
def test_two_replica_group_fails_over_without_losing_acked_messages(seed: int) -> None:
    sim = settled(2, seed=seed)
    old = sim.master()
    epoch = sim.group_state.master_epoch
    acked = len(sim.acked)
    sim.crash_broker(old.name, 60_000)
    crashed_at = sim.now
    sim.run_until(lambda: sim.master() is not None, 5_000, "a new master")
    new = sim.master()
    assert new.name != old.name
    assert sim.group_state.master_epoch == epoch + 1
    sim.run_until(lambda: ok_puts(sim, new.name, crashed_at) > 0, 5_000, "a put on the new master")
    for message in sim.acked[:acked]:
        assert new.log.read(message.offset, len(message.record)) == message.record


@pytest.mark.parametrize(("seed", "replicas"), [(7, 3), (13, 2)])
def test_master_cut_off_from_controllers_stops_acking_then_rejoins_as_slave(
        seed: int, replicas: int) -> None:
    sim = settled(replicas, seed=seed)
    old = sim.master()
    epoch = sim.group_state.master_epoch
    sim.producing = False
    sim.run_for(1_000)
    sim.network.partition({old.name}, CONTROLLERS)
    sim.run_until(lambda: sim.master() is not None and sim.master() is not old, 5_000,
                  "a new master")
    new = sim.master()
    assert sim.group_state.master_epoch == epoch + 1
    assert old.term.role == "master"  # it has not heard: still believes it is master
    switched = sim.now
    for _ in range(20):  # clients still reach the old master
        sim.put(old.name)
        sim.run_for(100)
    sim.run_for(2_000)
    assert ok_puts(sim, old.name, switched) == 0
    assert any(src == old.name and code != PutCode.SERVICE_NOT_AVAILABLE and at >= switched
               for at, src, code in sim.put_results)  # it answered as master, never SUCCESS
    written_alone = old.log.max_offset
    truncations: list[int] = []
    on_truncated = sim.on_truncated
    sim.on_truncated = lambda broker: (truncations.append(broker.log.max_offset)
                                       if broker is old else None, on_truncated(broker))[1]
    sim.heal()
    sim.run_until(lambda: old.term.role == "slave" and old.term.epoch == epoch + 1, 5_000,
                  "the old master following the new one")
    sim.run_for(2_000)
    assert truncations and truncations[0] < written_alone
    common = min(old.log.max_offset, new.log.max_offset)
    assert old.log.read(0, common) == new.log.read(0, common)


def alone_in_sync_state_set(replicas: int, unclean: bool) -> Simulation:
    """A group whose master holds acked messages its slaves lack (they never joined)."""
    sim = Simulation(5, replicas=replicas, unclean=unclean, chaos=False)
    sim.run_until(lambda: sim.master() is not None, 5_000, "a master")
    master = sim.master()
    sim.network.partition({master.name}, set(sim.brokers))
    sim.run_until(lambda: len(sim.acked) >= 5, 10_000, "puts acked by the master alone")
    assert sim.group_state.sync_state_set == {master.broker_id}
    return sim


def test_unclean_election_off_leaves_the_group_without_master_and_says_so() -> None:
    sim = alone_in_sync_state_set(2, unclean=False)
    dead = sim.master()
    epoch = sim.group_state.master_epoch
    sim.crash_broker(dead.name, 60_000)
    sim.run_for(5_000)
    assert sim.master() is None
    assert sim.group_state.master_broker_id is None
    assert sim.group_state.master_epoch == epoch + 1  # the dead master is fenced
    assert all(b.term.role != "master" for b in sim.brokers.values() if b.up)
    codes = {code for _, _, code, _ in sim.elections}
    assert ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE in codes
    survivor = next(b for b in sim.brokers.values() if b.up)
    assert "unclean election is disabled" in survivor.flow.no_master_reason
    assert sim.possibly_lost == 0


def test_unclean_election_on_elects_the_most_up_to_date_replica_and_reports_loss() -> None:
    sim = Simulation(5, replicas=3, unclean=True, chaos=False)
    sim.run_until(lambda: sim.master() is not None
                  and len(sim.group_state.sync_state_set) == 3
                  and len(sim.acked) >= 5, 10_000, "a settled group")
    master = sim.master()
    behind, ahead = sorted(b for b in sim.brokers if b != master.name)
    sim.network.partition({behind}, {master.name})
    sim.run_for(1_500)
    sim.network.partition({ahead}, {master.name})
    sim.run_until(lambda: sim.group_state.sync_state_set == {master.broker_id}
                  and len(sim.acked) >= 20, 10_000, "a SyncStateSet of the master alone")
    assert sim.brokers[ahead].log.max_offset > sim.brokers[behind].log.max_offset
    sim.crash_broker(master.name, 60_000)
    sim.run_until(lambda: sim.master() is not None, 5_000, "an unclean master")
    assert sim.master().name == ahead
    assert sim.unclean_elections == [sim.group_state.master_epoch]
    assert sim.elections[-1][3].possible_message_loss
    assert sim.possibly_lost > 0
    sim.run_for(3_000)  # the invariants hold again for what is acked from now on
    assert sim.acked[-1].epoch == sim.group_state.master_epoch
