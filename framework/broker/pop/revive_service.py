"""The revive of popped messages at run time: one ``ReviveQueue`` flow per revive queue.

``triomq.broker.pop.core.revive`` holds the rules; in each master term this
driver runs one flow per queue of ``rmq_sys_REVIVE_LOG_<cluster>``
(``revive_queue_num``), reading the queue as consumers do (up to the
confirm offset), the popped messages from the commit log, and putting the
revived copies through the escape bridge, never onto the log directly.
Each flow starts from its queue's revive offset, the consumer offset of
group ``CID_RMQ_SYS_REVIVE_GROUP`` on that queue, as RocketMQ keeps it: it is
in ``config/consumerOffset.json``, which slaves copy, so a new master goes on
where the old one was. A slave acting for its absent master runs the same
flows over its own revive topic (``acting-revive``), its revived copies
escaped to another master's pop retry topic, its offsets its own consumer
offsets (which the returning master's pre-online takes back).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

import trio

from triomq.broker.components import ComponentView
from triomq.broker.config import BrokerConfig
from triomq.broker.consume.offset_service import ConsumerOffsetService
from triomq.broker.core.escape_bridge import EscapeBridge
from triomq.broker.pop.core.receipt import REVIVE_GROUP, revive_topic
from triomq.broker.pop.core.revive import (
    NotRevived,
    ReadMessage,
    ReadRevive,
    Revive,
    ReviveAction,
    ReviveQueue,
    ReviveRecord,
    StoreReviveOffset,
    WakeAt,
    popped_record,
    revive_records,
)
from triomq.clock import EpochClock
from triomq.protocol.message import MessageRecord, RecordError
from triomq.store import CommitLog, StoreError

__all__ = ["ReviveService"]

log = logging.getLogger("triomq.broker")


class ReviveService:
    """The master term's revive of un-acked pops (``revive``), one task per revive queue."""

    def __init__(self, *, config: BrokerConfig, log: CommitLog,
                 offsets: ConsumerOffsetService, broker: ComponentView, bridge: EscapeBridge,
                 clock: EpochClock, ensure_retry_topic: Callable[[str], bool],
                 ensure_revive_topic: Callable[[], None]) -> None:
        self.config = config
        self.log = log
        self.offsets = offsets
        self.broker = broker
        self.bridge = bridge
        self.clock = clock
        self.ensure_retry_topic = ensure_retry_topic
        self.ensure_revive_topic = ensure_revive_topic
        self.topic = revive_topic(config.cluster_name)
        #: The running flows, by revive queue (for tests and admin views).
        self.flows: dict[int, ReviveQueue] = {}

    async def revive(self, bridge: EscapeBridge | None = None) -> None:
        """A term's task: every revive queue's flow, until cancelled, its revived copies
        through ``bridge`` (the master's own by default; an acting slave's escapes them
        to another master, and creates no topic of its own)."""
        own = bridge is None
        if own:
            self.ensure_revive_topic()
        async with trio.open_nursery() as nursery:
            for queue_id in range(self.config.revive_queue_num):
                done = self.offsets.table.query(REVIVE_GROUP, self.topic, queue_id)
                flow = self.flows[queue_id] = ReviveQueue(
                    queue_id, -1 if done is None else done,
                    broker_name=self.config.broker_name,
                    interval_ms=self.config.revive_interval)
                nursery.start_soon(self._run, flow, bridge or self.bridge, own)

    async def _run(self, flow: ReviveQueue, bridge: EscapeBridge, own: bool) -> None:
        actions: deque[ReviveAction] = deque(flow.start(self.clock()))
        while actions:
            action = actions.popleft()
            if isinstance(action, ReadRevive):
                actions.extend(flow.records_read(self._read_revive(action), self.clock()))
            elif isinstance(action, ReadMessage):
                record = popped_record(self.log, action, self._record)
                actions.extend(flow.message_read(record, self.clock()))
            elif isinstance(action, Revive):
                ok = self.ensure_retry_topic(action.message.topic) if own else True
                if ok:
                    result = await bridge.put_message(action.message)
                    ok = result.stored
                    if not ok:
                        log.info("revive into %s failed (%d %s); retrying",
                                 action.message.topic, result.code, result.remark)
                actions.extend(flow.put_done(ok, self.clock()))
            elif isinstance(action, StoreReviveOffset):
                self.offsets.commit(REVIVE_GROUP, self.topic, action.queue_id, action.offset)
            elif isinstance(action, NotRevived):
                log.warning("revive queue %d: %s", flow.queue_id, action.reason)
            elif isinstance(action, WakeAt):
                await self.clock.sleep_until(action.at_ms)
                actions.extend(flow.woke(self.clock()))

    def _read_revive(self, read: ReadRevive) -> list[ReviveRecord]:
        return revive_records(self.log, self.topic, read, self.broker.confirm_offset,
                              self._record)


    def _record(self, physical: int) -> MessageRecord | None:
        try:
            return self.log.read_record(physical)
        except (StoreError, RecordError) as exc:
            log.warning("record at %d unreadable for the revive: %s", physical, exc)
            return None
