"""Transactions on a slave acting for its absent master (trio driver).

The rules are ``triomq.broker.secondary.core.acting_transaction``; this
driver is the ``acting-transactions`` component's task (``Scope.ACTING_TERM``):
for the term it runs a check round every ``transaction_check_interval``
over the slave's own half queue, escaping the half messages due through
the acting escape bridge, and answers END_TRANSACTION for the broker's
``TransactionService`` (which hands it the requests while the term runs).
Each term has its own ledger: the op records in the slave's log, and what
this term ended or escaped. Nothing is written to the slave's own log.
"""

from __future__ import annotations

import logging

import trio

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.escape_bridge import EscapeBridge
from triomq.broker.secondary.core.transaction import (
    HALF_TOPIC,
    EndTransactionHeader,
    TransactionLedger,
    end_transaction,
)
from triomq.broker.secondary.core.transaction_run import EndRun, start_round
from triomq.broker.secondary.transaction_service import TransactionService
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection

__all__ = ["ActingTransactionService"]

log = logging.getLogger("triomq.broker")


class ActingTransactionService:
    """The acting term's transaction check and END_TRANSACTION."""

    def __init__(self, transactions: TransactionService, bridge: EscapeBridge) -> None:
        self.transactions = transactions
        self.bridge = bridge
        #: The running term's ledger (None: no term runs).
        self.ledger: TransactionLedger | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """The term's task: END_TRANSACTION is answered here, and the check runs, until
        the term ends."""
        transactions = self.transactions
        self.ledger = TransactionLedger()
        transactions.acting = self
        try:
            task_status.started()
            while True:
                await trio.sleep(transactions.settings.transaction_check_interval / 1000)
                await self.check_once()
        finally:
            transactions.acting = None
            self.ledger = None

    async def check_once(self) -> None:
        """One round: escape the open half messages due (or discard those checked too
        often), then move the progress past what was done."""
        transactions, ledger = self.transactions, self.ledger
        assert ledger is not None, "a round runs in an acting term"
        run = start_round(transactions.reads, ledger, transactions.settings,
                          start=transactions.progress(HALF_TOPIC), now_ms=transactions.clock(),
                          acting=True)
        await transactions.run_round(run, self.bridge,
                                     name="acting transaction check")

    async def end_transaction(self, header: EndTransactionHeader, peer: RpcConnection
                              ) -> RemotingCommand | None:
        """END_TRANSACTION while acting: the master's checks; a commit's message escaped,
        a rollback putting nothing; ended in the term's ledger either way."""
        transactions, ledger = self.transactions, self.ledger
        if ledger is None:
            return RemotingCommand.response(
                ResponseCode.SLAVE_NOT_AVAILABLE,
                remark="the broker is not master and its acting term ended")
        transactions.reads.catch_up(ledger, transactions.progress(HALF_TOPIC))
        decision = end_transaction(
            header, transactions.reads.record_at(header.commit_log_offset),
            ended=ledger.ended, now_ms=transactions.clock(),
            transaction_time_out=transactions.settings.transaction_time_out)
        if decision is None or isinstance(decision, RemotingCommand):
            if decision is not None:
                log.info("END_TRANSACTION from %s refused by the acting slave: %s",
                         peer.peer, decision.remark)
            return decision
        return await transactions.end_run(EndRun(decision, ledger, acting=True), self.bridge)
