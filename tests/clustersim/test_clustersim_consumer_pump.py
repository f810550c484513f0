"""The simulation's consumers run the client's own cores: their rebalance, a released
queue's steps and each queue's pulls come from ``triomq.client.core``, and nothing of the
trio driver (``consumer_base``), so a change to the client's sequence is the
simulation's too."""

from __future__ import annotations

import ast
from pathlib import Path

from triomq.testing import clustersim_consumer


def imported() -> dict[str, set[str]]:
    tree = ast.parse(Path(clustersim_consumer.__file__).read_text())
    found: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.setdefault(node.module, set()).update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found.setdefault(alias.name, set())
    return found


def test_the_simulations_consumer_runs_the_clients_cores() -> None:
    found = imported()
    assert {"rebalance", "release_steps"} <= found["triomq.client.core.allocate"]
    assert "PullFlow" in found["triomq.client.core.pull_flow"]


def test_it_imports_nothing_of_the_clients_trio_drivers() -> None:
    drivers = {"triomq.client.consumer_base", "triomq.client.push_consumer",
               "triomq.client.lite_pull_consumer", "triomq.client.offset_store",
               "triomq.client.instance"}
    assert not drivers & set(imported())
