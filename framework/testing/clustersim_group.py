"""The consumer group of the cluster simulation: its members, their faults, the consume invariants.

``ConsumerGroup`` runs 1 or 2 ``SimConsumer``s (from a random stream of its
own, like the name servers', so the rest of a seed's run draws the same
numbers whatever the group does), picks whether the brokers serve pulls
from slaves (``slave_read_enable``, and a small memory window so that a
pull far behind is pointed at one), crashes and restarts the consumers, cuts
their links to the brokers, and keeps the ledger the invariants read:

- **consistent pulls**: every record a broker answers a pull with is a whole
  record of its log, of the pulled queue, at increasing queue offsets from
  the pulled one, and within its confirm offset (consumers read only what
  every replica the master counts holds, so a failover never takes back a
  message a consumer saw);
- **in order**: per queue, one holding of it (one pull stream) delivers
  messages in increasing queue offsets, from the offset it pulled;
- **at-least-once offsets**: an offset a consumer commits (on a pull or by
  UPDATE_CONSUMER_OFFSET) never passes the first offset of its stream not
  consumed by its listener (or skipped by the broker's correction), so a
  restarted consumer resumes at or before the first unconsumed message;
- **every acknowledged message is eventually consumed** (liveness): once
  faults heal, within ``CONSUME_HEAL_LIMIT_MS`` the group has consumed every
  acked message except those an unclean election may have lost, and those
  acked after one at a queue offset below what a broker of an epoch before
  it served to a consumer (the history the election replaced, which a
  deposed master may still serve a while: the group's offsets count that
  history's messages there as consumed; ``possibly_skipped``).

Duplicates are allowed (and counted): a consumer that crashes, or loses a
queue, before its offsets are stored, and a new master holding a copy of the
offsets older than its predecessor's, deliver again.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from triomq.broker.consume.core.pull import PullAnswer, PullHeader
from triomq.client.core.message import MessageExt
from triomq.protocol import message
from triomq.testing.clustersim_consumer import (
    ConsumerTiming,
    HeldQueue,
    SimConsumer,
    consumer_name,
)
from triomq.testing.clustersim_parts import TOPIC_QUEUES, WAITING_TOPICS
from triomq.testing.clustersim_pop import is_pop_topic

if TYPE_CHECKING:
    from triomq.testing.clustersim import Simulation
    from triomq.testing.clustersim_broker import SimBroker

#: After healing: every acknowledged message consumed within this.
CONSUME_HEAL_LIMIT_MS = 15_000


class ConsumerGroup:
    """The simulation's consumers and what they consumed."""

    def __init__(self, sim: Simulation, count: int | None) -> None:
        self.sim = sim
        self.rng = random.Random(f"consumers-{sim.seed}")
        rng = self.rng
        if count is None:
            count = rng.choice([1, 2]) if sim.namesrv_names else 0
        if count and not sim.namesrv_names:
            raise ValueError("consumers find the brokers through name servers: need one")
        self.p_crash = rng.choice([0.0, 0.002, 0.004])
        self.p_partition = rng.choice([0.0, 0.003])
        #: The brokers' ``slave_read_enable``, and the bytes behind a log's end a pull
        #: counts as in memory (a pull reading further back is pointed at a slave).
        self.slave_read_enable = rng.random() < 0.5
        self.memory_window = rng.choice([1 << 62, 4096])
        self.consumers = {
            name: SimConsumer(name, sim, ConsumerTiming(), random.Random(rng.getrandbits(64)))
            for name in (consumer_name(i) for i in range(1, count + 1))}
        #: Body -> how many times a listener consumed it.
        self.deliveries: dict[bytes, int] = {}
        #: (epoch of the broker, queue id) -> the end of what it served to consumers.
        self.served: dict[tuple[int, int], int] = {}
        self._acked: dict[bytes, tuple[int, int, bytes] | None] = {}
        #: Broker -> when (virtual ms) a pull it answered last brought messages.
        self.found_at: dict[str, int] = {}

    # -- the members ---------------------------------------------------------------------

    def members(self) -> list[str]:
        """The group's client ids as a broker would list them: the consumers running."""
        return sorted(name for name, c in self.consumers.items() if c.up)

    def crash(self, name: str, for_ms: int) -> None:
        """Crash a consumer (restarted after ``for_ms``)."""
        self.consumers[name].crash()
        self.sim.down_until[name] = self.sim.now + for_ms

    def chaos(self) -> None:
        """Maybe crash a consumer, or cut one from one broker or from all of them."""
        rng, sim = self.rng, self.sim
        if not self.consumers:
            return
        if self.p_crash and rng.random() < self.p_crash:
            up = [n for n in sorted(self.consumers) if self.consumers[n].up]
            if up:
                self.crash(rng.choice(up), rng.randint(100, 3000))
        if self.p_partition and rng.random() < self.p_partition:
            consumer = rng.choice(sorted(self.consumers))
            if rng.random() < 0.5:
                sim.network.partition({consumer}, {rng.choice(sorted(sim.brokers))},
                                      one_way=rng.random() < 0.5)
            else:
                sim.network.partition({consumer}, set(sim.brokers))

    # -- the ledger and the invariants ----------------------------------------------------

    def answered(self, broker: SimBroker, header: PullHeader, answer: PullAnswer) -> None:
        """A broker answers a pull: its records are its log's, of the queue, confirmed."""
        confirm = broker.term.confirmed(broker.log.max_offset)
        last = header.queue_offset - 1
        for offset, size in answer.ranges:
            try:
                record, whole = message.decode(broker.log.read(offset, size), 0)
            except message.RecordError as exc:
                self.sim.violation(f"{broker.name} answered a pull with bytes at {offset} "
                                   f"that are not a record: {exc}")
                return
            where = f"{broker.name} answered a pull of {header.topic}:{header.queue_id} " \
                    f"from {header.queue_offset} with the record at {offset}"
            if whole != size or (record.topic, record.queue_id) != (header.topic,
                                                                    header.queue_id):
                self.sim.violation(f"{where}, of {record.topic}:{record.queue_id}")
            if record.queue_offset <= last:
                self.sim.violation(f"{where}, queue offset {record.queue_offset} after {last}")
            if offset + size > confirm:
                self.sim.violation(f"{where}, past its confirm offset {confirm}")
            last = record.queue_offset
        if answer.ranges:
            key = (broker.term.epoch, header.queue_id)
            self.served[key] = max(self.served.get(key, 0), last + 1)

    def pulled(self, consumer: SimConsumer, held: HeldQueue, broker: str, offset: int,
               messages: tuple[MessageExt, ...]) -> None:
        """A consumer read a pull's answer: in queue order, from the offset it pulled."""
        if messages:
            self.found_at[broker] = self.sim.now
        for pulled in messages:
            if pulled.queue_offset < offset or pulled.queue_offset <= held.delivered:
                self.sim.violation(
                    f"consumer {consumer.name} got {pulled.topic}:{pulled.queue_id} offset "
                    f"{pulled.queue_offset} from {broker} pulling from {offset}, after "
                    f"offset {held.delivered} in the same stream")
            held.delivered = pulled.queue_offset

    def consumed(self, consumer: SimConsumer, pulled: MessageExt) -> None:
        """A listener consumed a message."""
        self.deliveries[pulled.body] = self.deliveries.get(pulled.body, 0) + 1

    def committing(self, consumer: SimConsumer, held: HeldQueue, offset: int) -> None:
        """A consumer sends ``offset`` to store: not past what its listener consumed."""
        if held.start >= 0 and offset > held.first_not_done():
            self.sim.violation(
                f"consumer {consumer.name} commits offset {offset} of "
                f"{held.pull.queue.topic}:{held.pull.queue.queue_id}, past offset "
                f"{held.first_not_done()} it has not consumed (stream from {held.start})")

    def _replaced(self, queue_id: int) -> int:
        """How far consumers were served the queue from a history an unclean election
        replaced (by brokers of an epoch before the last one)."""
        return max((end for (epoch, q), end in self.served.items()
                    if q == queue_id and epoch < self.sim.relaxed_before), default=0)

    def _acked_messages(self) -> list[tuple[int, int, bytes]]:
        """(queue id, queue offset, body) of the acked messages of the topic the
        invariants check (a delayed or timer message waiting in
        ``SCHEDULE_TOPIC_XXXX`` or ``rmq_sys_wheel_timer`` is consumed once
        delivered: its delivery is an acked message of the topic)."""
        out = []
        for acked in self.sim.checked_acked():
            found = self._acked.get(acked.record)
            if found is None:
                record = message.decode(acked.record, 0)[0]
                # Pops' checkpoints, acks and revived copies are not the topic's.
                found = self._acked[acked.record] = (
                    None if record.topic in WAITING_TOPICS or is_pop_topic(record.topic)
                    else (record.queue_id, record.queue_offset, record.body))
            if found is not None:
                out.append(found)
        return out

    def unconsumed(self) -> list[bytes]:
        """Bodies of acknowledged messages no listener consumed yet (see the module on
        those an unclean election excuses)."""
        replaced = {q: self._replaced(q) for q in range(TOPIC_QUEUES)}
        return [body for queue_id, offset, body in self._acked_messages()
                if body not in self.deliveries and offset >= replaced[queue_id]]

    @property
    def possibly_skipped(self) -> int:
        """Acked messages the liveness check excuses after an unclean election."""
        replaced = {q: self._replaced(q) for q in range(TOPIC_QUEUES)}
        return sum(1 for queue_id, offset, _ in self._acked_messages()
                   if offset < replaced[queue_id])

    @property
    def duplicates(self) -> int:
        """Deliveries beyond the first, over every message."""
        return sum(count - 1 for count in self.deliveries.values())
