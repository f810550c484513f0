"""Seeds no fixed range covers: a window of the simulations that moves with the commit.

The fixed sweeps (the suite's and ``make soak``) run the same seeds every
time, so they only find what those seeds reach. Here each commit gets its
own window of seeds, derived from ``git rev-parse HEAD`` (as TigerBeetle's
VOPR runs fresh seeds), so every commit tested explores new ones; the same
commit always runs the same window, and a failure names the seed's replay
command. Without git, the window is random and printed.

Replay a whole window with ``TRIOMQ_SIM_WINDOW=START pytest
tests/test_sim_window.py`` (or ``triomq sim [--cluster | --acting] --seeds N --start
START``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from triomq.testing import clustersim, clustersim_acting, raftsim
from triomq.testing.seeds import SimSummary

RAFT_SEEDS = 100
CLUSTER_SEEDS = 30
ACTING_SEEDS = 10
#: Pins the window's first seed, to replay a window.
PIN = "TRIOMQ_SIM_WINDOW"
#: Windows start at or past this, beyond every fixed range (suite and soak).
FIRST = 100_000
SPAN = 10**9


def window_for(revision: str) -> int:
    """The first seed of the window of commit ``revision``."""
    digest = hashlib.sha256(f"triomq-sim-window:{revision}".encode()).digest()
    return FIRST + int.from_bytes(digest[:8], "big") % SPAN


def _head() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def window_start() -> tuple[int, str]:
    """This run's first seed, and where it comes from."""
    pinned = os.environ.get(PIN, "").strip()
    if pinned:
        return int(pinned), f"{PIN}={pinned}"
    head = _head()
    if head:
        return window_for(head), f"commit {head[:12]}"
    start = window_for(os.urandom(16).hex())
    return start, "no git commit: a random window"


@pytest.fixture(scope="module")
def start() -> int:
    first, source = window_start()
    print(f"simulation window from seed {first} ({source}); "
          f"replay it with {PIN}={first} pytest tests/{Path(__file__).name}")
    return first


def _failure_report(summary: SimSummary, sweep: str, first: int, count: int) -> str:
    lines = [f"{summary.failed} of {count} seeds failed in the window {first}..{first + count - 1}"
             f" (replay the window: {sweep} --seeds {count} --start {first}, or {PIN}={first})"]
    lines += [f"seed {f.seed}: {f.violation}\n  replay: {f.replay}" for f in summary.failures]
    return "\n".join(lines)


def test_raft_seeds_of_this_commits_window_pass(start: int) -> None:
    summary = raftsim.run_seeds(RAFT_SEEDS, start)
    assert not summary.failures, _failure_report(summary, "triomq sim", start, RAFT_SEEDS)
    assert summary.passed == RAFT_SEEDS


def test_cluster_seeds_of_this_commits_window_pass(start: int) -> None:
    summary = clustersim.run_seeds(CLUSTER_SEEDS, start)
    assert not summary.failures, _failure_report(
        summary, "triomq sim --cluster", start, CLUSTER_SEEDS
    )
    assert summary.passed == CLUSTER_SEEDS


def test_acting_master_seeds_of_this_commits_window_pass(start: int) -> None:
    summary = clustersim_acting.run_seeds(ACTING_SEEDS, start)
    assert not summary.failures, _failure_report(
        summary, "triomq sim --acting", start, ACTING_SEEDS
    )
    assert summary.passed == ACTING_SEEDS


def test_the_window_moves_with_the_commit_and_stays_put_for_one() -> None:
    a, b = "0" * 40, "f" * 40
    assert window_for(a) == window_for(a)
    assert window_for(a) != window_for(b)
    assert all(window_for(str(i)) >= FIRST for i in range(100))


def test_a_pinned_window_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PIN, "123456")
    assert window_start() == (123456, f"{PIN}=123456")


def test_a_failure_names_the_window_and_each_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Votes no longer check that the candidate's log is up to date.
    monkeypatch.setattr(
        "triomq.consensus.core.log.RaftLog.is_up_to_date", lambda self, index, term: True
    )
    summary = raftsim.run_seeds(40, 0)
    report = _failure_report(summary, "triomq sim", 0, 40)
    assert summary.failed
    assert f"(replay the window: triomq sim --seeds 40 --start 0, or {PIN}=0)" in report
    assert f"replay: triomq sim --seeds 1 --start {summary.failures[0].seed}" in report
