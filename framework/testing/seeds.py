"""Running a deterministic simulation over many seeds: the tally and its command line.

Shared by ``raftsim`` and ``clustersim``. A simulation provides
``run_seed(seed)`` returning a result with ``seed``, ``ok``, ``violation``
and ``replay`` (the command that replays that seed).

Long sweeps report progress on stderr: a progress bar when stderr is a
terminal, otherwise a plain line after each tenth of the seeds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import attrs

#: Sweeps shorter than this finish too soon to need progress.
PROGRESS_MIN_SEEDS = 10

#: Told ``(done, failed)`` after each seed.
ProgressCallback = Callable[[int, int], None]


class Violation(AssertionError):
    """An invariant of a simulation broke; the message says which and where (the
    seed's result adds how to replay it)."""


@attrs.frozen
class SimSummary:
    """The outcome of a run of seeds."""

    passed: int
    failed: int
    failures: tuple[Any, ...] = ()


def run_seeds(
    run_seed: Callable[[int], Any],
    count: int,
    start: int = 0,
    progress: ProgressCallback | None = None,
) -> SimSummary:
    """Simulate seeds ``start .. start + count - 1``."""
    failures = []
    for done, seed in enumerate(range(start, start + count), 1):
        result = run_seed(seed)
        if not result.ok:
            failures.append(result)
        if progress is not None:
            progress(done, len(failures))
    return SimSummary(passed=count - len(failures), failed=len(failures),
                      failures=tuple(failures))


def progress_lines(prog: str, count: int, start: int, out: TextIO) -> ProgressCallback:
    """A plain line on ``out`` after each tenth of the seeds (for logs and pipes)."""
    step = max(1, count // 10)

    def report(done: int, failed: int) -> None:
        if done % step == 0 and done < count:
            print(f"{prog}: {done}/{count} seeds run (up to seed {start + done - 1}), "
                  f"{failed} failed", file=out, flush=True)

    return report


def _sweep(prog: str, run_seed: Callable[[int], Any], count: int, start: int) -> SimSummary:
    """``run_seeds`` with the progress display that suits stderr."""
    if count < PROGRESS_MIN_SEEDS:
        return run_seeds(run_seed, count, start)
    if not sys.stderr.isatty():
        return run_seeds(run_seed, count, start, progress_lines(prog, count, start, sys.stderr))
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=Console(file=sys.stderr)) as bar:
        task = bar.add_task(f"{prog} {start}..{start + count - 1}", total=count, failed=0)

        def report(done: int, failed: int) -> None:
            bar.update(task, completed=done, failed=failed)

        return run_seeds(run_seed, count, start, report)


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
    summary = _sweep(prog, run_seed, args.seeds, args.start)
    for failure in summary.failures:
        print(f"seed {failure.seed} FAILED at {where(failure)}: {failure.violation}")
        print(f"  replay: {failure.replay}")
    print(f"{summary.passed} passed, {summary.failed} failed")
    return 1 if summary.failed else 0
