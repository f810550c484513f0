"""A simulated master's delayed messages: the broker's schedule core pumped over virtual time.

While a broker is master, one task per delay level runs
``triomq.broker.secondary.core.schedule.LevelDelivery``, as
``triomq.broker.secondary.schedule_service`` runs it over trio: it reads
``SCHEDULE_TOPIC_XXXX``'s queue of its level up to the confirm offset (the
consume queues ``MemLog`` makes from its records, their tags codes the
delivery times by RocketMQ's default ``messageDelayLevel``), waits on the
broker's clock and puts the due messages through the broker's own put
(``SimPuts.put_own``, the local escape bridge's), up to the core's
``MAX_IN_FLIGHT`` at once, its offset moving only past what a PUT_OK
stored (and everything before it). The tasks end with the master term.

The offsets survive a crash (``delayOffset.json``) but a slave does not
copy its master's: a new master delivers from its own, at least once
(messages its predecessor delivered may come twice; none is lost).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from triomq.broker.consume.core.pull_lookup import confirmed_entries
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult
from triomq.broker.secondary.core.delay_offsets import DelayOffsetTable
from triomq.broker.secondary.core.schedule import (
    Deliver,
    LevelDelivery,
    ReadEntries,
    ReadRecord,
    ScheduleAction,
    Skipped,
    StoreOffset,
    WakeAt,
)
from triomq.protocol.commitlog_layout import DEFAULT_DELAY_LEVELS
from triomq.protocol.delay_levels import SCHEDULE_TOPIC
from triomq.protocol.message import decode
from triomq.testing.clustersim_net import TaskGen, wait_for
from triomq.testing.clustersim_parts import Term

if TYPE_CHECKING:
    from triomq.testing.clustersim_broker import SimBroker


class SimSchedule:
    """The delayed messages of one simulated broker."""

    def __init__(self, broker: SimBroker) -> None:
        self.broker = broker
        #: Kept across crashes, as ``config/delayOffset.json``.
        self.offsets = DelayOffsetTable()
        #: The deliveries' puts, made by ``step`` (a put may crash the broker, which
        #: must not happen inside one of its tasks).
        self._puts: list[tuple[EscapedMessage, Callable[[EscapeResult], None]]] = []

    def step(self) -> None:
        """Make the puts the tasks asked for."""
        puts, self._puts = self._puts, []
        for message, reply in puts:
            if self.broker.up:
                self.broker.puts.put_own(message, reply)

    def start(self, term: Term) -> list[int]:
        """The master term began: its tasks, one per level."""
        return [self.broker.tasks.spawn(self._deliver(term, LevelDelivery(
                    level, delay, self.offsets.offset(level))))
                for level, delay in enumerate(DEFAULT_DELAY_LEVELS, 1)]

    def _deliver(self, term: Term, flow: LevelDelivery) -> TaskGen:
        broker = self.broker
        actions: deque[ScheduleAction] = deque(flow.start(broker.now_ms()))
        #: The puts under way, and those that ended: (queue offset, answer).
        in_flight = 0
        ended: list[tuple[int, EscapeResult]] = []
        while True:
            while actions:
                action = actions.popleft()
                if isinstance(action, StoreOffset):
                    self.offsets.update(action.level, action.offset, broker.now_ms())
                elif isinstance(action, Skipped):
                    broker.sim.violation(f"{broker.name}: delayed message "
                                         f"{action.queue_offset} of level {flow.level} "
                                         f"skipped: {action.reason}")
                elif isinstance(action, ReadEntries):
                    found = confirmed_entries(broker.log, SCHEDULE_TOPIC, action.queue_id,
                                              action.start, action.max_count,
                                              term.confirmed(broker.log.max_offset))
                    actions.extend(flow.entries_read(*found, broker.now_ms()))
                elif isinstance(action, ReadRecord):
                    record = decode(broker.log.read(action.physical_offset, action.size))[0]
                    actions.extend(flow.record_read(record, broker.now_ms()))
                elif isinstance(action, Deliver):
                    in_flight += 1
                    self._puts.append((action.message, lambda answer, key=action.queue_offset:
                                       ended.append((key, answer))))
                elif isinstance(action, WakeAt):
                    yield from wait_for(lambda at=action.at_ms: broker.now_ms() >= at)
                    actions.extend(flow.woke(broker.now_ms()))
            if not in_flight:
                return
            yield from wait_for(lambda: bool(ended))
            answers, ended[:] = list(ended), []
            in_flight -= len(answers)
            for key, answer in answers:
                actions.extend(flow.put_done(key, answer.ok, broker.now_ms()))
