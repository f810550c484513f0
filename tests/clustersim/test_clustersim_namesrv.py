"""Name servers in the deterministic cluster simulation, driven by hand.

The simulation checks route safety after every change of a name server's
table (id 0 only for the master of the epoch it registered with, never an
older epoch than before), so each scenario also fails if that breaks.
"""

from __future__ import annotations

import pytest

from triomq.namesrv.core.route_info import RouteInfo
from triomq.testing.clustersim import Simulation, Violation
from triomq.testing.clustersim_controller import controller_name
from triomq.testing.clustersim_namesrv import route_address

CONTROLLERS = {controller_name(i) for i in (1, 2, 3)}


def routed(sim: Simulation) -> dict[str, str | None]:
    return {name: namesrv.routed_master() for name, namesrv in sim.namesrvs.items()}


def settled(replicas: int, *, seed: int = 7) -> Simulation:
    """A group with a master, a full SyncStateSet, every replica routed by both name servers."""
    sim = Simulation(seed, replicas=replicas, chaos=False, namesrvs=2)
    sim.run_until(lambda: sim.master() is not None and sim.namesrvs_route_master()
                  and len(sim.group_state.sync_state_set) == replicas
                  and all(len(n.routed()) == replicas for n in sim.namesrvs.values()),
                  10_000, "a group routed by both name servers")
    return sim


@pytest.mark.parametrize(("seed", "replicas"), [(7, 3), (13, 2)])
def test_the_route_follows_a_failover(seed: int, replicas: int) -> None:
    sim = settled(replicas, seed=seed)
    old = sim.master()
    epoch = sim.group_state.master_epoch
    assert set(routed(sim).values()) == {old.name}
    sim.crash_broker(old.name, 60_000)
    sim.run_until(lambda: sim.master() is not None, 5_000, "a new master")
    new = sim.master()
    assert new.name != old.name
    took = sim.run_until(sim.namesrvs_route_master, 2_000, "the new master routed")
    assert took <= new.settings.register_name_server_period
    # Each name server asks the new master to vouch for its epoch, and it does.
    sim.run_until(lambda: all(n.top_vouched_version == sim.group_state.master_epoch
                              for n in sim.namesrvs.values()), 1_000, "the epoch vouched for")
    assert sim.group_state.master_epoch > epoch
    for namesrv in sim.namesrvs.values():
        # The crashed master's connection closed: it is not routed under any id.
        assert route_address(old.name) not in namesrv.routed().values()


def test_a_restarted_name_server_learns_every_route_again() -> None:
    sim = settled(3)
    restarted = sim.namesrvs["n1"]
    before = restarted.routed()
    sim.crash_namesrv("n1", 500)
    sim.run_until(lambda: restarted.up, 1_000, "the name server back")
    assert restarted.routed() == {} and restarted.lives == 2
    # Every broker's connection broke with the crash: it registers again at once.
    took = sim.run_until(lambda: restarted.routed() == before, 2_000, "every route relearnt")
    assert took < sim.master().settings.register_name_server_period
    assert sim.namesrvs["n2"].routed() == before


def test_a_partitioned_name_server_drops_a_silent_broker_after_its_timeout() -> None:
    sim = settled(3)
    master = sim.master()
    slave = next(b for b in sim.brokers.values() if b is not master)
    cut, other = sim.namesrvs["n1"], sim.namesrvs["n2"]
    sim.network.partition({slave.name}, {cut.name})
    # The connection broke, but its close cannot reach the name server.
    sim.run_for(500)
    assert route_address(slave.name) in cut.routed().values()
    took = 500 + sim.run_until(
        lambda: route_address(slave.name) not in cut.routed().values(), 2_000,
        "the silent broker dropped")
    timeout = slave.settings.broker_not_active_timeout
    assert timeout - 2 * slave.settings.broker_heartbeat_interval <= took <= 1.3 * timeout
    assert cut.routed_master() == master.name  # the others stay
    assert route_address(slave.name) in other.routed().values()
    sim.network.heal()
    sim.run_until(lambda: route_address(slave.name) in cut.routed().values(),
                  2_000, "the broker routed again once the link heals")


def test_a_deposed_master_is_not_routed_when_the_new_one_goes() -> None:
    sim = settled(2, seed=13)
    old = sim.master()
    sim.producing = False
    sim.network.partition({old.name}, CONTROLLERS)
    sim.run_until(lambda: sim.master() not in (None, old), 5_000, "a new master")
    new = sim.master()
    sim.run_until(sim.namesrvs_route_master, 2_000, "the new master routed")
    sim.run_until(lambda: all(n.top_vouched_version == new.term.epoch
                              for n in sim.namesrvs.values()), 1_000, "its epoch vouched for")
    sim.crash_broker(new.name, 60_000)
    for _ in range(30):  # it still believes it is master and registers as id 0
        sim.run_for(100)
        assert old.term.role == "master"
        assert set(routed(sim).values()) == {None}
    assert all(not n.routed() for n in sim.namesrvs.values())


def test_seeds_exercise_name_server_crashes_and_failovers() -> None:
    sims = [Simulation(seed) for seed in range(12)]
    assert all(sim.run().ok for sim in sims)
    assert {len(sim.namesrvs) for sim in sims} == {1, 2}
    namesrvs = [n for sim in sims for n in sim.namesrvs.values()]
    assert any(n.lives > 1 for n in namesrvs)
    assert any(n.top_vouched_version > 1 for n in namesrvs)


class _Forgetful(dict):
    """A route table's master epochs, forgotten at once."""

    def get(self, key: object, default: object = None) -> object:
        return default


def test_routing_by_a_live_holder_alone_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # RocketMQ's rule (the id-0 holder's epoch counts only while it is live)
    # lets a deposed master back in: the route-safety check must say so.
    init = RouteInfo.__init__

    def forgetful(self: RouteInfo, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        self._master_versions = _Forgetful()  # type: ignore[assignment]

    monkeypatch.setattr(RouteInfo, "__init__", forgetful)
    with pytest.raises(Violation, match=r"as id 0 with master epoch 1, older than epoch 2"):
        test_a_deposed_master_is_not_routed_when_the_new_one_goes()
