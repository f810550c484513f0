"""A simulated master's timer messages: the broker's timer core pumped over virtual time.

While a broker is master, one task runs
``triomq.broker.secondary.core.timer_wheel.TimerDelivery``, as
``triomq.broker.secondary.timer_service`` runs it over trio: it rebuilds
its wheel from the broker's checkpoint, scans ``rmq_sys_wheel_timer``
queue 0 up to the confirm offset (the consume queue ``MemLog`` makes from
its records), ticks on the broker's clock and puts each due message
through the broker's own put (``SimPuts.put_own``, the local escape
bridge's), the checkpoint moving only past what a PUT_OK stored. The task
ends with the master term.

The checkpoint survives a crash (``timerCheckpoint.json``) but a slave does
not copy its master's (the broker does, every ``slave_synchronize_period``):
a new master rebuilds from its own, at least once (messages its
predecessor delivered may come twice; none is lost). A message is due by
the delivering master's clock: its delivery's store time is at or after its
slot's end.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from triomq.broker.consume.core.pull_lookup import confirmed_entries
from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult
from triomq.broker.secondary.core.schedule_put import TIMER_TOPIC
from triomq.broker.secondary.core.timer_checkpoint import TimerCheckpointTable
from triomq.broker.secondary.core.timer_wheel import (
    Deliver,
    ReadEntries,
    ReadRecord,
    Skipped,
    StoreCheckpoint,
    TimerAction,
    TimerDelivery,
    WakeAt,
)
from triomq.protocol.message import decode
from triomq.testing.clustersim_net import TaskGen, wait_for
from triomq.testing.clustersim_parts import Term

if TYPE_CHECKING:
    from triomq.testing.clustersim_broker import SimBroker


class SimTimer:
    """The timer messages of one simulated broker."""

    def __init__(self, broker: SimBroker) -> None:
        self.broker = broker
        #: Kept across crashes, as ``config/timerCheckpoint.json``.
        self.table = TimerCheckpointTable()
        #: The deliveries' puts, made by ``step`` (a put may crash the broker, which
        #: must not happen inside one of its tasks).
        self._puts: list[tuple[EscapedMessage, Callable[[EscapeResult], None]]] = []

    def step(self) -> None:
        """Make the puts the task asked for."""
        puts, self._puts = self._puts, []
        for message, reply in puts:
            if self.broker.up:
                self.broker.puts.put_own(message, reply)

    def start(self, term: Term) -> list[int]:
        """The master term began: its task."""
        precision = self.broker.puts.settings.timer.precision_ms
        return [self.broker.tasks.spawn(self._deliver(
            term, TimerDelivery(precision, self.table.checkpoint)))]

    def _deliver(self, term: Term, flow: TimerDelivery) -> TaskGen:
        broker = self.broker
        actions: deque[TimerAction] = deque(flow.start(broker.now_ms()))
        #: The puts under way, and those that ended: (queue offset, answer).
        in_flight = 0
        ended: list[tuple[int, EscapeResult]] = []
        while True:
            while actions:
                action = actions.popleft()
                if isinstance(action, StoreCheckpoint):
                    self.table.update(action.checkpoint, broker.now_ms())
                elif isinstance(action, Skipped):
                    broker.sim.violation(f"{broker.name}: timer message "
                                         f"{action.queue_offset} skipped: {action.reason}")
                elif isinstance(action, ReadEntries):
                    log = broker.log
                    found = confirmed_entries(log, TIMER_TOPIC, action.queue_id, action.start,
                                              action.max_count,
                                              term.confirmed(log.max_offset))
                    actions.extend(flow.entries_read(
                        *found, broker.now_ms(),
                        log_max=log.queue_max_offset(TIMER_TOPIC, action.queue_id)))
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
                actions.extend(flow.put_done(
                    key, answer.ok, broker.now_ms(),
                    illegal=answer.code == ResponseCode.MESSAGE_ILLEGAL))
