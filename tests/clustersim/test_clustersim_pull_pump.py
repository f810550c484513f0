"""The simulation's brokers serve pulls through the broker's own pull flow: their pump
imports ``triomq.broker.consume.core.pull_flow`` and none of the steps it sequences, nor the trio
driver, so a change to the broker's pull sequence is the simulation's too."""

from __future__ import annotations

import ast
from pathlib import Path

from triomq.broker.consume import pull_service
from triomq.testing import clustersim_pulls

#: The steps of a pull the flow sequences: a pump that imports one sequences its own.
STEPS = {"parse_pull_header", "admit", "answer", "get_messages", "look_up", "reset_answer",
         "slave_refusal", "confirmed_queue_max", "HoldTable"}
STEP_MODULES = {"triomq.broker.consume.core.pull_hold", "triomq.broker.consume.core.pull_lookup"}


def imports(module: object) -> dict[str, set[str]]:
    """What a module imports: module -> the names taken from it (empty: the module)."""
    tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[attr-defined]
    found: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.setdefault(node.module, set()).update(alias.name for alias in node.names)
            for alias in node.names:  # ``from triomq.broker import pull_hold``
                found.setdefault(f"{node.module}.{alias.name}", set())
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found.setdefault(alias.name, set())
    return found


def sequence_steps(found: dict[str, set[str]]) -> set[str]:
    steps = {module for module in found if module in STEP_MODULES}
    for module, names in found.items():
        if module.startswith("triomq.broker.consume.core.pull"):
            steps |= names & STEPS
    return steps


def test_the_simulations_pull_pump_runs_the_brokers_flow_and_no_sequence_of_its_own() -> None:
    found = imports(clustersim_pulls)
    assert "BrokerPullFlow" in found.get("triomq.broker.consume.core.pull_flow", set())
    assert not any(module.startswith("triomq.broker.consume.pull_service") for module in found)
    assert sequence_steps(found) == set()


def test_the_trio_driver_runs_the_same_flow() -> None:
    found = imports(pull_service)
    assert "BrokerPullFlow" in found.get("triomq.broker.consume.core.pull_flow", set())
    # confirmed_queue_max is re-exported for the put's processor, not a step it runs.
    assert found.get("triomq.broker.consume.core.pull_lookup", set()) <= {"confirmed_queue_max"}
    assert sequence_steps(found) <= {
        "confirmed_queue_max", "triomq.broker.consume.core.pull_lookup"}


def test_the_check_sees_a_step_imported() -> None:
    assert sequence_steps({"triomq.broker.consume.core.pull": {"admit", "PullLimits"}}) == {"admit"}
    hold = "triomq.broker.consume.core.pull_hold"
    assert sequence_steps({hold: set()}) == {hold}
