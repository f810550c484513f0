"""Every failover scenario of ``triomq.testing.scenarios``, run by both pumps.

The simulation (virtual time) and a real cluster (trio, in-process
transport) run the same script and must report the outcomes it expects:
who becomes master and from where, master epochs, put results, SyncStateSet
membership after shrinks and expansions, acknowledged messages kept (or
reported as possibly lost after an unclean election).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scenario_on_cluster import run_on_cluster
from scenario_on_sim import run_on_simulation

from triomq.testing.scenarios import SCENARIOS, Scenario

BY_NAME = pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])


def observed(scenario: Scenario, outcomes: list[tuple[int, str]]) -> list[tuple[str, str]]:
    """(step, outcome) pairs, readable in a failure's diff."""
    return [(f"{i}: {type(scenario.steps[i]).__name__}", o) for i, o in outcomes]


@BY_NAME
@pytest.mark.parametrize("seed", [7, 11, 29])
def test_on_the_simulation(scenario: Scenario, seed: int) -> None:
    run = run_on_simulation(scenario, seed)
    assert observed(scenario, run.outcomes) == observed(scenario, scenario.expected())


@BY_NAME
async def test_on_a_cluster(scenario: Scenario, tmp_path: Path) -> None:
    run = await run_on_cluster(scenario, tmp_path)
    assert observed(scenario, run.outcomes) == observed(scenario, scenario.expected())
