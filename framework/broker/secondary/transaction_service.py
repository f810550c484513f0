"""Transactional messages on a master: END_TRANSACTION and the check (trio driver).

The rules are ``triomq.broker.secondary.core.transaction`` (half messages, what
END_TRANSACTION does, the ``TransactionLedger``) and
``triomq.broker.secondary.core.transaction_check`` (the check's rounds); this driver reads
the log for them and carries out what they say, every put through the
escape bridge:

- END_TRANSACTION (37, oneway as producers send it; a request that asks
  for an answer gets one): commit puts the real message and then the op
  record, rollback the op record; a slave answers SLAVE_NOT_AVAILABLE, as
  RocketMQ's ``EndTransactionProcessor`` does, unless it acts for its
  absent master (``acting``: ``acting_transaction_service`` answers then),
  and a bad header INVALID_PARAMETER naming the field;
- the check (``Scope.MASTER_TERM``: it runs while the broker is master and
  stops with the term): every ``transaction_check_interval`` one round,
  CHECK_TRANSACTION_STATE (39, oneway) going to the connection of the half
  message's producer group heard from last (none connected: the check is
  counted and tried again next round, as in RocketMQ). Its progress is
  group ``CID_SYS_RMQ_TRANS``'s consumer offsets.

Each master term rebuilds its ledger from the op queue's first record, and
from the committed messages of the transactions still open (a commit whose
op record was not stored before a failover), read from the oldest one's
half message on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from triomq.broker.components import ComponentView
from triomq.broker.config import BrokerConfig
from triomq.broker.consume.offset_service import ConsumerOffsetService
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.escape_bridge import EscapeBridge, EscapeResult
from triomq.broker.core.headers import HeaderError, parse_offset_msg_id
from triomq.broker.core.role import BrokerRole
from triomq.broker.secondary.core.transaction import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    TRANSACTION_GROUP,
    Commit,
    Rollback,
    TransactionLedger,
    end_transaction,
    parse_end_transaction,
)
from triomq.broker.secondary.core.transaction_check import (
    CheckSettings,
    check_request,
)
from triomq.broker.secondary.core.transaction_reads import TransactionReads
from triomq.broker.secondary.core.transaction_run import (
    AskProducer,
    EndRun,
    Put,
    RoundRun,
    progress_moves,
    start_round,
)
from triomq.clock import EpochClock
from triomq.protocol.header_fields import HeaderFieldError
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection, RpcError, RpcServer

if TYPE_CHECKING:
    from triomq.broker.secondary.acting_transaction_service import ActingTransactionService

__all__ = ["TransactionService"]

log = logging.getLogger("triomq.broker")

#: Seconds a check request may take to be written before it is given up.
CHECK_WRITE_TIMEOUT = 3.0


class TransactionService:
    """END_TRANSACTION and the check rounds of one broker."""

    def __init__(self, *, config: BrokerConfig, broker: ComponentView, bridge: EscapeBridge,
                 offsets: ConsumerOffsetService,
                 producer_connection: Callable[[str], object], clock: EpochClock) -> None:
        self.config = config
        self.broker = broker
        self.bridge = bridge
        self.offsets = offsets
        #: The broker's clock: a half message's age is its store time's distance from it.
        self.clock = clock
        #: The connection of a producer group to send its checks to (None: none).
        self.producer_connection = producer_connection
        self.settings = CheckSettings(
            transaction_time_out=config.transaction_time_out,
            transaction_check_max=config.transaction_check_max,
            transaction_check_interval=config.transaction_check_interval)
        self.ledger = TransactionLedger()
        self.reads = TransactionReads(broker.log)
        #: Check requests written so far (tests and stats read it).
        self.checks_sent = 0
        #: What answers END_TRANSACTION while the broker acts for its absent master.
        self.acting: ActingTransactionService | None = None

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.END_TRANSACTION, self.end_transaction)

    def role_changed(self, role: BrokerRole, master_epoch: int) -> None:
        # A new term reads the op records from the first: another master may have
        # ended transactions since this one last was.
        self.ledger = TransactionLedger()

    # -- END_TRANSACTION -------------------------------------------------------------

    async def end_transaction(self, request: RemotingCommand, peer: RpcConnection
                              ) -> RemotingCommand | None:
        acting = None if self.broker.is_master else self.acting
        if not self.broker.is_master and acting is None:
            return RemotingCommand.response(
                ResponseCode.SLAVE_NOT_AVAILABLE,
                remark="the broker is not master: END_TRANSACTION is served by the master")
        try:
            header = parse_end_transaction(request.ext_fields)
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        if acting is not None:
            return await acting.end_transaction(header, peer)
        self.reads.catch_up(self.ledger, self.progress(HALF_TOPIC))
        # This term's ledger, even if the term ends while the puts wait.
        ledger = self.ledger
        decision = end_transaction(
            header, self.reads.record_at(header.commit_log_offset), ended=ledger.ended,
            now_ms=self.clock(), transaction_time_out=self.settings.transaction_time_out)
        if decision is None or isinstance(decision, RemotingCommand):
            if decision is not None:
                log.info("END_TRANSACTION from %s refused: %s", peer.peer, decision.remark)
            return decision
        return await self._end(decision, ledger)

    async def _end(self, decision: Commit | Rollback, ledger: TransactionLedger
                   ) -> RemotingCommand:
        return await self.end_run(EndRun(decision, ledger), self.bridge)

    async def end_run(self, run: EndRun, bridge: EscapeBridge) -> RemotingCommand:
        """Carry out ``run``'s puts through ``bridge``; END_TRANSACTION's answer."""
        step = run.begin()
        while isinstance(step, Put):
            step = run.stored(await bridge.put_message(step.message))
        if step.op_lost is not None:
            log.warning("the op record of committed transaction %d was not stored: %s",
                        run.decision.key, step.op_lost.remark)
        return RemotingCommand.response(step.code, remark=step.remark)

    # -- the check ---------------------------------------------------------------------

    async def check_loop(self) -> None:
        """One round every ``transaction_check_interval`` until the term ends."""
        while True:
            await trio.sleep(self.settings.transaction_check_interval / 1000)
            await self.check_once()

    def progress(self, topic: str) -> int:
        """Where the check goes on in ``topic`` (the half queue or the op queue): its stored
        progress, or the queue's first entry."""
        stored = self.offsets.table.query(TRANSACTION_GROUP, topic, 0)
        first = self.broker.log.queue_min_offset(topic, 0)
        return first if stored is None else max(stored, first)

    async def check_once(self) -> None:
        """One round: check, renew or discard the open half messages due."""
        await self.run_round(start_round(self.reads, self.ledger, self.settings,
                                         start=self.progress(HALF_TOPIC),
                                         now_ms=self.clock()), self.bridge)

    async def run_round(self, run: RoundRun, bridge: EscapeBridge, *,
                        name: str = "transaction check") -> None:
        """Carry out ``run``'s puts (through ``bridge``) and checks, then store the progress
        it reached; the logs call it ``name``."""
        steps = run.begin()
        while steps:
            step = steps.pop(0)
            if isinstance(step, Put):
                steps.extend(run.stored(await bridge.put_message(step.message)))
            elif isinstance(step, AskProducer):
                await self._send_check(step.group, step.renewed)
            else:
                for queue_offset in step.discarded:
                    log.warning("half message %d was checked %d times: discarded into "
                                "TRANS_CHECK_MAX_TIME_TOPIC", queue_offset,
                                self.settings.transaction_check_max)
                if step.stopped is not None:
                    log.warning("%s stopped at half message %d, retried next round: %s",
                                name, step.progress, step.stopped.remark)
                for topic, offset in progress_moves(
                        self.reads, step, op_start=self.progress(OP_HALF_TOPIC)).items():
                    self.offsets.commit(TRANSACTION_GROUP, topic, 0, offset)

    async def _send_check(self, group: str, renewed: EscapeResult) -> None:
        try:
            _, physical = parse_offset_msg_id(renewed.msg_id or "")
        except HeaderError:
            return
        copy = self.reads.record_at(physical)
        connection = self.producer_connection(group)
        if copy is None or not isinstance(connection, RpcConnection):
            log.info("no producer of group %s connected: its transaction is checked later",
                     group)
            return
        request = check_request(copy, self.config.broker_name)
        try:
            await connection.invoke_oneway(RequestCode.CHECK_TRANSACTION_STATE, request.fields,
                                           request.body, timeout=CHECK_WRITE_TIMEOUT)
        except RpcError as exc:
            log.info("checking a transaction with %s failed: %s", connection.peer, exc)
            return
        self.checks_sent += 1
