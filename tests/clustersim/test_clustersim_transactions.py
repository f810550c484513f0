"""Transactions in the controller-mode simulation: seeds keep "resolved exactly once", and
the check fails when the broker's rules are broken.

A longer run: ``python -m triomq.testing.clustersim_transactions --seeds 500``.
"""

from __future__ import annotations

import pytest

from triomq.broker.secondary.core import transaction
from triomq.testing import clustersim_transactions
from triomq.testing.clustersim_transactions import run_seed, run_seeds


@pytest.mark.parametrize("start", range(0, 60, 30))
def test_seed_sweep_resolves_every_transaction_once(start: int) -> None:
    summary = run_seeds(30, start=start)
    assert not summary.failures, "\n".join(f.violation for f in summary.failures)


def test_the_sweep_exercises_checks_and_one_seed_is_one_run() -> None:
    results = [run_seed(seed) for seed in range(10)]
    assert sum(r.transactions for r in results) >= 100
    assert sum(r.checked for r in results) >= 20  # unknown states and lost ends
    assert sum(1 for r in results if r.elections > 1) >= 2
    assert run_seed(3) == results[3]
    assert "clustersim_transactions --seeds 1 --start 3" in results[3].replay


def _failures(seeds: range) -> list[str]:
    return [r.violation for r in map(run_seed, seeds) if not r.ok]


def test_ending_a_transaction_twice_is_caught(monkeypatch) -> None:
    real = clustersim_transactions.end_transaction

    def forgetful(header, half, *, ended, now_ms, transaction_time_out):
        return real(header, half, ended={}, now_ms=now_ms,
                    transaction_time_out=transaction_time_out)

    monkeypatch.setattr(clustersim_transactions, "end_transaction", forgetful)
    failures = _failures(range(10))
    assert failures and all("committed 2 times" in f or "rolled back" in f for f in failures)


def test_a_new_master_that_reads_only_the_op_records_commits_twice(monkeypatch) -> None:
    # A commit stored without its op record before a failover: the new master must
    # find the committed message, or a check commits it again.
    real = transaction.TransactionLedger.__init__

    def op_records_only(self) -> None:
        real(self)
        self.commits_read = True

    monkeypatch.setattr(transaction.TransactionLedger, "__init__", op_records_only)
    failures = _failures(range(40))
    assert any("committed 2 times" in f for f in failures)
