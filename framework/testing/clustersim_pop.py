"""Pop consumption in the controller-mode simulation: the broker's pop and revive cores
over virtual time, and the invariant "a message is not revived after its ack".

``Simulation(seed, pops=True)`` adds a pop consumer colocated with the
brokers (it calls the master it finds, no network in between). While a
broker is master, ``SimPops`` runs its revive flow
(``triomq.broker.pop.core.revive.ReviveQueue``, one revive queue, as
``triomq.broker.pop.revive_service`` runs it over trio) over the broker's
log up to its confirm offset, putting revived copies through the broker's
own put (``SimPuts.put_own``, the local escape bridge's). The consumer pops
with the broker's ``plan_pop`` (the topic, then the group's pop retry topic),
each pop's checkpoint put the same way; the pop counts once that put is
acknowledged (replicated, as every acked put). It acks some of what it
popped, before or after its invisible time, through whichever broker is
master then, with the broker's ``receipt_refusal`` and ack record.

Invariants:

- safety: no master revives a popped message whose ack was answered
  SUCCESS before its revive time (the pop's sim time plus nine tenths of its
  invisible time, a margin for the brokers' clock rates), unless an unclean
  election may have lost the ack (the invariants' ``relaxed_before``);
- liveness (after healing): every acknowledged pop's messages are acked (or
  their ack stored, though not answered SUCCESS) or revived (a revive put
  answered SUCCESS) within ``POP_HEAL_LIMIT_MS``.

Each broker keeps its own revive and pop offsets across crashes and does
not copy its master's (the simulation's brokers copy no offsets): a new
master revives from its own, so what its predecessor revived may be revived
twice (at least once), never lost.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from triomq.broker.consume.core.subscription import Subscription
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult
from triomq.broker.pop.core.checkpoint import AckMsg, CheckPoint, revive_message
from triomq.broker.pop.core.pop import PopHeader, plan_pop
from triomq.broker.pop.core.receipt import (
    Receipt,
    pop_retry_topic,
    receipt_refusal,
    revive_topic,
    topic_kind,
)
from triomq.broker.pop.core.revive import (
    ReadMessage,
    ReadRevive,
    Revive,
    ReviveQueue,
    ReviveRecord,
    StoreReviveOffset,
    popped_record,
    revive_records,
)
from triomq.protocol.message import MessageRecord
from triomq.protocol.route import TopicConfig
from triomq.testing.clustersim_parts import CLUSTER, GROUP, TOPIC, TOPIC_QUEUES
from triomq.testing.clustersim_revive import SimRevive

if TYPE_CHECKING:
    from triomq.testing.clustersim import Simulation
    from triomq.testing.clustersim_broker import SimBroker

__all__ = ["POP_HEAL_LIMIT_MS", "SimPops", "is_pop_topic"]

POP_HEAL_LIMIT_MS = 20_000
POP_GROUP = "sim-pop"
REVIVE_TOPIC = revive_topic(CLUSTER)
RETRY_TOPIC = pop_retry_topic(TOPIC, POP_GROUP)
_REVIVE_INTERVAL_MS = 200

def is_pop_topic(topic: str) -> bool:
    """Whether ``topic`` holds the pop consumer's records (checkpoints, acks, revives)."""
    return topic in (REVIVE_TOPIC, RETRY_TOPIC)


Key = tuple[tuple[str, str, int, int, int, str], int]


@attrs.define
class _Popped:
    ck: CheckPoint
    #: The master epoch that stored the checkpoint.
    epoch: int
    #: Sim time of the pop's answer, and of its revive time (with the clock margin).
    at: int
    revive_at: int
    #: When the consumer acks each offset (sim time), for those it acks.
    ack_at: dict[int, int]


class _Flow(SimRevive):
    """One master term's revive flow: over the master's log up to its confirm offset, its
    revived copies through the master's own put, its offset kept per broker."""

    def __init__(self, pops: SimPops, broker: SimBroker, done: int) -> None:
        super().__init__(ReviveQueue(0, done, broker_name=GROUP,
                                     interval_ms=_REVIVE_INTERVAL_MS),
                         broker.now_ms(), pops.sim.violation, broker.name)
        self.pops = pops
        self.broker = broker
        self.epoch = broker.term.epoch

    def read_revive(self, read: ReadRevive) -> list[ReviveRecord]:
        log = self.broker.log
        return revive_records(log, REVIVE_TOPIC, read,
                              self.broker.term.confirmed(log.max_offset), log.read_record)

    def read_message(self, read: ReadMessage) -> MessageRecord | None:
        return popped_record(self.broker.log, read, self.broker.log.read_record)

    def put_message(self, message: EscapedMessage, done: Callable[[EscapeResult], None]
                    ) -> None:
        self.pops._put(self.broker, message, done)

    def put_answered(self, put: Revive, result: EscapeResult) -> None:
        if result.ok:
            self.pops.revived.add((put.checkpoint.merge_key, put.offset))
            self.pops.revivals += 1

    def reviving(self, put: Revive) -> None:
        self.pops._check_not_acked(self.broker, put)

    def store_offset(self, store: StoreReviveOffset) -> None:
        self.pops.revive_done[self.broker.name] = store.offset


class SimPops:
    """The pop consumer and the masters' revive flows of one simulation."""

    def __init__(self, sim: Simulation, rng: random.Random) -> None:
        self.sim = sim
        self.rng = rng
        self.p_pop = rng.choice([0.01, 0.03])
        self.p_ack = rng.choice([0.5, 0.8])
        #: Per broker, kept across its crashes (its consumerOffset.json).
        self.revive_done: dict[str, int] = {}
        self.pop_offsets: dict[str, dict[tuple[str, int], int]] = {}
        self._flows: dict[str, _Flow] = {}
        #: Acknowledged pops, by checkpoint key.
        self.popped: dict[tuple[str, str, int, int, int, str], _Popped] = {}
        #: (checkpoint key, offset) -> sim time its ack was answered SUCCESS, and the
        #: master epoch that stored it.
        self.acked: dict[Key, tuple[int, int]] = {}
        #: Acks stored but not answered SUCCESS (a replication timeout): they may count.
        self.maybe_acked: set[Key] = set()
        #: (checkpoint key, offset) revived by a put answered SUCCESS.
        self.revived: set[Key] = set()
        self.pops = self.revivals = 0
        self._busy = False
        self._acking: set[Key] = set()

    # -- driving ---------------------------------------------------------------------

    def step(self, popping: bool) -> None:
        master = self._master()
        for name, flow in list(self._flows.items()):
            broker = self.sim.brokers[name]
            if broker is not master or flow.epoch != broker.term.epoch or not broker.up:
                del self._flows[name]
        if master is None:
            return
        running = self._flows.get(master.name)
        if running is None:
            running = self._flows[master.name] = _Flow(
                self, master, self.revive_done.get(master.name, -1))
        running.pump(master.now_ms())
        if popping and not self._busy and self.rng.random() < self.p_pop:
            self._pop(master)
        self._ack_due(master)

    def _master(self) -> SimBroker | None:
        for broker in self.sim.brokers.values():
            if broker.up and broker.term.master_term is not None:
                return broker
        return None

    def _put(self, broker: SimBroker, message: EscapedMessage,
             done: Callable[[EscapeResult], None]) -> None:
        broker.puts.put_own(message, done)

    # -- the revive flow ---------------------------------------------------------------

    def _check_not_acked(self, broker: SimBroker, put: Revive) -> None:
        acked = self.acked.get((put.checkpoint.merge_key, put.offset))
        popped = self.popped.get(put.checkpoint.merge_key)
        if acked is None or popped is None:
            return
        acked_at, epoch = acked
        # An unclean election may lose what was acked before it (the invariants' rule).
        if acked_at < popped.revive_at and epoch >= self.sim.relaxed_before:
            self.sim.violation(
                f"{broker.name} revives {put.checkpoint.topic} offset {put.offset} of the pop "
                f"at {popped.at} ms, acked at {acked_at} ms, before its revive time "
                f"{popped.revive_at} ms")

    # -- the consumer ------------------------------------------------------------------

    def _pop(self, master: SimBroker) -> None:
        offsets = self.pop_offsets.setdefault(master.name, {})
        invisible = self.rng.choice([500, 1000, 3000])
        header = PopHeader(POP_GROUP, TOPIC, -1, 8, invisible, 0, 0, 1)
        retry = TopicConfig(RETRY_TOPIC, 1, 1)
        plan = plan_pop(master.log, header, Subscription(), topic=TopicConfig(
            TOPIC, TOPIC_QUEUES, TOPIC_QUEUES), retry=retry, random_q=self.rng.randrange(100),
            pop_offset=lambda topic, queue: offsets.get((topic, queue)),
            confirm_offset=master.term.confirmed(master.log.max_offset),
            pop_from_retry_probability=20, scan_limit=64)
        pick = next((p for p in plan.picks if p.entries), None)
        if pick is None:
            return
        pop_time = master.now_ms()
        ck = pick.checkpoint(header, pop_time, GROUP)
        self._busy = True
        sent, epoch = self.sim.now, master.term.epoch

        def done(result: EscapeResult) -> None:
            self._busy = False
            if not result.ok:
                return
            offsets[pick.topic, pick.queue_id] = pick.next_offset
            self.pops += 1
            acks = {o: self.sim.now + self.rng.randrange(invisible * 2)
                    for o in ck.offsets if self.rng.random() < self.p_ack}
            self.popped[ck.merge_key] = _Popped(ck, epoch, self.sim.now,
                                                sent + invisible * 9 // 10, acks)

        self._put(master, revive_message(ck, REVIVE_TOPIC, 0), done)

    def _ack_due(self, master: SimBroker) -> None:
        for key, popped in self.popped.items():
            for offset, at in list(popped.ack_at.items()):
                if at > self.sim.now or (key, offset) in self._acking:
                    continue
                del popped.ack_at[offset]
                self._ack(master, popped.ck, offset)

    def _ack(self, master: SimBroker, ck: CheckPoint, offset: int) -> None:
        receipt = Receipt(ck.start_offset, ck.pop_time, ck.invisible_time, 0,
                          topic_kind(ck.topic), ck.broker_name, ck.queue_id, offset)
        if receipt_refusal(receipt, topic=ck.topic, group=ck.group, queue_id=ck.queue_id,
                           offset=offset, now_ms=master.now_ms(), revive_queue_num=1):
            return  # stale (or, across a failover, a clock ahead): the message comes back
        key = (ck.merge_key, offset)
        self._acking.add(key)
        epoch = master.term.epoch
        ack = AckMsg(ck.topic, ck.group, ck.queue_id, ck.start_offset, ck.pop_time,
                     ck.broker_name, (offset,))

        def done(result: EscapeResult) -> None:
            self._acking.discard(key)
            if result.ok:
                self.acked.setdefault(key, (self.sim.now, epoch))
            elif result.stored:  # timed out after the append: it may yet count
                self.maybe_acked.add(key)

        self._put(master, revive_message(ack, REVIVE_TOPIC, 0), done)

    # -- liveness ----------------------------------------------------------------------

    def unresolved(self) -> list[str]:
        """Acknowledged pops' messages neither acked nor revived yet (not those of a
        checkpoint an unclean election may have lost)."""
        done = set(self.acked) | self.revived | self.maybe_acked | self._acking
        return [f"{p.ck.topic} offset {o} of the pop at {p.at} ms"
                for key, p in self.popped.items() if p.epoch >= self.sim.relaxed_before
                for o in p.ck.offsets if (key, o) not in done]
