"""Pop consumption in the acting-master simulation: pops served by whichever broker the
name servers route as the group's id 0, and their revive on every broker that serves.

``ActingSimulation(seed, pops=True)`` (half the runs) adds a pop consumer beside the
brokers (it calls them with no network in between, as ``clustersim_pop``'s does). It
pops ``broker-a``'s topic from the broker its route names id 0: the master, or the
slave acting for it. The pop reads that broker's log with the broker's ``plan_pop``,
its pop offsets are that broker's consumer offsets (which slaves copy and a
returning master's pre-online takes back), and its checkpoint, like each ack, goes
through that broker's ``put_own``: the master's own log, or, from an acting slave,
the escape to ``b0`` (``StaticBroker._escape``), as the real broker's pop service
puts through its bridge.

Every broker that serves (a master online, or a slave in its acting term) runs the
broker's revive flow (``ReviveQueue``) over its own revive topic, its revive offset
among its consumer offsets, its revived copies through its ``put_own``. A
checkpoint naming another group (on ``b0``: those escaped by an acting slave) has
its message read from that group's replicas the reviving broker reaches, by
broker id (``ReadMessage.broker_name``, as ``revive_service`` reads it over
PULL_MESSAGE); when none holds it, ``read_failed`` and the flow tries again.

Invariants:

- safety: no broker revives a popped message whose ack its revive flow has read
  (an ack in its own revive queue before where the flow reads);
- no popped message is lost from the log that holds it (a ``NotRevived`` "no
  longer stored");
- liveness (after healing): every acknowledged pop's messages are acked (an ack
  answered PUT_OK, or one whose answer was lost but which a revive topic holds) or
  revived (a revive put answered PUT_OK) within ``POP_HEAL_LIMIT_MS``. An ack landing
  where its checkpoint is not (a pop through the acting slave, acked after the
  master's return) cancels nothing: the message is revived, at least once.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from triomq.broker.consume.core.subscription import Subscription
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult
from triomq.broker.pop.core.checkpoint import (
    AckMsg,
    CheckPoint,
    RecordRefused,
    decode_ack,
    revive_message,
)
from triomq.broker.pop.core.pop import PopHeader, plan_pop
from triomq.broker.pop.core.receipt import (
    ACK_TAG,
    REVIVE_GROUP,
    Receipt,
    pop_retry_topic,
    receipt_refusal,
    revive_topic,
    topic_kind,
)
from triomq.broker.pop.core.remote_read import Unread
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
    from triomq.testing.clustersim_acting import ActingSimulation
    from triomq.testing.clustersim_acting_broker import StaticBroker

__all__ = ["POP_HEAL_LIMIT_MS", "ActingPops"]

POP_HEAL_LIMIT_MS = 20_000
POP_GROUP = "acting-pop"
REVIVE_TOPIC = revive_topic(CLUSTER)
RETRY_TOPIC = pop_retry_topic(TOPIC, POP_GROUP)
_REVIVE_INTERVAL_MS = 200

MergeKey = tuple[str, str, int, int, int, str]
Key = tuple[MergeKey, int]


@attrs.define
class _Popped:
    ck: CheckPoint
    #: Sim time of the pop's answer.
    at: int
    #: When the consumer acks each offset (sim time), for those it acks.
    ack_at: dict[int, int]


class _Flow(SimRevive):
    """One serving term's revive flow on one broker: over its whole log, another group's
    messages read from that group's replicas, its revived copies through its ``put_own``,
    its offset among its consumer offsets."""

    def __init__(self, pops: ActingPops, broker: StaticBroker) -> None:
        done = broker.offsets.query(REVIVE_GROUP, REVIVE_TOPIC, 0)
        super().__init__(ReviveQueue(0, -1 if done is None else done, broker_name=broker.group,
                                     interval_ms=_REVIVE_INTERVAL_MS),
                         broker.now_ms(), pops.sim.violation, broker.name)
        self.pops = pops
        self.broker = broker
        self.term = _term(broker)

    def read_revive(self, read: ReadRevive) -> list[ReviveRecord]:
        log = self.broker.log
        return revive_records(log, REVIVE_TOPIC, read, log.max_offset, log.read_record)

    def read_message(self, read: ReadMessage) -> MessageRecord | Unread | None:
        if read.broker_name == self.broker.group:
            return popped_record(self.broker.log, read, self.broker.log.read_record)
        return self.pops._read_remote(self.broker, read)

    def put_message(self, message: EscapedMessage, done: Callable[[EscapeResult], None]
                    ) -> None:
        self.broker.put_own(message, done)

    def put_answered(self, put: Revive, result: EscapeResult) -> None:
        if result.ok:
            self.pops.revived.add((put.checkpoint.merge_key, put.offset))
            if put.checkpoint.broker_name != self.broker.group:
                self.pops.remote_revives += 1

    def reviving(self, put: Revive) -> None:
        self.pops._check_not_acked(self, put)

    def store_offset(self, store: StoreReviveOffset) -> None:
        self.broker.offsets.commit(REVIVE_GROUP, REVIVE_TOPIC, store.queue_id, store.offset,
                                   self.broker.now_ms())


def _term(broker: StaticBroker) -> object | None:
    """What identifies the broker's serving term (None: it does not serve): its run (a
    new ``Tasks`` at each start) and whether it acts."""
    if not broker.up or not ((broker.is_master and broker.online) or broker.acting):
        return None
    return (id(broker.tasks), broker.acting)


class ActingPops:
    """The pop consumer and the serving brokers' revive flows of one simulation."""

    def __init__(self, sim: ActingSimulation, rng: random.Random) -> None:
        self.sim = sim
        self.rng = rng
        self.p_pop = rng.choice([0.01, 0.03])
        self.p_ack = rng.choice([0.5, 0.8])
        self._flows: dict[str, _Flow] = {}
        #: Acknowledged pops, by checkpoint key.
        self.popped: dict[MergeKey, _Popped] = {}
        #: (checkpoint key, offset) acked by a put answered PUT_OK, or revived so.
        self.acked: set[Key] = set()
        self.revived: set[Key] = set()
        #: Acks whose put was not answered PUT_OK (an escape's answer lost): stored maybe.
        self.maybe_acked: set[Key] = set()
        #: Pops served by an acting slave, and revives of another group's message.
        self.acting_pops = self.remote_revives = 0
        self._busy = False
        self._acking: set[Key] = set()

    def hold_topics(self, broker: StaticBroker) -> None:
        """The revive topic and the group's pop retry topic, as every master where the
        group pops holds them (the ``remote`` bridge escapes to those that route them)."""
        for topic in (REVIVE_TOPIC, RETRY_TOPIC):
            broker.topics.update(TopicConfig(topic, 1, 1), broker.now_ms(), system=True)

    # -- driving ---------------------------------------------------------------------

    def step(self, popping: bool) -> None:
        for name, broker in self.sim.brokers.items():
            term = _term(broker)
            running = self._flows.get(name)
            if running is not None and running.term != term:
                del self._flows[name]
                running = None
            if term is None:
                continue
            if running is None:
                running = self._flows[name] = _Flow(self, broker)
            running.pump(broker.now_ms())
        serving = self._serving()
        if serving is None:
            return
        if popping and not self._busy and self.rng.random() < self.p_pop:
            self._pop(serving)
        self._ack_due(serving)

    def _serving(self) -> StaticBroker | None:
        """The broker the consumer's route names id 0, if it serves pops now."""
        name = self.sim.routed_to
        broker = self.sim.brokers.get(name) if name is not None else None
        if broker is None or broker.group != GROUP or _term(broker) is None:
            return None
        return broker

    # -- the revive flows --------------------------------------------------------------

    def _read_remote(self, broker: StaticBroker, read: ReadMessage
                     ) -> MessageRecord | Unread:
        """The message from the first replica of its group ``broker`` reaches that holds
        it, by broker id; ``NOT_HERE`` when none does."""
        for replica in sorted(self.sim.group_members(read.broker_name),
                              key=lambda b: b.broker_id):
            if not broker.linked(replica):
                continue
            record = popped_record(replica.log, read, replica.log.read_record)
            if record is not None:
                return record
        return Unread.NOT_HERE

    def _check_not_acked(self, running: _Flow, put: Revive) -> None:
        key = (put.checkpoint.merge_key, put.offset)
        broker = running.broker
        read = ReadRevive(0, 0, running.flow.next_read)
        for record in revive_records(broker.log, REVIVE_TOPIC, read, broker.log.max_offset,
                                     broker.log.read_record):
            if _acks(record, key):
                self.sim.violation(
                    f"{broker.name} revives {put.checkpoint.topic} offset {put.offset} of "
                    f"the pop at {put.checkpoint.pop_time} (its clock), whose ack it read "
                    f"at revive-queue offset {record.queue_offset}")

    # -- the consumer ------------------------------------------------------------------

    def _pop(self, broker: StaticBroker) -> None:
        invisible = self.rng.choice([500, 1000, 3000])
        header = PopHeader(POP_GROUP, TOPIC, -1, 8, invisible, 0, 0, 1)
        plan = plan_pop(
            broker.log, header, Subscription(),
            topic=TopicConfig(TOPIC, TOPIC_QUEUES, TOPIC_QUEUES),
            retry=TopicConfig(RETRY_TOPIC, 1, 1), random_q=self.rng.randrange(100),
            pop_offset=lambda topic, queue: broker.offsets.query(POP_GROUP, topic, queue),
            confirm_offset=broker.log.max_offset, pop_from_retry_probability=20,
            scan_limit=64)
        pick = next((p for p in plan.picks if p.entries), None)
        if pick is None:
            return
        ck = pick.checkpoint(header, broker.now_ms(), GROUP)
        self._busy = True
        acting = broker.acting

        def done(result: EscapeResult) -> None:
            self._busy = False
            if not result.ok:
                return
            broker.offsets.commit(POP_GROUP, pick.topic, pick.queue_id, pick.next_offset,
                                  broker.now_ms())
            self.acting_pops += acting
            acks = {o: self.sim.now + self.rng.randrange(invisible * 2)
                    for o in ck.offsets if self.rng.random() < self.p_ack}
            self.popped[ck.merge_key] = _Popped(ck, self.sim.now, acks)

        broker.put_own(revive_message(ck, REVIVE_TOPIC, 0), done)

    def _ack_due(self, broker: StaticBroker) -> None:
        for key, popped in self.popped.items():
            for offset, at in list(popped.ack_at.items()):
                if at > self.sim.now or (key, offset) in self._acking:
                    continue
                del popped.ack_at[offset]
                self._ack(broker, popped.ck, offset)

    def _ack(self, broker: StaticBroker, ck: CheckPoint, offset: int) -> None:
        receipt = Receipt(ck.start_offset, ck.pop_time, ck.invisible_time, 0,
                          topic_kind(ck.topic), ck.broker_name, ck.queue_id, offset)
        if receipt_refusal(receipt, topic=ck.topic, group=ck.group, queue_id=ck.queue_id,
                           offset=offset, now_ms=broker.now_ms(), revive_queue_num=1):
            return  # stale (or a clock ahead): the message comes back
        key = (ck.merge_key, offset)
        self._acking.add(key)
        ack = AckMsg(ck.topic, ck.group, ck.queue_id, ck.start_offset, ck.pop_time,
                     ck.broker_name, (offset,))

        def done(result: EscapeResult) -> None:
            self._acking.discard(key)
            (self.acked if result.ok else self.maybe_acked).add(key)

        broker.put_own(revive_message(ack, REVIVE_TOPIC, 0), done)

    # -- liveness ----------------------------------------------------------------------

    def unresolved(self) -> list[str]:
        """Acknowledged pops' messages neither acked nor revived yet."""
        done = self.acked | self.revived | self._acking
        left = {(key, o): p for key, p in self.popped.items() for o in p.ck.offsets
                if (key, o) not in done}
        if left and left.keys() <= self.maybe_acked:  # a scan of the logs, rarely
            left = {key: p for key, p in left.items() if not self._ack_stored(key)}
        return [f"{p.ck.topic} offset {key[1]} of the pop at {p.at} ms"
                for key, p in left.items()]

    def _ack_stored(self, key: Key) -> bool:
        """Whether some broker's revive topic holds an ack of ``key``."""
        for broker in self.sim.brokers.values():
            read = ReadRevive(0, 0, broker.log.queue_max_offset(REVIVE_TOPIC, 0))
            if any(_acks(record, key) for record in revive_records(
                    broker.log, REVIVE_TOPIC, read, broker.log.max_offset,
                    broker.log.read_record)):
                return True
        return False


def _acks(record: ReviveRecord, key: Key) -> bool:
    """Whether revive record ``record`` is an ack of ``key``."""
    if record.tags != ACK_TAG:
        return False
    try:
        ack = decode_ack(record.body, batch=False)
    except RecordRefused:
        return False
    return ack.merge_key == key[0] and key[1] in ack.offsets
