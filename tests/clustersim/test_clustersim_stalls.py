"""Controllers that stall (a busy host, a GC pause) inside the deterministic simulation.

A stalled controller runs nothing while what it is sent waits in its buffers;
when it runs again its late timer fires before it reads that backlog, which
holds the brokers' heartbeats. It must count the stall as its own and
change no master for it, while a master that really went silent is still
replaced within its timeout. The simulation's invariants are checked all
along, as in every scenario.
"""

from __future__ import annotations

import pytest

from triomq.controller import ElectMasterEvent
from triomq.testing.clustersim import Simulation
from triomq.testing.clustersim_controller import ControllerSettings

SETTINGS = ControllerSettings()
STALL_MS = 3_000


def settled(seed: int) -> Simulation:
    sim = Simulation(seed, replicas=3, chaos=False)
    sim.run_until(lambda: sim.master() is not None
                  and len(sim.group_state.sync_state_set) == 3
                  and len(sim.acked) >= 5, 10_000, "a settled group")
    return sim


def elections(sim: Simulation) -> list[ElectMasterEvent]:
    return [e for e in sim.committed_events if isinstance(e, ElectMasterEvent)]


@pytest.mark.parametrize("seed", [5, 17, 41])
def test_every_controller_stalled_for_3_s_changes_no_master(seed: int) -> None:
    sim = settled(seed)
    master, epoch, before = sim.master(), sim.group_state.master_epoch, len(elections(sim))
    acked = len(sim.acked)
    sim.stall_controllers([1, 2, 3], STALL_MS)
    sim.run_for(STALL_MS + 5_000)
    assert len(elections(sim)) == before
    assert sim.master() is master and sim.group_state.master_epoch == epoch
    assert len(sim.group_state.sync_state_set) == 3
    assert len(sim.acked) > acked


@pytest.mark.parametrize("seed", [5, 17, 41])
def test_the_leader_stalled_for_3_s_hands_over_without_changing_the_master(seed: int) -> None:
    sim = settled(seed)
    master, epoch, before = sim.master(), sim.group_state.master_epoch, len(elections(sim))
    stalled = sim.leader()
    sim.stall_controllers([stalled.id], STALL_MS)
    sim.run_for(STALL_MS + 5_000)
    assert len(elections(sim)) == before
    assert sim.master() is master and sim.group_state.master_epoch == epoch


@pytest.mark.parametrize("seed", [5, 17, 41])
def test_a_master_that_died_during_the_stall_is_replaced_within_its_timeout_after(
        seed: int) -> None:
    sim = settled(seed)
    old, epoch = sim.master(), sim.group_state.master_epoch
    sim.stall_controllers([1, 2, 3], STALL_MS)
    sim.crash_broker(old.name, 60_000)
    sim.run_for(STALL_MS)
    # Once running again a controller gives each broker one whole timeout, then scans.
    took = sim.run_until(lambda: sim.master() is not None, 5_000, "a new master")
    assert took <= (SETTINGS.broker_not_active_timeout + SETTINGS.scan_not_active_broker_interval
                    + 1_500)
    assert sim.master().name != old.name
    assert sim.group_state.master_epoch == epoch + 1
