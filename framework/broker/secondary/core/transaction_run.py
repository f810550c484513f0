"""Carrying out the transaction check's rounds and END_TRANSACTION's decisions (sans-I/O).

``transaction_check`` plans a round and ``transaction`` decides an
END_TRANSACTION; what is put then, in which order, and what a put that
fails changes, is the same for a master, for a slave acting for its absent
master (``acting_transaction``) and for the simulation, so it is here, one
put at a time: each flow says ``Put`` (through the escape bridge) and is
told the put's result.

- ``RoundRun``: the round's puts in queue order. A ``Renew`` with ``check``
  stored is followed by ``AskProducer`` (CHECK_TRANSACTION_STATE for the
  copy). An acting ``Escape`` marks its transaction ``ESCAPED`` in the
  term's ledger while its put runs (so an END_TRANSACTION here is refused),
  skipped when it ended meanwhile, and is taken back if not stored. The
  first put that is not stored ends the round there: its progress stops at
  that half message, which the next round tries again (``RoundDone``).
- ``EndRun``: a master's commit puts the real message, then the op record;
  a rollback the op record; an acting slave's commit puts the real message
  only (``acting_commit``: no op record, its offsets would name another
  master's half queue), its rollback nothing. The ledger says the
  transaction ended from the first put on, and forgets it if what ends it
  was not stored; a committed message whose op record failed stays ended
  (a later term finds the committed message). ``Answered`` carries the
  END_TRANSACTION answer's result.
"""

from __future__ import annotations

import attrs

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult
from triomq.broker.secondary.core.acting_transaction import (
    ActingRound,
    Escape,
    acting_commit,
    plan_acting_round,
)
from triomq.broker.secondary.core.transaction import (
    ESCAPED,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    Commit,
    Rollback,
    TransactionLedger,
)
from triomq.broker.secondary.core.transaction_check import (
    MAX_SCAN,
    CheckRound,
    CheckSettings,
    Discard,
    Renew,
    plan_round,
)
from triomq.broker.secondary.core.transaction_reads import TransactionReads

__all__ = ["Answered", "AskProducer", "EndRun", "Put", "RoundDone", "RoundRun",
           "progress_moves", "start_round"]


@attrs.frozen
class Put:
    """Put ``message`` through the escape bridge, then tell the flow the result."""

    message: EscapedMessage


@attrs.frozen
class AskProducer:
    """Send CHECK_TRANSACTION_STATE to producer ``group`` for the copy the ``renewed``
    put stored (oneway: the round goes on at once)."""

    group: str
    renewed: EscapeResult


@attrs.frozen
class RoundDone:
    """The round is over: store the half queue's progress from ``start`` to ``progress``.
    ``stopped`` is the refusal of the put the round stopped at (None: it ran to its end)."""

    start: int
    progress: int
    stopped: EscapeResult | None = None
    #: Half messages given up (put into TRANS_CHECK_MAX_TIME_TOPIC) in this round.
    discarded: tuple[int, ...] = ()


RoundStep = Put | AskProducer | RoundDone


class RoundRun:
    """One check round's puts (``plan_round``'s or ``plan_acting_round``'s)."""

    def __init__(self, plan: CheckRound | ActingRound, ledger: TransactionLedger, *,
                 start: int) -> None:
        self.ledger = ledger
        self.start = start
        self._pending = [action for action in plan.actions
                         if isinstance(action, (Renew, Discard, Escape))]
        self._stop = plan.stop
        self._putting: Renew | Discard | Escape | None = None
        self._discarded: list[int] = []

    def begin(self) -> list[RoundStep]:
        return self._next()

    def stored(self, result: EscapeResult) -> list[RoundStep]:
        """The last ``Put``'s result."""
        action = self._putting
        assert action is not None, "no put is under way"
        self._putting = None
        if not result.stored:
            if isinstance(action, Escape):
                self.ledger.abandon(action.key)
            return [RoundDone(self.start, action.queue_offset, result,
                              tuple(self._discarded))]
        if isinstance(action, Discard):
            self._discarded.append(action.queue_offset)
        steps: list[RoundStep] = []
        if isinstance(action, Renew) and action.check:
            steps.append(AskProducer(action.group, result))
        return steps + self._next()

    def _next(self) -> list[RoundStep]:
        while self._pending:
            action = self._pending.pop(0)
            if isinstance(action, Escape):
                if action.key in self.ledger.ended:
                    continue  # ended here while the round's puts went on
                self.ledger.begin(action.key, ESCAPED)
            self._putting = action
            return [Put(action.message)]
        return [RoundDone(self.start, self._stop, None, tuple(self._discarded))]


def start_round(reads: TransactionReads, ledger: TransactionLedger, settings: CheckSettings, *,
                start: int, now_ms: int, acting: bool = False) -> RoundRun:
    """A round over the half queue from ``start``: ``ledger`` caught up with the op
    records, the round planned as a master's or (``acting``) an acting slave's."""
    reads.catch_up(ledger, start)
    plan_of = plan_acting_round if acting else plan_round
    plan = plan_of(reads.queue_records(HALF_TOPIC, start, MAX_SCAN), ledger.ended, settings,
                   start=start, now_ms=now_ms)
    return RoundRun(plan, ledger, start=start)


def progress_moves(reads: TransactionReads, done: RoundDone, *, op_start: int
                   ) -> dict[str, int]:
    """What the end of a round stores, by topic: the half queue's progress, and the op
    queue's (from ``op_start``) past the op records naming only half messages behind
    it, each where it moved."""
    moves = {HALF_TOPIC: done.progress} if done.progress != done.start else {}
    op_done = reads.op_done(op_start, done.progress)
    if op_done != op_start:
        moves[OP_HALF_TOPIC] = op_done
    return moves


@attrs.frozen
class Answered:
    """END_TRANSACTION is over: its answer's code and remark (SUCCESS once what ends the
    transaction is stored, a flush or replication timeout included, as RocketMQ's
    ``sendFinalMessage`` says; else the put's refusal). ``op_lost`` is a committed
    transaction's op record that was not stored."""

    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    op_lost: EscapeResult | None = None


EndStep = Put | Answered


def _answered(result: EscapeResult) -> Answered:
    return Answered() if result.stored else Answered(result.code, result.remark)


class EndRun:
    """The puts of one END_TRANSACTION's decision, on a master or (``acting``) on a slave
    acting for its absent master."""

    def __init__(self, decision: Commit | Rollback, ledger: TransactionLedger, *,
                 acting: bool = False) -> None:
        self.decision = decision
        self.ledger = ledger
        self.acting = acting
        self._real_stored = False

    def begin(self) -> EndStep:
        decision = self.decision
        commit = isinstance(decision, Commit)
        self.ledger.begin(decision.key, "commit" if commit else "rollback")
        if isinstance(decision, Commit):
            return Put(acting_commit(decision) if self.acting else decision.real)
        if self.acting:
            return Answered()  # a rollback here puts nothing
        return Put(decision.op)

    def stored(self, result: EscapeResult) -> EndStep:
        """The last ``Put``'s result."""
        decision = self.decision
        if isinstance(decision, Rollback):  # its op record
            if not result.stored:
                self.ledger.abandon(decision.key)
            return _answered(result)
        if not self._real_stored:  # the commit's real message
            if not result.stored:
                self.ledger.abandon(decision.key)
                return _answered(result)
            if self.acting:
                return Answered()
            self._real_stored = True
            return Put(decision.op)
        # The commit's op record: the real message is stored, so this term will not end
        # the transaction again, and a later one finds the committed message.
        return Answered(op_lost=None if result.stored else result)
