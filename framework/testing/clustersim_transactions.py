"""Transactions in the cluster simulation: a producer, END_TRANSACTION and the check.

The transactional producer and the brokers' END_TRANSACTION and check run
the real cores. Replay one seed: ``python -m
triomq.testing.clustersim_transactions --seeds 1 --start SEED``.

The producer (``SimTxProducer``, node ``tx-producer``, a random stream of
its own) sends half messages (``triomq.client.core.transaction.half_message``,
sysFlag PREPARED) to the master the controllers committed, decides each
local transaction (commit, rollback, or unknown until a check asks) and
sends END_TRANSACTION oneway (``end_fields``); it answers a broker's
CHECK_TRANSACTION_STATE with ``check_end_fields``, deciding then what it
had left unknown, and never changing a decision.

A broker (``SimBrokerTransactions``) serves END_TRANSACTION as
``triomq.broker.secondary.transaction_service`` does: the log read through
``TransactionReads``, the decision ``end_transaction`` with the term's
``TransactionLedger``, the puts its put core's own (``SimPuts.put_own``);
its master term runs a check round every ``transaction_check_interval``
(``plan_round``; CHECK_TRANSACTION_STATE built by ``check_request``), its
progress group ``CID_SYS_RMQ_TRANS``'s consumer offsets, which a crash
loses since their last write and slaves copy, as every group's.

Invariant: a transaction resolves exactly once. In a master's log no
transaction has two committed messages, and none the producer rolled back
has one. Liveness: once faults heal, every transaction whose half message
was acknowledged (and not exposed by an unclean election: see
``clustersim``) ends within ``TX_HEAL_LIMIT_MS``: rolled back by its
producer, committed in the master's log, or discarded into
TRANS_CHECK_MAX_TIME_TOPIC after ``transaction_check_max`` checks.
"""

from __future__ import annotations

import functools
import random
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import attrs

from triomq.broker.consume.core.consumer_offsets import ConsumerOffsetTable
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.escape_bridge import EscapeResult
from triomq.broker.core.headers import HeaderError, parse_offset_msg_id
from triomq.broker.secondary.core.transaction import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    TRANSACTION_GROUP,
    Commit,
    Rollback,
    TransactionLedger,
    end_transaction,
    is_commit,
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
    EndStep,
    Put,
    RoundRun,
    RoundStep,
    progress_moves,
    start_round,
)
from triomq.client.core.message import (
    Message,
    MessageDecodeError,
    MessageQueue,
    SendResult,
    SendStatus,
    decode_messages,
)
from triomq.client.core.transaction import (
    PREPARED_SYS_FLAG,
    LocalTransactionState,
    check_end_fields,
    end_fields,
    half_message,
    local_state,
)
from triomq.controller.core.wire import WireError
from triomq.protocol import message
from triomq.protocol.message import PROPERTY_UNIQ_KEY, properties_to_bytes
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.unique_id import UniqueIdGenerator
from triomq.testing import seeds
from triomq.testing.clustersim_parts import GROUP, TOPIC, TOPIC_QUEUES, PutRequest, PutResponse
from triomq.testing.seeds import SimSummary

if TYPE_CHECKING:
    from triomq.testing.clustersim import SeedResult, Simulation
    from triomq.testing.clustersim_acting_broker import StaticBroker
    from triomq.testing.clustersim_broker import SimBroker

TX_PRODUCER = "tx-producer"
TX_GROUP = "sim-tx"
#: The brokers' settings: checks every 500 ms of half messages 500 ms old.
TX_SETTINGS = CheckSettings(transaction_time_out=500, transaction_check_max=15,
                            transaction_check_interval=500)
TX_HEAL_LIMIT_MS = 20_000
#: The chance per step that the producer starts a transaction.
P_TRANSACTION = 0.05

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
_SEND_STATUS = {ResponseCode.SUCCESS: SendStatus.SEND_OK,
                ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
                ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT}


@attrs.frozen
class EndRequest:
    """END_TRANSACTION, oneway (producer to broker)."""

    command: RemotingCommand


@attrs.frozen
class StateCheck:
    """CHECK_TRANSACTION_STATE, oneway (broker to producer)."""

    command: RemotingCommand


@attrs.define
class _Tx:
    #: The local transaction's outcome, once decided (never changed).
    decided: LocalTransactionState | None = None


class SimTxProducer:
    """The transactional producer of group ``TX_GROUP``."""

    def __init__(self, sim: Simulation, rng: random.Random, count: int) -> None:
        self.sim = sim
        self.rng = rng
        self.count = count
        self.ids = UniqueIdGenerator("127.0.0.2", 2, 7)
        self.transactions: dict[str, _Tx] = {}
        #: Half sends under way: request id -> message id.
        self.sending: dict[int, str] = {}
        #: Acknowledged records read so far: the message id of each half message.
        self._half_ids: dict[bytes, str | None] = {}
        #: Checks answered.
        self.checked = 0
        #: The ids of the half messages whose send was acknowledged.
        self.acked_ids: set[str] = set()

    def step(self, producing: bool) -> None:
        if (producing and len(self.transactions) < self.count
                and self.rng.random() < P_TRANSACTION):
            self._start()

    def half_target(self) -> str | None:
        """The broker a half message goes to (None: none now): the master committed."""
        master = self.sim.master()
        return None if master is None else master.name

    def end_target(self, src: str) -> str:
        """The broker an END_TRANSACTION after a half's send goes to: the one that took it."""
        return src

    def _start(self) -> None:
        sim = self.sim
        broker = self.half_target()
        if broker is None:
            return  # a producer with no master routed waits
        unique_id = self.ids.next_id(sim.now)
        body = b"tx-%d-%d" % (sim.seed, len(self.transactions))
        half = half_message(Message(TOPIC, body), TX_GROUP)
        properties = {**half.wire_properties(), PROPERTY_UNIQ_KEY: unique_id}
        header = {"a": TX_GROUP, "b": TOPIC, "c": "TBW102", "d": str(TOPIC_QUEUES),
                  "e": str(len(self.transactions) % TOPIC_QUEUES), "f": str(PREPARED_SYS_FLAG),
                  "g": str(sim.now), "h": "0", "i": properties_to_bytes(properties).decode(),
                  "j": "0", "n": GROUP}
        self.transactions[unique_id] = _Tx()
        rid = sim.next_request_id()
        self.sending[rid] = unique_id
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext_fields=header,
                                          body=body)
        sim.network.send(TX_PRODUCER, broker, PutRequest(rid, request), sim.now)

    def _decide(self, tx: _Tx, state: LocalTransactionState | None = None
                ) -> LocalTransactionState:
        if tx.decided is None:
            tx.decided = state if state is not None else self.rng.choice([COMMIT, ROLLBACK])
        return tx.decided

    def receive(self, src: str, payload: object) -> None:
        if isinstance(payload, PutResponse):
            self._sent(src, payload)
        elif isinstance(payload, StateCheck):
            self._checked(src, payload.command)

    def _sent(self, src: str, response: PutResponse) -> None:
        unique_id = self.sending.pop(response.id, None)
        command = response.command
        status = _SEND_STATUS.get(command.code)
        if unique_id is None or status is None:
            return  # not stored, or not known to be: a check decides, if it is there
        tx = self.transactions[unique_id]
        fields = command.ext_fields
        result = SendResult(status, unique_id, fields["msgId"],
                            MessageQueue(TOPIC, GROUP, int(fields["queueId"])),
                            int(fields["queueOffset"]))
        state = local_state(result)
        if state is None:
            state = self.rng.choice([COMMIT, ROLLBACK, UNKNOW])
        if tx.decided is not None:
            state = tx.decided  # a check answered first (the answer waited for the replicas)
        elif state is not UNKNOW:
            self._decide(tx, state)
        self.acked_ids.add(unique_id)
        self._end(self.end_target(src), end_fields(result, state, TX_GROUP))

    def _checked(self, src: str, check: RemotingCommand) -> None:
        try:
            messages = decode_messages(check.body)
        except MessageDecodeError:
            self.sim.violation(f"{src} sent a check whose message does not decode")
        tx = self.transactions.get(messages[0].msg_id) if len(messages) == 1 else None
        if tx is None:
            self.sim.violation(f"{src} checked a transaction the producer never began")
        self.checked += 1
        state = self._decide(tx)
        self._end(src, check_end_fields(check.ext_fields, messages[0], state, TX_GROUP))

    def _end(self, broker: str, fields: dict[str, str]) -> None:
        request = RemotingCommand.request(RequestCode.END_TRANSACTION, ext_fields=fields)
        self.sim.network.send(TX_PRODUCER, broker, EndRequest(request), self.sim.now)

    # -- the invariant and the liveness ------------------------------------------------

    def check_logs(self) -> None:
        """No master's log holds two commits of one transaction, or one of a transaction
        its producer rolled back."""
        for broker in self.sim.brokers.values():
            if broker.up and broker.term.master_term is not None:
                for unique_id, count in commits_in(broker).items():
                    tx = self.transactions.get(unique_id)
                    if count > 1:
                        self.sim.violation(f"transaction {unique_id} committed {count} times "
                                           f"in {broker.name}'s log")
                    if tx is not None and tx.decided is ROLLBACK:
                        self.sim.violation(f"transaction {unique_id} committed in "
                                           f"{broker.name}'s log, and rolled back")

    def _acked_halves(self) -> set[str]:
        """The ids of the half messages acknowledged (those the invariants check: not
        those an unclean election may have lost)."""
        ids = set()
        for acked in self.sim.checked_acked():
            if acked.record not in self._half_ids:
                record = message.decode(acked.record, 0)[0]
                self._half_ids[acked.record] = (record.properties.get(PROPERTY_UNIQ_KEY)
                                                if record.topic == HALF_TOPIC else None)
            unique_id = self._half_ids[acked.record]
            if unique_id is not None:
                ids.add(unique_id)
        return ids

    def all_ended(self) -> bool:
        """Every acknowledged transaction rolled back, committed or discarded on the master."""
        master = self.sim.master()
        if master is None:
            return False
        committed = commits_in(master)
        discarded = {r.properties.get(PROPERTY_UNIQ_KEY) for r in master.log.iter_records()
                     if r.topic == CHECK_MAX_TIME_TOPIC}
        return all(self.transactions[unique_id].decided is ROLLBACK or unique_id in committed
                   or unique_id in discarded for unique_id in self._acked_halves())


def commits_in(broker: SimBroker | StaticBroker) -> dict[str, int]:
    """The number of commits of each transaction (by its id) in ``broker``'s log."""
    counts: dict[str, int] = {}
    for record in broker.log.iter_records():
        if record.topic == TOPIC and is_commit(record):
            unique_id = record.properties.get(PROPERTY_UNIQ_KEY, "")
            counts[unique_id] = counts.get(unique_id, 0) + 1
    return counts


class SimBrokerTransactions:
    """One broker's END_TRANSACTION and its check rounds, in each term it serves them.

    ``serving`` says the term (None: the broker serves no transactions now:
    a slave); a new one reads the ledger again and starts its rounds over.
    ``acting`` says whether that term is a slave's acting for its absent
    master (``acting_transaction``: rounds escape, END_TRANSACTION commits
    without an op record); ``offsets`` is the broker's consumer offset table,
    where the check's progress is.
    """

    def __init__(self, broker: SimBroker | StaticBroker, *,
                 serving: Callable[[], object | None],
                 offsets: Callable[[], ConsumerOffsetTable],
                 acting: Callable[[], bool] = lambda: False, broker_name: str = GROUP) -> None:
        self.broker = broker
        self.serving = serving
        self.offsets = offsets
        self.acting = acting
        self.broker_name = broker_name
        self.reads = TransactionReads(broker.log)
        self.term: object | None = None
        self._new_term(None)

    def _new_term(self, term: object | None) -> None:
        """A start or a new term: the ledger is read again, the round starts over."""
        self.term = term
        self.ledger = TransactionLedger()
        self.next_check: int | None = None
        self.round: object | None = None

    def _serving(self) -> object | None:
        term = self.serving()
        if term is not None and term != self.term:
            self._new_term(term)
        return term

    def _progress(self, topic: str) -> int:
        stored = self.offsets().query(TRANSACTION_GROUP, topic, 0)
        return stored if stored is not None else 0

    def _commit(self, topic: str, offset: int) -> None:
        self.offsets().commit(TRANSACTION_GROUP, topic, 0, offset, self.broker.now_ms())

    # -- END_TRANSACTION -----------------------------------------------------------------

    def receive_end(self, request: EndRequest) -> None:
        broker = self.broker
        if self._serving() is None:
            return  # SLAVE_NOT_AVAILABLE, to a oneway request
        try:
            header = parse_end_transaction(request.command.ext_fields)
        except WireError:
            broker.sim.violation("the producer sent an END_TRANSACTION the broker refuses")
        ledger = self.ledger
        self.reads.catch_up(ledger, self._progress(HALF_TOPIC))
        decision = end_transaction(
            header, self.reads.record_at(header.commit_log_offset), ended=ledger.ended,
            now_ms=broker.now_ms(), transaction_time_out=TX_SETTINGS.transaction_time_out)
        if isinstance(decision, (Commit, Rollback)):
            run = EndRun(decision, ledger, acting=self.acting())
            self._end_step(run, run.begin())

    def _end_step(self, run: EndRun, step: EndStep) -> None:
        if isinstance(step, Put):  # its answer goes nowhere: the request was oneway
            self.broker.puts.put_own(step.message, lambda result: self._end_step(
                run, run.stored(result)))

    # -- the check -----------------------------------------------------------------------

    def step(self) -> None:
        broker = self.broker
        term = self._serving()
        if term is None:
            return
        now = broker.now_ms()
        if self.next_check is None:
            self.next_check = now + TX_SETTINGS.transaction_check_interval
        if now < self.next_check or self.round is term:
            return
        self.next_check = now + TX_SETTINGS.transaction_check_interval
        self.round = term
        run = start_round(self.reads, self.ledger, TX_SETTINGS, start=self._progress(HALF_TOPIC),
                          now_ms=now, acting=self.acting())
        self._round_steps(term, run, run.begin())

    def _round_steps(self, term: object, run: RoundRun, steps: list[RoundStep]) -> None:
        """Carry out the round's steps in order, each put's answer taking it on."""
        for step in steps:
            if isinstance(step, Put):
                self.broker.puts.put_own(step.message, functools.partial(
                    self._stored, term, run))
                return
            if isinstance(step, AskProducer):
                self._send_check(step.renewed)
            else:
                self.round = None
                for topic, offset in progress_moves(
                        self.reads, step, op_start=self._progress(OP_HALF_TOPIC)).items():
                    self._commit(topic, offset)

    def _stored(self, term: object, run: RoundRun, result: EscapeResult) -> None:
        if self.serving() != term:
            return  # the term ended: the next one starts over from the stored progress
        self._round_steps(term, run, run.stored(result))

    def _send_check(self, renewed: EscapeResult) -> None:
        try:
            _, physical = parse_offset_msg_id(renewed.msg_id or "")
        except HeaderError:
            return
        copy = self.reads.record_at(physical)
        if copy is None:
            return
        request = check_request(copy, self.broker_name)
        command = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE,
                                          ext_fields=request.fields, body=request.body)
        broker = self.broker
        broker.sim.network.send(broker.name, TX_PRODUCER, StateCheck(command), broker.sim.now)


#: Transactions a seed of ``run_seed`` begins.
SEED_TRANSACTIONS = 20


def run_seed(seed: int) -> SeedResult:
    """Simulate one seed with a transactional producer (no consumer group)."""
    from triomq.testing.clustersim import Simulation

    return Simulation(seed, transactions=SEED_TRANSACTIONS, consumers=0).run()


def run_seeds(count: int, start: int = 0) -> SimSummary:
    """Simulate seeds ``start .. start + count - 1`` with transactions."""
    return seeds.run_seeds(run_seed, count, start)


def main(argv: Sequence[str] | None = None) -> int:
    """``--seeds N [--start K]``, as ``triomq.testing.clustersim``'s, with transactions."""
    return seeds.main("clustersim_transactions", __doc__.splitlines()[0], run_seed,
                      lambda r: f"{r.now_ms} ms", argv)


if __name__ == "__main__":
    sys.exit(main())
