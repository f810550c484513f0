"""Pop consumption in the controller-mode simulation: seeds keep "a message is not revived
after its ack" and "an un-acked one is", and the checks fail when the revive's rules are
broken."""

from __future__ import annotations

from triomq.broker.pop.core import revive
from triomq.testing.clustersim import SeedResult, Simulation
from triomq.testing.clustersim_pop import SimPops


def run(seeds: range) -> list[tuple[SeedResult, SimPops]]:
    runs = []
    for seed in seeds:
        sim = Simulation(seed, pops=True)
        assert sim.pops is not None
        runs.append((sim.run(), sim.pops))
    return runs


def test_seeds_revive_what_was_not_acked_and_nothing_acked() -> None:
    runs = run(range(30))
    failures = [result.violation for result, _ in runs if not result.ok]
    assert not failures, "\n".join(failures)
    assert sum(pops.pops for _, pops in runs) >= 100
    assert sum(pops.revivals for _, pops in runs) >= 100
    assert sum(len(pops.acked) for _, pops in runs) >= 100
    assert sum(1 for result, _ in runs if result.elections > 1) >= 3


def test_a_revive_that_ignores_acks_is_caught(monkeypatch) -> None:
    monkeypatch.setattr(revive.ReviveQueue, "_ack", lambda self, ack: None)
    failures = [result.violation for result, _ in run(range(5)) if not result.ok]
    assert failures and all("acked at" in f for f in failures)


def test_a_revive_that_never_comes_is_caught(monkeypatch) -> None:
    monkeypatch.setattr(revive.ReviveQueue, "_revive_due", lambda self, now: self._next(now))
    failures = [result.violation for result, _ in run(range(4)) if not result.ok]
    assert len(failures) >= 2 and all("acked or revived" in f for f in failures)
