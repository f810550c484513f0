"""Running a deterministic simulation over many seeds: the tally and its command line.

Shared by ``raftsim`` and ``clustersim``. A simulation provides
``run_seed(seed)`` returning a result with ``seed``, ``ok``, ``violation``
and ``replay`` (the command that replays that seed).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import attrs


@attrs.frozen
class SimSummary:
    """The outcome of a run of seeds."""

    passed: int
    failed: int
    failures: tuple[Any, ...] = ()


def run_seeds(run_seed: Callable[[int], Any], count: int, start: int = 0) -> SimSummary:
    """Simulate seeds ``start .. start + count - 1``."""
    results = [run_seed(seed) for seed in range(start, start + count)]
    failures = tuple(r for r in results if not r.ok)
    return SimSummary(passed=len(results) - len(failures), failed=len(failures), failures=failures)


def main(prog: str, description: str, run_seed: Callable[[int], Any],
         where: Callable[[Any], str], argv: Sequence[str] | None = None) -> int:
    """``--seeds N [--start K]``: print failures with replay commands, then the tally.

    ``where(result)`` says when a failing seed broke (a tick, a time). Exits
    1 on any failure; the last line is always ``N passed, M failed``.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--start", type=int, default=0)
    args = parser.parse_args(argv)
    summary = run_seeds(run_seed, args.seeds, args.start)
    for failure in summary.failures:
        print(f"seed {failure.seed} FAILED at {where(failure)}: {failure.violation}")
        print(f"  replay: {failure.replay}")
    print(f"{summary.passed} passed, {summary.failed} failed")
    return 1 if summary.failed else 0
