"""Transactions in the acting-master simulation: half messages on ``a0``, resolved
through ``a0``, through the slave acting for it and through ``b0``.

The producer (``ActingTxProducer``, ``clustersim_transactions.SimTxProducer``
with this cluster's addresses) sends half messages to ``a0``, as the
delayed messages' producer does; it sends each END_TRANSACTION that follows
a send to the broker its route names ``broker-a``'s id 0 then (RocketMQ's
client sends it to the group's master address of its route: the acting
slave while ``a0`` is away), and answers a check to the broker that sent
it. Every broker runs ``SimBrokerTransactions`` (the real cores: the
check's plans, ``RoundRun``, ``EndRun``, the ledger read from its log) in
each term it serves: ``a0`` and ``b0`` while online as masters, ``a1`` and
``a2`` while they act. An acting slave's rounds escape the half messages
due to ``b0`` (as half messages there, which ``b0``'s own check then asks
the producer about) and its END_TRANSACTION commits put the real message
on ``b0``, through the ``remote`` bridge's flow; nothing goes into its own
log (``on_slave_append`` would say so).

Invariants: no acting term hands a transaction on twice (its half message
escaped, or its commit put, on ``b0``); no broker's log holds the commit of
a transaction its producer rolled back, nor more commits of a transaction than it took the
transaction in: its half messages as first stored (the producer's on
``a0``; on ``b0`` each escape of it, not the check's renewed copies) and
the commits an acting slave put there. A transaction can be committed
more than once so (at least once, as ``acting_transaction`` says): an
acting slave's commit on ``b0`` and ``a0``'s own check of the same half
message after its return, when the acting check had not passed it; or two
escapes of one half message by two slaves acting in turn, the second with
an older check progress (a slave takes its progress from its master, not
from another slave). Those are counted (``twice_committed``).
Liveness: once healed, every transaction whose half message ``a0``
acknowledged has ended within ``TX_HEAL_LIMIT_MS``: rolled back by its
producer, or committed or discarded (TRANS_CHECK_MAX_TIME_TOPIC) in
``a0``'s or ``b0``'s log.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.secondary.core.transaction import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    TRANSACTION_MASK,
    is_commit,
)
from triomq.protocol.message import PROPERTY_UNIQ_KEY, TRANSACTION_COMMIT, TRANSACTION_PREPARED
from triomq.testing.clustersim_parts import TOPIC
from triomq.testing.clustersim_transactions import ROLLBACK, SimTxProducer, commits_in

if TYPE_CHECKING:
    from triomq.testing.clustersim_acting import ActingSimulation
    from triomq.testing.clustersim_acting_broker import StaticBroker

__all__ = ["MASTERS", "ActingTxProducer", "taken_by"]

#: The masters whose logs end transactions: the group's own, and the one escaped to.
MASTERS = ("a0", "b0")


class ActingTxProducer(SimTxProducer):
    """The transactional producer of the acting-master simulation."""

    sim: ActingSimulation  # type: ignore[assignment]

    def __init__(self, sim: ActingSimulation, rng: random.Random, count: int) -> None:
        super().__init__(sim, rng, count)  # type: ignore[arg-type]
        #: (acting term, transaction id) of what acting slaves handed on.
        self._handed_on: set[tuple[object, str]] = set()

    def half_target(self) -> str | None:
        master = self.sim.brokers["a0"]
        return "a0" if master.up and master.online else None

    def end_target(self, src: str) -> str:
        return self.sim.routed_to or src

    def _acked_halves(self) -> set[str]:
        return self.acked_ids

    def commits(self) -> dict[str, dict[str, int]]:
        """Per master, the number of commits of each transaction in its log."""
        return {name: commits_in(self.sim.brokers[name]) for name in MASTERS}

    def escaped(self, broker: StaticBroker, term: object, message: EscapedMessage) -> None:
        """An acting slave stored ``message`` on another master: no acting term hands on
        a transaction twice (its half message, or its commit), whatever END_TRANSACTION
        or check round does it."""
        sys_flag = message.sys_flag & TRANSACTION_MASK
        if message.topic != TOPIC or sys_flag not in (TRANSACTION_PREPARED, TRANSACTION_COMMIT):
            return  # not the transaction's (a revived copy of a committed message keeps its flag)
        unique_id = message.properties.get(PROPERTY_UNIQ_KEY, "")
        if (term, unique_id) in self._handed_on:
            self.sim.violation(f"{broker.name} handed transaction {unique_id} on twice in "
                               f"one acting term")
        self._handed_on.add((term, unique_id))

    def check_logs(self) -> None:
        for name, counts in self.commits().items():
            taken = taken_by(self.sim.brokers[name])
            for unique_id, count in counts.items():
                tx = self.transactions.get(unique_id)
                if count > taken.get(unique_id, 0):
                    self.sim.violation(f"transaction {unique_id} committed {count} times in "
                                       f"{name}'s log, which took it "
                                       f"{taken.get(unique_id, 0)} times")
                if tx is not None and tx.decided is ROLLBACK:
                    self.sim.violation(f"transaction {unique_id} committed in {name}'s log, "
                                       f"and rolled back")

    def twice_committed(self) -> int:
        """Transactions committed more than once, in one log or in both."""
        a0, b0 = self.commits().values()
        return sum(a0.get(key, 0) + b0.get(key, 0) > 1 for key in a0.keys() | b0.keys())

    def all_ended(self) -> bool:
        ended: set[str] = set()
        for name in MASTERS:
            broker = self.sim.brokers[name]
            ended |= commits_in(broker).keys()
            ended |= {r.properties.get(PROPERTY_UNIQ_KEY, "") for r in broker.log.iter_records()
                      if r.topic == CHECK_MAX_TIME_TOPIC}
        return all(self.transactions[unique_id].decided is ROLLBACK or unique_id in ended
                   for unique_id in self.acked_ids)


def taken_by(broker: StaticBroker) -> dict[str, int]:
    """How often ``broker``'s log took each transaction: its half messages as first stored
    (a renewed copy names its first in ``TRAN_PREPARED_QUEUE_OFFSET``), and the commits
    that name no half message of this log (an acting slave's)."""
    counts: dict[str, int] = {}
    for record in broker.log.iter_records():
        first_half = (record.topic == HALF_TOPIC
                      and PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET not in record.properties)
        acting_commit = (record.topic == TOPIC and is_commit(record)
                         and record.prepared_transaction_offset == 0)
        if first_half or acting_commit:
            unique_id = record.properties.get(PROPERTY_UNIQ_KEY, "")
            counts[unique_id] = counts.get(unique_id, 0) + 1
    return counts
