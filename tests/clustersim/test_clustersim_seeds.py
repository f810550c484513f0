"""The controller-mode simulation over many seeds, and checks that it can fail.

A longer run (minutes): ``python -m triomq.testing.clustersim --seeds 2000 --start 1000``.
"""

from __future__ import annotations

import attrs
import pytest

from triomq.testing import clustersim
from triomq.testing.clustersim import Simulation, Violation, run_seed, run_seeds
from triomq.testing.clustersim_parts import SIM_MASTER, BrokerSettings


# 120 seeds in chunks: each test stays far inside the suite's per-test timeout on a
# machine busy enough to make the whole sweep take minutes.
@pytest.mark.parametrize("start", range(0, 120, 30))
def test_seed_sweep_keeps_every_invariant(start: int) -> None:
    summary = run_seeds(30, start=start)
    assert not summary.failures, "\n".join(f.violation for f in summary.failures)
    assert summary.passed == 30


def test_the_sweep_exercises_failovers_acked_puts_and_consumption() -> None:
    results = [run_seed(seed) for seed in range(20)]
    assert sum(r.acked for r in results) > 200
    assert sum(1 for r in results if r.elections > 1) >= 3
    # A delayed message is acked when stored to wait and when delivered (again by a new
    # master, at least once), and consumed as one message.
    assert sum(r.consumed for r in results) >= sum(r.topic_messages for r in results) - sum(
        r.possibly_lost for r in results)
    assert sum(r.delayed for r in results) > 20
    assert sum(1 for r in results if r.duplicates) >= 3  # crashes redeliver


def test_one_seed_is_one_run() -> None:
    assert run_seed(21) == run_seed(21)


def test_acking_on_the_master_alone_is_caught() -> None:
    # RocketMQ's default rule (min_in_sync_replicas 1, not all-ack) loses
    # acknowledged messages on failover: the invariants must say so.
    caught = []
    for seed in range(6):
        master = attrs.evolve(SIM_MASTER, all_ack_in_sync_state_set=False)
        sim = Simulation(seed, broker_settings=BrokerSettings(master=master))
        result = sim.run()
        if not result.ok:
            caught.append(result.violation)
    assert caught
    assert all("acked" in v and "replay: python -m triomq.testing.clustersim" in v
               for v in caught)


def test_a_violation_names_the_replay_command() -> None:
    sim = Simulation(3, chaos=False)
    with pytest.raises(Violation, match=r"--seeds 1 --start 3"):
        sim.run_until(lambda: False, 100, "nothing")


def test_main_prints_the_tally_last(capsys: pytest.CaptureFixture[str]) -> None:
    assert clustersim.main(["--seeds", "2", "--start", "5"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "2 passed, 0 failed"
