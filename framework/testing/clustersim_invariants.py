"""The cluster simulation's invariants on the committed state and the brokers' logs.

``Invariants``, a base of ``clustersim.Simulation``, keeps the books of what
the nodes report through its hooks (an event a controller applied, a role a
broker took, a log a slave cut, a put a master acked) and checks them as
each report comes and as the simulation steps (``check_holders``,
``check_prefixes``): controllers apply the same history and its epochs never
go back; one broker per master epoch completes synchronous puts, each over a
set holding the SyncStateSet committed in its epoch; every SyncStateSet
member and every later master holds every acked message (but what an
unclean election may lose); SyncStateSet members hold the master's log up
to its confirm offset. ``clustersim``'s docstring states every invariant of
the simulation; a broken one raises ``Violation``, naming the seed's replay
command.
"""

from __future__ import annotations

import attrs

from triomq.broker.secondary.core.schedule_put import PROPERTY_TIMER_OUT_MS
from triomq.broker.secondary.core.timer_wheel import PROPERTY_TIMER_DEQUEUE_MS
from triomq.controller import ElectMasterEvent
from triomq.controller.core.events import Event
from triomq.controller.core.group import BrokerGroup
from triomq.protocol.message import PROPERTY_UNIQ_KEY, MessageRecord, decode
from triomq.testing.clustersim_broker import GROUP, SimBroker
from triomq.testing.clustersim_controller import SimController
from triomq.testing.clustersim_parts import WAITING_TOPICS, Term
from triomq.testing.seeds import Violation


@attrs.frozen
class AckedMessage:
    """A put the master completed (PUT_OK): where it is and in which epoch."""

    offset: int
    record: bytes
    epoch: int
    broker: str
    #: When it was acked (virtual ms).
    at: int = 0


class Invariants:
    """The invariants' bookkeeping and checks, a base of ``Simulation`` (module docstring)."""

    # Set by the simulation; the checks read them.
    seed: int
    now: int
    brokers: dict[str, SimBroker]

    def __init__(self) -> None:
        #: The module whose ``--seeds 1 --start SEED`` replays this run.
        self.replay_module = "triomq.testing.clustersim"
        self.acked: list[AckedMessage] = []
        self.writers: dict[int, str] = {}  # master epoch -> the broker that completed puts
        self.relaxed_before = 0  # messages acked in an epoch before this are not checked
        self.possibly_lost = 0
        self.history: dict[int, tuple] = {}  # Raft index -> group state after applying it
        self.group_state: BrokerGroup | None = None
        self.top_index = 0
        self.unclean_elections: list[int] = []
        #: Master epoch -> the SyncStateSet (broker ids) last committed in it.
        self.sync_state_sets: dict[int, frozenset[int]] = {}
        #: Committed events that changed the group, in log order.
        self.committed_events: list[Event] = []
        #: Master epoch -> the broker the controllers committed as its master.
        self.epoch_masters: dict[int, str] = {}
        self._decoded: dict[bytes, MessageRecord] = {}

    # -- hooks called by the nodes ----------------------------------------------------

    def violation(self, what: str) -> None:
        """Raise a ``Violation`` naming the seed and the replay command."""
        raise Violation(f"seed {self.seed} at {self.now} ms: {what} (replay: python -m "
                        f"{self.replay_module} --seeds 1 --start {self.seed})")

    def on_applied(self, controller: SimController, index: int, event: Event,
                   before: BrokerGroup | None, changed: bool) -> None:
        """A controller applied a committed event: same history everywhere, epochs only grow."""
        after = controller.manager.group(GROUP)
        state = None if after is None else (after.master_broker_id, after.master_epoch,
                                            after.sync_state_set, after.sync_state_set_epoch,
                                            after.members)
        seen = self.history.setdefault(index, state)
        if seen != state:
            self.violation(f"controller {controller.id} reached {state} at index {index}, "
                           f"another controller {seen}")
        if before is not None and after is not None and (
                after.master_epoch < before.master_epoch
                or after.sync_state_set_epoch < before.sync_state_set_epoch):
            self.violation(f"controller {controller.id}: epochs went back applying {event}")
        if index > self.top_index:
            self.top_index = index
            self.group_state = after
            if after is not None and after.master_address is not None:
                self.epoch_masters.setdefault(after.master_epoch, after.master_address)
            if changed:
                self.committed_events.append(event)
            if after is not None:
                self.sync_state_sets[after.master_epoch] = frozenset(after.sync_state_set)
            if (changed and isinstance(event, ElectMasterEvent) and before is not None
                    and event.new_master_broker_id is not None and before.master_epoch > 0
                    and event.new_master_broker_id not in before.sync_state_set):
                # Unclean election: what was acked before it may be lost (module doc).
                self.unclean_elections.append(event.master_epoch)
                exposed = [m for m in self.acked if self.relaxed_before <= m.epoch]
                self.relaxed_before = event.master_epoch
                self.possibly_lost += len(exposed)
            self.check_holders()

    def on_role(self, broker: SimBroker, term: Term) -> None:
        """A broker took a role: a new master must hold every acked message."""
        if term.role == "master":
            self._check_holds(broker, f"new master of epoch {term.epoch}",
                              max_epoch=term.epoch)

    def on_truncated(self, broker: SimBroker) -> None:
        """A slave cut its log: it must not cut what it must hold."""
        self.check_holders()

    def on_acked(self, broker: SimBroker, term: Term, offset: int, record: bytes,
                 members: frozenset[int]) -> None:
        """A master completed a synchronous put (``members``: the broker ids it counted)."""
        writer = self.writers.setdefault(term.epoch, broker.name)
        if writer != broker.name:
            self.violation(f"two masters completed puts in epoch {term.epoch}: "
                           f"{writer} and {broker.name}")
        committed = self.sync_state_sets.get(term.epoch, frozenset())
        if not committed <= members:
            self.violation(f"{broker.name} acked over {sorted(members)} while the "
                           f"SyncStateSet committed in epoch {term.epoch} is "
                           f"{sorted(committed)}")
        message = AckedMessage(offset, record, term.epoch, broker.name, self.now)
        self.acked.append(message)
        group = self.group_state
        for broker_id in sorted(members):
            name = group.address_of(broker_id) if group is not None else None
            holder = self.brokers.get(name) if name is not None else None
            if holder is not None and holder.log.read(offset, len(record)) != record:
                self.violation(f"put at {offset} acked while {name} lacks it")
        self.check_holders()

    # -- invariants -----------------------------------------------------------------

    @property
    def delayed_acked(self) -> int:
        """How many acked messages are delayed or timer ones stored to wait."""
        return sum(1 for acked in self.acked if self._record(acked).topic in WAITING_TOPICS)

    @property
    def topic_messages_acked(self) -> int:
        """How many distinct messages (bodies) of the topic were acked."""
        return len({record.body for record in map(self._record, self.acked)
                    if record.topic not in WAITING_TOPICS})

    def _record(self, acked: AckedMessage) -> MessageRecord:
        record = self._decoded.get(acked.record)
        if record is None:
            record = self._decoded[acked.record] = decode(acked.record)[0]
        return record

    def undelivered(self, acked_by: int) -> list[str]:
        """The ``UNIQ_KEY`` of every delayed or timer message acked by ``acked_by``
        (virtual ms; checked, as ``checked_acked``) no acked put delivered to its topic
        yet."""
        waiting, delivered = [], set()
        for acked in self.checked_acked():
            record = self._record(acked)
            key = record.properties.get(PROPERTY_UNIQ_KEY, "")
            if record.topic in WAITING_TOPICS:
                if acked.at <= acked_by:
                    waiting.append(key)
            else:
                delivered.add(key)
        return [key for key in waiting if key not in delivered]

    def check_timer_times(self, precision_ms: int) -> None:
        """Every acked delivery of a timer message is put at or after its slot's end, by
        the delivering master's clock (``TIMER_DEQUEUE_MS``, which a later copy keeps:
        a pop's revive or a retry, stored by another broker's clock): never before its
        time."""
        for acked in self.checked_acked():
            record = self._record(acked)
            out = record.properties.get(PROPERTY_TIMER_OUT_MS)
            if record.topic in WAITING_TOPICS or out is None:
                continue
            dequeued = int(record.properties.get(PROPERTY_TIMER_DEQUEUE_MS,
                                                  record.store_timestamp))
            if dequeued < int(out) + precision_ms:
                self.violation(f"timer message {record.properties.get(PROPERTY_UNIQ_KEY)} "
                               f"delivered at {dequeued} by {acked.broker}, "
                               f"before its slot {out} ended")

    def checked_acked(self, max_epoch: int | None = None) -> list[AckedMessage]:
        """The acked messages the invariants check (not those an unclean election exposed)."""
        return [m for m in self.acked if m.epoch >= self.relaxed_before
                and (max_epoch is None or m.epoch <= max_epoch)]

    def _check_holds(self, broker: SimBroker, why: str, max_epoch: int | None = None) -> None:
        for message in self.checked_acked(max_epoch):
            if broker.log.read(message.offset, len(message.record)) != message.record:
                self.violation(f"acked message at {message.offset} (epoch {message.epoch}, "
                               f"by {message.broker}) missing on {broker.name}, {why}")

    def check_holders(self) -> None:
        """Every SyncStateSet member and the current master hold every acked message."""
        group = self.group_state
        if group is None:
            return
        for broker_id in sorted(group.sync_state_set):
            name = group.address_of(broker_id)
            if name in self.brokers:
                self._check_holds(self.brokers[name], f"member of SyncStateSet "
                                  f"{sorted(group.sync_state_set)} (epoch "
                                  f"{group.sync_state_set_epoch})")
        for broker in self.brokers.values():
            if broker.up and broker.term.role == "master":
                self._check_holds(broker, f"master of epoch {broker.term.epoch}",
                                  max_epoch=broker.term.epoch)

    def check_prefixes(self) -> None:
        """SyncStateSet members hold the master's log up to its confirm offset."""
        group = self.group_state
        if group is None or group.master_address not in self.brokers:
            return
        master = self.brokers[group.master_address]
        term = master.term
        if not master.up or term.role != "master" or term.epoch != group.master_epoch:
            return
        confirm = term.confirmed(master.log.max_offset)
        for broker_id in sorted(group.sync_state_set):
            name = group.address_of(broker_id)
            if name not in self.brokers:
                continue
            member = self.brokers[name].log
            if member.max_offset < confirm:
                self.violation(f"SyncStateSet member {name} ends at {member.max_offset}, "
                               f"below master {master.name}'s confirm offset {confirm}")
            if member.read(0, confirm) != master.log.read(0, confirm):
                self.violation(f"SyncStateSet member {name} differs from master "
                               f"{master.name} below its confirm offset {confirm}")
