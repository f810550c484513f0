"""The check round's and END_TRANSACTION's puts, one at a time (``transaction_run``)."""

from __future__ import annotations

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult
from triomq.broker.secondary.core.acting_transaction import ActingRound, Escape
from triomq.broker.secondary.core.transaction import (
    ESCAPED,
    Commit,
    Rollback,
    TransactionLedger,
)
from triomq.broker.secondary.core.transaction_check import CheckRound, Discard, Renew, Skip
from triomq.broker.secondary.core.transaction_run import (
    Answered,
    AskProducer,
    EndRun,
    Put,
    RoundDone,
    RoundRun,
)

STORED = EscapeResult(ResponseCode.SUCCESS, msg_id="M1")
TIMED_OUT = EscapeResult(ResponseCode.FLUSH_SLAVE_TIMEOUT, "slow slave", msg_id="M2")
REFUSED = EscapeResult(ResponseCode.SERVICE_NOT_AVAILABLE, "no master")


def message(name: str) -> EscapedMessage:
    return EscapedMessage(topic=name, queue_id=0, body=name.encode())


def test_a_round_puts_in_queue_order_and_asks_the_producer_after_each_checked_copy() -> None:
    plan = CheckRound((Skip(3), Renew(4, message("young"), check=False, group="pg"),
                       Renew(5, message("due"), check=True, group="pg"),
                       Discard(6, message("given-up"))), stop=7)
    run = RoundRun(plan, TransactionLedger(), start=3)
    assert run.begin() == [Put(message("young"))]
    assert run.stored(STORED) == [Put(message("due"))]
    # A copy stored though its replication timed out is checked: it is in the log.
    assert run.stored(TIMED_OUT) == [AskProducer("pg", TIMED_OUT), Put(message("given-up"))]
    assert run.stored(STORED) == [RoundDone(3, 7, None, discarded=(6,))]


def test_a_put_not_stored_stops_the_round_at_its_half_message() -> None:
    plan = CheckRound((Renew(4, message("a"), check=True, group="pg"),
                       Renew(5, message("b"), check=True, group="pg")), stop=6)
    run = RoundRun(plan, TransactionLedger(), start=4)
    run.begin()
    assert run.stored(STORED) == [AskProducer("pg", STORED), Put(message("b"))]
    assert run.stored(REFUSED) == [RoundDone(4, 5, REFUSED)]


def test_an_empty_round_moves_the_progress_past_what_it_skipped() -> None:
    run = RoundRun(CheckRound((Skip(0), Skip(1)), stop=2), TransactionLedger(), start=0)
    assert run.begin() == [RoundDone(0, 2)]


def test_an_acting_escape_holds_its_transaction_while_it_runs_and_gives_it_back_if_refused(
        ) -> None:
    ledger = TransactionLedger()
    plan = ActingRound((Escape(0, 100, message("a")), Escape(1, 101, message("b")),
                        Escape(2, 102, message("c"))), stop=3)
    run = RoundRun(plan, ledger, start=0)
    assert run.begin() == [Put(message("a"))]
    assert ledger.ended == {100: ESCAPED}
    ledger.begin(101, "commit")  # ended here while the escape of ``a`` ran
    assert run.stored(STORED) == [Put(message("c"))]
    assert run.stored(REFUSED) == [RoundDone(0, 2, REFUSED)]
    assert ledger.ended == {100: ESCAPED, 101: "commit"}


def _commit(key: int = 7) -> Commit:
    return Commit(key, message("real"), message("op"))


def test_a_commit_puts_its_message_then_its_op_record() -> None:
    ledger = TransactionLedger()
    run = EndRun(_commit(), ledger)
    assert run.begin() == Put(message("real"))
    assert ledger.ended == {7: "commit"}
    assert run.stored(STORED) == Put(message("op"))
    assert run.stored(STORED) == Answered()


def test_a_commit_whose_message_is_refused_is_open_again() -> None:
    ledger = TransactionLedger()
    run = EndRun(_commit(), ledger)
    run.begin()
    assert run.stored(REFUSED) == Answered(REFUSED.code, REFUSED.remark)
    assert ledger.ended == {}


def test_a_commit_whose_op_record_is_lost_stays_committed() -> None:
    ledger = TransactionLedger()
    run = EndRun(_commit(), ledger)
    run.begin()
    run.stored(STORED)
    assert run.stored(REFUSED) == Answered(op_lost=REFUSED)
    assert ledger.ended == {7: "commit"}


def test_a_rollback_puts_its_op_record_and_is_open_again_if_refused() -> None:
    ledger = TransactionLedger()
    run = EndRun(Rollback(8, message("op")), ledger)
    assert run.begin() == Put(message("op"))
    assert run.stored(REFUSED) == Answered(REFUSED.code, REFUSED.remark)
    assert ledger.ended == {}
    run = EndRun(Rollback(8, message("op")), ledger)
    run.begin()
    assert run.stored(TIMED_OUT) == Answered()
    assert ledger.ended == {8: "rollback"}


def test_an_acting_slave_puts_a_commits_message_only_and_nothing_for_a_rollback() -> None:
    ledger = TransactionLedger()
    committed = EndRun(Commit(7, EscapedMessage("real", 0, b"x", prepared_transaction_offset=42),
                              message("op")), ledger, acting=True)
    put = committed.begin()
    # Its half message is in no log of the master it goes to.
    assert isinstance(put, Put) and put.message.prepared_transaction_offset == 0
    assert committed.stored(STORED) == Answered()
    assert EndRun(Rollback(8, message("op")), ledger, acting=True).begin() == Answered()
    assert ledger.ended == {7: "commit", 8: "rollback"}
